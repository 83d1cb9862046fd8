"""The database server's clock, to compare this host's with.

The API tells the conductor until when it waits for each call
(``RequestContext.answer_by``, wall-clock seconds), so the clocks of the
API and conductor hosts must agree; each compared with the database
server's (which both reach) bounds how far apart they are.
"""

import datetime
import time

import sqlalchemy as sa

from cyborg.db.api import _sql
from cyborg.db.api import reader

# How far a host's clock may be from the database server's before the
# conductor and cyborg-status say so: far below [api]conductor_timeout
# (20 s by default), beyond what NTP leaves.
TOLERATED_SKEW = 5.0

_SERVER_UTC = {
    'mysql': sa.select(sa.func.utc_timestamp(6)),
    'postgresql': sa.select(sa.func.timezone('UTC',
                                             sa.func.clock_timestamp())),
}


@reader
def skew(context):
    """Seconds this host's clock is ahead of the database server's
    (negative: behind), to within half a round trip; None where the
    database has no clock of its own (SQLite runs in this process)."""
    return skew_on(_sql.connection(context))


def skew_on(connection):
    """``skew`` on a SQLAlchemy connection (a tool with no request
    context: cyborg-status)."""
    query = _SERVER_UTC.get(connection.dialect.name)
    if query is None:
        return None
    before = time.time()
    server = connection.scalar(query)
    after = time.time()
    return (before + after) / 2 - server.replace(
        tzinfo=datetime.timezone.utc).timestamp()
