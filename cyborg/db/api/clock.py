"""The database server's clock: the one clock every cyborg host shares.

``skew`` measures how far this host's clock is from it: the API and the
conductor time ``RequestContext.answer_by`` by the server's clock
(``cyborg.objects.clock.reference``), and ``cyborg-status`` and the
conductor's start warn when a host's clock is off (the times it writes,
``created_at`` and health times, are off too).
"""

import datetime

import sqlalchemy as sa

from cyborg.common import clock
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
    before = clock.host_clock()
    server = connection.scalar(query)
    after = clock.host_clock()
    return (before + after) / 2 - server.replace(
        tzinfo=datetime.timezone.utc).timestamp()
