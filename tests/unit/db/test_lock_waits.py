"""A row lock held too long never holds a service's write with it, on the
real MariaDB and PostgreSQL.

- A statement of a service waits at most ``LOCK_WAIT`` seconds for a row
  another transaction holds (MariaDB waits 50 s by default, PostgreSQL
  forever); the write then ends at once as a 503 that says so, rolled
  back, rather than being run again (a lock held that long is held by a
  stalled transaction, not a moment's conflict): the conductor answers
  before the API stops waiting for it, and nothing is written after it.
- A transaction of a service left idle for ``DATABASE_WAIT`` seconds (its
  process frozen, stopped or paused in a VM) is ended by the server, so
  the rows it locked are not held from every other conductor forever.
"""

import time

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

from cyborg.common import exception
from cyborg.conductor import manager
from cyborg.conf import api as api_conf
from cyborg.db import api as db_api
from tests.fixtures import databases

SERVERS = [('mysql', driver) for driver in databases.MYSQL_DRIVERS] + [
    ('postgresql', None)]
# Seconds the holder keeps its lock at most: far longer than the bounded
# waits below, so that a wait it ends is an unbounded one.
HELD = 20


@pytest.fixture(params=SERVERS, ids=lambda s: s[1] or s[0])
def url(request):
    kind, driver = request.param
    with databases.throwaway_database(kind, driver) as url:
        with sa.create_engine(url).begin() as conn:
            conn.execute(sa.text('CREATE TABLE widgets '
                                 '(id INTEGER PRIMARY KEY, v INTEGER)'))
            conn.execute(sa.text('INSERT INTO widgets VALUES (1, 0)'))
        yield url


def _widget_locked(url):
    return databases.row_locked(
        url, 'SELECT v FROM widgets WHERE id = 1 FOR UPDATE', at_most=HELD)


def _service_engine(url, lock_wait=1, idle=1):
    """An engine as a service makes it, with short bounds."""
    return engines.create_engine(
        url, max_retries=0,
        connection_parameters=db_api.bounded_wait_parameters(
            url, lock_wait=lock_wait, idle=idle))


def _wait_at_most(conn, seconds):
    """Bound ``conn``'s own lock waits (a test never hangs)."""
    if conn.dialect.name == 'postgresql':
        conn.execute(sa.text(f"SET lock_timeout = '{seconds}s'"))
    else:
        conn.execute(sa.text(
            f'SET SESSION innodb_lock_wait_timeout = {seconds}'))


def _value(url):
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.scalar(sa.text('SELECT v FROM widgets WHERE id = 1'))
    finally:
        engine.dispose()


def test_the_conductor_answers_before_the_api_stops_waiting():
    assert db_api.LOCK_WAIT < api_conf.CONDUCTOR_TIMEOUT
    assert f'({db_api.LOCK_WAIT} s,' in api_conf.opts[
        [o.name for o in api_conf.opts].index('conductor_timeout')].help


def test_a_write_gives_up_on_a_row_locked_too_long(url, admin_context):
    engine = _service_engine(url)
    undo = db_api.patch_engine(engine)
    attempts = []

    def write():
        attempts.append(1)
        admin_context.session.execute(
            sa.text('UPDATE widgets SET v = v + 1 WHERE id = 1'))

    try:
        with _widget_locked(url):
            started = time.monotonic()
            with pytest.raises(exception.ServiceUnavailable) as raised:
                db_api.write_retrying(admin_context, write)
            took = time.monotonic() - started
    finally:
        undo()
        engine.dispose()
    assert took < 5, took
    assert len(attempts) == 1
    assert 'stayed locked by another transaction' in str(raised.value)
    assert _value(url) == 0


def test_a_conductor_call_whose_own_write_waited_too_long_answers_503(
        url, admin_context, caplog):
    """A write outside ``write_retrying`` (its own transaction) answers
    the same 503, with one WARNING line and no traceback."""
    engine = _service_engine(url)
    undo = db_api.patch_engine(engine)

    @manager._answer
    def touch(context):
        with db_api.writer.using(context):
            context.session.execute(
                sa.text('UPDATE widgets SET v = v + 1 WHERE id = 1'))

    try:
        with _widget_locked(url):
            with pytest.raises(messaging.ExpectedException) as caught:
                touch(admin_context)
    finally:
        undo()
        engine.dispose()
    assert isinstance(caught.value.exc_info[1], exception.ServiceUnavailable)
    lines = [r for r in caplog.records if r.name == manager.__name__]
    assert [(r.levelname, r.exc_info) for r in lines] == [('WARNING', None)]
    assert 'stayed locked by another transaction' in lines[0].getMessage()
    assert _value(url) == 0


def test_a_transaction_left_idle_is_ended_by_the_server(url):
    engine = _service_engine(url)
    stalled = engine.connect()
    try:
        stalled.begin()
        stalled.execute(sa.text(
            'SELECT v FROM widgets WHERE id = 1 FOR UPDATE'))
        # The process holding it stops here (frozen, SIGSTOPped).
        other = sa.create_engine(url)
        try:
            with other.begin() as conn:
                _wait_at_most(conn, HELD)
                started = time.monotonic()
                conn.execute(sa.text(
                    'UPDATE widgets SET v = 5 WHERE id = 1'))
                took = time.monotonic() - started
        finally:
            other.dispose()
    finally:
        stalled.invalidate()
        stalled.close()
        engine.dispose()
    assert took < 5, took
    assert _value(url) == 5
