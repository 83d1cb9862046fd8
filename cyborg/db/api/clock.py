"""The database server's clock: the one clock every cyborg host shares.

``skew`` measures how far this host's clock is from it, and
``reference`` is this host's clock less that skew: the API and the
conductor time ``RequestContext.answer_by`` by it, and every time a
conductor writes or compares with another's (``utcnow``: when a bind
started, when a Nova batch is due, health timers, programming marks,
``created_at``) is told by it, so that a conductor whose clock is off
neither fails another's binds early nor holds back what is due.
``cyborg-status`` and the conductor's start warn when a host's clock is
off all the same.
"""

import datetime

import sqlalchemy as sa

from cyborg.common import clock
from cyborg.common import context as cyborg_context
from cyborg.db import api as db_api
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


def _measure(context=None, passing=False):
    """``skew``, for ``reference``: None, and no transaction, where the
    database has no clock of its own (SQLite: a transaction opened here
    could share, and end, the caller's connection).  In ``passing`` (a
    time asked for, not a measurement), only once this process's database
    is started: starting it waits for the database, retrying for minutes
    when it is away, and a process must not hang at start on a time (the
    conductor's start-up jobs start it on threads of their own)."""
    if passing and not db_api.context_manager._factory._started:
        raise RuntimeError('the database is not started yet')
    if db_api.get_engine().dialect.name not in _SERVER_UTC:
        return None
    return skew(context or cyborg_context.get_admin_context())


reference = clock.ReferenceClock(_measure)


def utcnow():
    """Now by ``reference``, as the columns hold times (naive UTC)."""
    return reference.utcnow()


def this_moment():
    """This moment, to be told by ``reference`` once the database answers:
    a callable ``told(context)`` that measures this host's clock against
    the database server's (waiting for it) and returns the moment as the
    columns hold times.  For a process's start time, taken before its
    database is reached."""
    host_time = clock.host_clock()

    def told(context=None):
        skew = reference.measure(context) or 0.0
        return datetime.datetime.fromtimestamp(
            host_time - skew, datetime.timezone.utc).replace(tzinfo=None)
    return told
