"""Database access: small reader/writer functions, one module per noun.

This package holds the transaction machinery (one enginefacade for the
process, ``reader``/``writer``, ``write_retrying``); the functions that
read and write rows live in the module of the noun they touch:

  hosts            the hosts table (a report's digest, Placement sync flag)
  inventory        a host's devices, control paths, deployables, attributes
                   and attach handles read and written in bulk by a report
  devices          one device: read, list, status, lifecycle target
  deployables      one deployable: read, list, bind and program targets
  attributes       deployable attributes (the API's attribute resource)
  attach_handles   taking and releasing a handle for a bind
  health           the health state machine's columns of a host, and
                   the highest health reading number applied per agent
  device_profiles  device profiles
  arqs             accelerator requests: every ARQ read goes through
                   ``arqs.select``; every state change is a guarded UPDATE
  nova_events      bind outcomes Nova has not accepted yet
  placement_releases  Placement claims owed a release (an ARQ gone, an
                   allocation's own consumer)
  quotas           a project's quota usage and the lock quota-checked
                   creates take

Callers import the module they need (``from cyborg.db.api import arqs as
arq_db``).  Every function takes a RequestContext first; functions
decorated as ``reader``/``writer`` nest into the caller's transaction, so a
conductor step made of several of them commits once.  A ``reader``'s
transaction is a connection alone (Core statements through
``_sql.connection``; making, beginning and closing an ORM session cost a
read more than its statement's own Python); a ``writer``'s is an ORM
session, and a reader called inside a writer reads through that
session's connection.  Rows come back as
SQLAlchemy rows, model instances or plain dicts; nothing here knows
``cyborg.objects``.  Keep each function short and its query indexed.
"""

import contextlib
import random
import time
import urllib.parse

import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import enginefacade
from oslo_log import log as logging
from sqlalchemy.pool import base as pool_base

from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import timing

LOG = logging.getLogger(__name__)

context_manager = enginefacade.transaction_context()
reader = context_manager.reader.connection
writer = context_manager.writer


# A pooled connection unused for this long is pinged before it is used.
IDLE_BEFORE_PING = 1.0
_LAST_USED = 'cyborg_last_used'
_OPEN = 'cyborg_transaction_open'


def _tune_pool(engine):
    """Two round trips less per transaction than oslo.db's engine makes:

    - No ROLLBACK when a connection goes back to the pool with no
      transaction open.  An enginefacade session ends its transaction
      (COMMIT for a writer, ROLLBACK for a reader) before it gives the
      connection back; SQLAlchemy would roll back again, not knowing the
      transaction ended.  Its begin, commit and rollback events say so
      (``_OPEN``): a connection returned with a transaction open (dropped
      without being closed) is still rolled back, so no request ever
      reads through another's old snapshot.
    - A connection is pinged before use only when it has been idle for
      ``IDLE_BEFORE_PING`` seconds, not on every checkout as oslo.db's
      ``pool_pre_ping`` does: a dead one is then replaced (and the pool's
      older connections dropped) before the request uses it, as before.
      One used a moment ago is taken as alive; if the database went away
      in that moment the statement fails as a disconnect, which
      invalidates the pool the same way, and the request answers 503.

    oslo.db has options for neither, hence the pool's attributes.
    """
    pool = engine.pool
    pool._reset_on_return = pool_base.reset_none
    pool._pre_ping = False
    dialect = engine.dialect

    def connected(dbapi_connection, record):
        record.info[_LAST_USED] = time.monotonic()

    def checked_in(dbapi_connection, record):
        if record is not None:
            record.info[_LAST_USED] = time.monotonic()

    # Whether the connection's transaction is open, as SQLAlchemy began
    # and ended it (it reads no state from the driver or the server).  An
    # invalidated connection (the database went away) has no DBAPI
    # connection to describe: a new one starts unknown, and is rolled back
    # on return.
    def began(connection):
        if not connection.invalidated:
            connection.info[_OPEN] = True

    def ended(connection):
        if not connection.invalidated:
            connection.info[_OPEN] = False

    def reset(dbapi_connection, record, reset_state):
        if not reset_state.terminate_only and record.info.get(_OPEN, True):
            dialect.do_rollback(dbapi_connection)
            record.info[_OPEN] = False

    def checked_out(dbapi_connection, record, proxy):
        used = record.info.get(_LAST_USED)
        if used is not None and time.monotonic() - used < IDLE_BEFORE_PING:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as e:
            if dialect.is_disconnect(e, dbapi_connection, None):
                raise sa.exc.InvalidatePoolError(str(e)) from e
            raise

    sa.event.listen(engine, 'connect', connected)
    sa.event.listen(engine, 'checkin', checked_in)
    sa.event.listen(engine, 'checkout', checked_out)
    sa.event.listen(engine, 'begin', began)
    sa.event.listen(engine, 'commit', ended)
    sa.event.listen(engine, 'rollback', ended)
    sa.event.listen(engine, 'reset', reset)


context_manager.append_on_engine_create(_tune_pool)

# Attempts of one transaction that lost a lock conflict.
_WRITE_TRIES = 8


# Seconds a service waits for one answer of the database before the
# statement fails as a lost connection (MariaDB/MySQL: the driver's read
# and write timeouts; PostgreSQL: libpq's tcp_user_timeout, which bounds
# data the server's host never acknowledges), and that a transaction of
# a service may sit idle before the server ends its session (a process
# frozen in the middle of one: its row locks are released).
DATABASE_WAIT = 60
# Seconds a statement of a service waits for a row lock another
# transaction holds (InnoDB waits 50 s by default, PostgreSQL forever).
# A lock held that long is held by a stalled transaction: the write ends
# as a 503 rather than being run again (``stayed_locked``), before
# the API stops waiting for the conductor ([api]conductor_timeout, 20 s
# by default), so nothing is written after the API's answer.
LOCK_WAIT = 10

# MariaDB (10.3 and later) reads what follows ``/*M!100300`` in a
# statement; MySQL, which has no idle transaction timeout, skips it as a
# comment.
_MYSQL_SESSION = ('SET SESSION innodb_lock_wait_timeout = {lock_wait}'
                  '/*M!100300 , idle_transaction_timeout = {idle} */')
_POSTGRESQL_SESSION = ('-c lock_timeout={lock_wait}s '
                       '-c idle_in_transaction_session_timeout={idle}s')


def bounded_wait_parameters(connection, given='', wait=None,
                            lock_wait=None, idle=None):
    """The connection parameters (a query string) that keep a service
    from waiting forever on a database that stops answering (a network
    partition, a hung server) and on a row lock a stalled transaction
    holds, and that have the server end a transaction of the service
    left idle (``DATABASE_WAIT``, ``LOCK_WAIT``), leaving out any the URL
    ``connection`` or the operator's ``given`` parameters already set
    (an ``init_command`` or ``options`` of the operator's replaces the
    session settings); '' where the driver has none (SQLite) or all are
    set."""
    wait = DATABASE_WAIT if wait is None else wait
    session = {'lock_wait': LOCK_WAIT if lock_wait is None else lock_wait,
               'idle': DATABASE_WAIT if idle is None else idle}
    url = sa.engine.make_url(connection)
    backend = url.get_backend_name()
    if backend == 'mysql':
        wanted = {'read_timeout': wait, 'write_timeout': wait,
                  'init_command': _MYSQL_SESSION.format(**session)}
    elif backend == 'postgresql':
        wanted = {'options': _POSTGRESQL_SESSION.format(**session)}
        if _libpq_has_tcp_user_timeout():
            wanted['tcp_user_timeout'] = wait * 1000
    else:
        return ''
    # A parameter given empty counts as set: ``options=`` turns the
    # session settings off (PgBouncer refuses a startup 'options').
    already = set(url.query) | set(urllib.parse.parse_qs(
        given or '', keep_blank_values=True))
    return urllib.parse.urlencode({key: value
                                   for key, value in wanted.items()
                                   if key not in already})


def _libpq_has_tcp_user_timeout():
    try:
        from psycopg2 import extensions
    except ImportError:
        return False
    return extensions.libpq_version() >= 120000


def configure(conf, wait_for_database=True):
    """Point the enginefacade at ``conf.database`` (call once per process:
    a service's).

    The engine starts on first use and, by default, waits for the database
    as ``[database]max_retries`` and ``retry_interval`` say (100 s with
    oslo.db's defaults).  A process serving requests passes
    ``wait_for_database=False``: a request made while the database is away
    answers 503 at once, and the next one connects afresh.  No statement
    waits for an answer longer than ``DATABASE_WAIT`` seconds, nor for a
    row lock longer than ``LOCK_WAIT``, and the server ends a session
    whose transaction sits idle for ``DATABASE_WAIT``, unless
    ``[database]connection_parameters`` or the URL says otherwise
    (``bounded_wait_parameters``; ``cyborg-dbsync``, whose migrations may
    run longer, does not come here).
    """
    context_manager.configure(**engine_options(conf, wait_for_database))


# What every engine is made with besides [database]'s options: no
# oslo.db sleep(0) on every connection check-in, which lets greenthreads
# run; we use OS threads (doc/source/decisions.rst), for which it is only
# a forced context switch on every request.
ENGINE_SETTINGS = {'thread_checkin': False}


def engine_options(conf, wait_for_database=True):
    """The enginefacade's options for ``conf.database`` (``configure``)."""
    options = dict(conf.database.items())
    bounded = bounded_wait_parameters(
        options.get('connection') or 'sqlite://',
        options.get('connection_parameters'))
    if bounded:
        options['connection_parameters'] = '&'.join(
            filter(None, [options.get('connection_parameters'), bounded]))
    options.update(ENGINE_SETTINGS)
    if not wait_for_database:
        options['max_retries'] = 0
    return options


def get_engine():
    return context_manager.writer.get_engine()


def patch_engine(engine):
    """Use ``engine`` (tests); returns a callable that undoes it."""
    if not context_manager._factory._started:
        # patch_engine starts the factory; make sure it never opens the
        # configured (production) database while doing so.
        context_manager.configure(connection='sqlite://')
    return context_manager.patch_engine(engine)


class AskFirst(Exception):
    """Raised in a ``write_retrying`` transaction where going on would
    wait for another service (Placement): the transaction is rolled back,
    ``ask()`` runs with no transaction open, and the transaction runs
    again, knowing the answer (doc/source/decisions.rst, "No transaction
    waits for another service").  A subclass says what to ask and where
    to keep the answer for the next run."""

    def ask(self):
        raise NotImplementedError


# Rounds of AskFirst one write_retrying call may go through: each asks
# about something the last did not know of, so a few at most happen.
_ASK_ROUNDS = 8


def write_retrying(context, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in one writer transaction of its own, run
    again (with a short random pause) when it loses a lock conflict, and
    after asking what it raised ``AskFirst`` for.  ``fn`` must be safe to
    repeat: a lost attempt is rolled back."""
    attempt = asked = 0
    while True:
        try:
            with _committing(writer.using(context)):
                _sqlite_write_lock(context)
                try:
                    return fn(*args, **kwargs)
                except Exception:
                    _roll_back(context)
                    raise
        except AskFirst as first:
            asked += 1
            if asked > _ASK_ROUNDS:
                raise RuntimeError(f'{getattr(fn, "__name__", fn)} asked '
                                   f'first {asked} times') from first
            first.ask()
        except (db_exc.DBDeadlock, db_exc.DBError,
                sa.exc.OperationalError) as e:
            locked = stayed_locked(e)
            if locked is not None:
                raise locked from e
            attempt += 1
            if attempt == _WRITE_TRIES or not retryable(e):
                raise
            retrying(e, getattr(fn, '__name__', fn), attempt)
            time.sleep(random.uniform(0.002, 0.02) * attempt)


def _roll_back(context):
    """Roll back the transaction that raised, before its error leaves
    through the enginefacade, which logs an error its own rollback
    replaces as "Original exception being dropped", with the traceback,
    at ERROR.  A Galera node answers the rollback of a transaction that
    another node's write aborted with a deadlock: that error goes out
    instead (its cause the first), and the transaction runs again as for
    any lost conflict, since what it decided it read in a transaction
    that lost."""
    context.session.rollback()


def retrying(error, what, attempt):
    """Count (and log at DEBUG) a transaction about to be run again after
    a lost lock conflict: on a Galera cluster, mostly certification
    failures, the rate operators watch."""
    metrics.DB_RETRIES.inc()
    LOG.debug('%s lost a lock conflict (attempt %d); running it again: %s',
              what, attempt, error)


@contextlib.contextmanager
def _committing(transaction):
    """``transaction``; the time its end takes (the commit) counts as the
    ``commit`` phase of the work being measured (cyborg.common.timing)."""
    body_done = None
    try:
        with transaction:
            yield
            body_done = time.perf_counter()
    finally:
        if body_done is not None:
            timing.add(timing.COMMIT, time.perf_counter() - body_done)


# MySQL's ER_LOCK_DEADLOCK, also what a Galera cluster answers when a
# transaction fails certification (a conflict with a write committed on
# another node), in wordings oslo.db does not all recognise ("WSREP
# detected deadlock/conflict and aborted the transaction").
MYSQL_DEADLOCK = 1213


# MySQL's ER_LOCK_WAIT_TIMEOUT (which oslo.db reports as a deadlock) and
# PostgreSQL's lock_not_available (lock_timeout): waited LOCK_WAIT.
MYSQL_LOCK_WAIT_TIMEOUT = 1205
POSTGRESQL_LOCK_NOT_AVAILABLE = '55P03'


def _driver_error(error):
    """The DBAPI driver's exception inside oslo.db's and SQLAlchemy's."""
    inner = getattr(error, 'inner_exception', None) or error
    return getattr(inner, 'orig', None) or inner


def lock_waited_too_long(error):
    """Whether ``error`` ended a statement that waited ``LOCK_WAIT`` for
    a row lock: not a moment's conflict, worth no second try."""
    driver_error = _driver_error(error)
    args = getattr(driver_error, 'args', ())
    return bool(args and args[0] == MYSQL_LOCK_WAIT_TIMEOUT) or (
        getattr(driver_error, 'pgcode', None) ==
        POSTGRESQL_LOCK_NOT_AVAILABLE)


def stayed_locked(error):
    """The 503 to answer for ``error`` when it ended a statement that
    waited ``LOCK_WAIT`` for a row lock (the transaction is rolled back:
    nothing was written), else None."""
    if not lock_waited_too_long(error):
        return None
    return exception.ServiceUnavailable(
        reason='a row it needs stayed locked by another transaction (a '
               'stalled or stopped process?); nothing was written')


def retryable(error):
    """Whether ``error`` is a lost lock conflict that the transaction may
    simply be run again for: a deadlock (MariaDB, MySQL, PostgreSQL), a
    Galera certification failure, a PostgreSQL serialization failure, or
    SQLite's 'database is locked' (two deferred transactions that read
    and then write); not a lock waited for too long."""
    if lock_waited_too_long(error):
        return False
    if isinstance(error, db_exc.DBDeadlock):
        return True
    driver_error = _driver_error(error)
    args = getattr(driver_error, 'args', ())
    if args and args[0] == MYSQL_DEADLOCK:
        return True
    text = str(driver_error)
    return ('database is locked' in text or 'deadlock' in text.lower()
            or 'could not serialize' in text)


def _sqlite_write_lock(context):
    """On SQLite, take the write lock before the first read: a deferred
    transaction that reads and then writes fails at once ('database is
    locked', not even waiting) when another writer is ahead of it."""
    if context.session.get_bind().dialect.name == 'sqlite':
        context.session.execute(
            sa.text('UPDATE nova_events SET id = id WHERE 0'))
