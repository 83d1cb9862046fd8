"""A transaction costs one round trip to end: its COMMIT or ROLLBACK,
without the pool's own ROLLBACK when the connection goes back (counted
on the real MariaDB and PostgreSQL, at the dialect every commit and
rollback of the engine goes through); and a connection is pinged before
use only after it was idle, a dead one being replaced then."""

import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import enginefacade

from cyborg.common import context as cyborg_context
from cyborg.db import api as db_api
from tests.fixtures import databases


@pytest.fixture(params=[('mysql', driver)
                        for driver in databases.MYSQL_DRIVERS]
                + [('postgresql', None)], ids=lambda p: p[1] or p[0])
def facade(request):
    """(transaction context manager, what ended each transaction: COMMIT,
    ROLLBACK or PING)."""
    with databases.throwaway_database(*request.param) as url:
        manager = enginefacade.transaction_context()
        # One connection: every transaction below uses the same one.
        manager.configure(connection=url, max_retries=0, max_pool_size=1,
                          max_overflow=0)
        manager.append_on_engine_create(db_api._tune_pool)
        engine = manager.writer.get_engine()
        ends = []
        dialect = engine.dialect
        commit, rollback = dialect.do_commit, dialect.do_rollback
        ping = dialect.do_ping

        def do_ping(connection):
            ends.append('PING')
            return ping(connection)

        def do_commit(connection):
            ends.append('COMMIT')
            commit(connection)

        def do_rollback(connection):
            ends.append('ROLLBACK')
            rollback(connection)

        dialect.do_commit, dialect.do_rollback = do_commit, do_rollback
        dialect.do_ping = do_ping
        # The first connect's own set-up (SQLAlchemy's) is not counted.
        with manager.writer.using(cyborg_context.get_admin_context()) as s:
            s.execute(sa.text('SELECT 0'))
        ends.clear()
        try:
            yield manager, ends
        finally:
            engine.dispose()


def test_the_process_engine_gets_it():
    hooks = db_api.context_manager._factory._facade_cfg['on_engine_create']
    assert db_api._tune_pool in hooks


def test_the_services_engine_does_not_sleep_on_check_in():
    from tests.fixtures import api as api_fixture

    conf = api_fixture.make_conf({('database', 'connection'): 'sqlite://'})
    assert db_api.engine_options(conf)['thread_checkin'] is False


def test_a_write_ends_with_its_commit_alone(facade):
    manager, ends = facade
    context = cyborg_context.get_admin_context()
    for _ in range(2):
        with manager.writer.using(context) as session:
            session.execute(sa.text('SELECT 1'))
    assert ends == ['COMMIT', 'COMMIT']


def test_a_read_ends_with_one_rollback(facade):
    manager, ends = facade
    context = cyborg_context.get_admin_context()
    with manager.reader.using(context) as session:
        session.execute(sa.text('SELECT 1'))
    assert ends == ['ROLLBACK']


def test_a_read_on_a_connection_ends_with_one_rollback(facade):
    # As cyborg's readers read: enginefacade's connection mode.
    manager, ends = facade
    context = cyborg_context.get_admin_context()
    for _ in range(2):
        with manager.reader.connection.using(context) as connection:
            connection.execute(sa.text('SELECT 1'))
    assert ends == ['ROLLBACK', 'ROLLBACK']


def test_a_transaction_broken_off_is_still_rolled_back(facade):
    manager, ends = facade
    context = cyborg_context.get_admin_context()
    with pytest.raises(ZeroDivisionError):
        with manager.writer.using(context) as session:
            session.execute(sa.text('SELECT 1'))
            1 / 0
    assert ends == ['ROLLBACK']
    # The connection is clean for the next transaction.
    with manager.writer.using(context) as session:
        assert session.execute(sa.text('SELECT 2')).scalar() == 2
    assert ends == ['ROLLBACK', 'COMMIT']


def _backend_id(session):
    if session.get_bind().dialect.name == 'mysql':
        return session.execute(sa.text('SELECT CONNECTION_ID()')).scalar()
    return session.execute(sa.text('SELECT pg_backend_pid()')).scalar()


def test_a_connection_idle_a_while_is_pinged_first(facade, monkeypatch):
    manager, ends = facade
    context = cyborg_context.get_admin_context()
    with manager.writer.using(context) as session:
        session.execute(sa.text('SELECT 1'))
    assert 'PING' not in ends           # used a moment ago
    monkeypatch.setattr(db_api, 'IDLE_BEFORE_PING', 0)
    ends.clear()
    with manager.writer.using(context) as session:
        session.execute(sa.text('SELECT 1'))
    assert ends == ['PING', 'COMMIT']


def test_a_connection_that_died_idle_is_replaced_before_use(facade,
                                                            monkeypatch):
    manager, ends = facade
    context = cyborg_context.get_admin_context()
    with manager.writer.using(context) as session:
        dead = _backend_id(session)
    # The server ends the pooled connection (as a restart would).
    engine = manager.writer.get_engine()
    killer = sa.create_engine(engine.url, poolclass=sa.pool.NullPool)
    with killer.connect() as conn:
        if engine.dialect.name == 'mysql':
            conn.execute(sa.text('KILL CONNECTION %d' % dead))
        else:
            conn.execute(sa.text('SELECT pg_terminate_backend(%d)' % dead))
    killer.dispose()
    monkeypatch.setattr(db_api, 'IDLE_BEFORE_PING', 0)
    with manager.writer.using(context) as session:
        assert _backend_id(session) != dead


def test_a_connection_dropped_in_a_transaction_is_rolled_back(facade):
    """A connection given back without its transaction ended (dropped,
    never closed) is rolled back on its way into the pool, so the next
    transaction does not read through the old one's snapshot."""
    import gc

    manager, ends = facade
    engine = manager.writer.get_engine()
    connection = engine.connect()
    connection.execute(sa.text('SELECT 1'))
    del connection
    gc.collect()
    assert ends == ['ROLLBACK']


def test_the_tests_engine_ends_transactions_as_the_services_do():
    """The API fixture's engine (what tests and the instruction counter
    run on) is tuned as the services' is: a read is one ROLLBACK, with no
    ping before it and no second ROLLBACK after it."""
    from tests.fixtures import api as api_fixture

    with api_fixture.database_in_use('mysql') as engine:
        ends = []
        dialect = engine.dialect
        rollback, ping = dialect.do_rollback, dialect.do_ping
        dialect.do_rollback = lambda c: (ends.append('ROLLBACK'),
                                         rollback(c))
        dialect.do_ping = lambda c: (ends.append('PING'), ping(c))[1]
        context = cyborg_context.get_admin_context()
        for _ in range(3):
            with db_api.reader.using(context) as connection:
                connection.execute(sa.text('SELECT 1'))
        # The connection oslo.db opened to try the server, before the
        # tuning saw it, is pinged at its first use (as in the services).
        assert ends in (['ROLLBACK'] * 3, ['PING'] + ['ROLLBACK'] * 3)
