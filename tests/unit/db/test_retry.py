"""Which database errors a transaction is run again for: deadlocks and
Galera certification failures alike, raised by the real MariaDB (SIGNAL
sets the error number and text a Galera node answers with)."""

import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

from cyborg.common import metrics
from cyborg.db import api as db_api
from tests.fixtures import databases

# What MariaDB Galera answers when a transaction fails certification, in
# the wordings of its versions, and InnoDB's own deadlock.
CONFLICTS = (
    'WSREP detected deadlock/conflict and aborted the transaction. Try '
    'restarting the transaction',
    'Deadlock: wsrep aborted transaction',
    'Deadlock found when trying to get lock; try restarting transaction',
)


def _signal(errno, text):
    return sa.text("SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = %d, "
                   "MESSAGE_TEXT = '%s'" % (errno, text))


def _retries():
    return metrics.REGISTRY.get_sample_value(
        'cyborg_db_transaction_retries_total') or 0


@pytest.fixture(scope='module', params=databases.MYSQL_DRIVERS)
def mariadb(request):
    with databases.throwaway_database('mysql', request.param) as url:
        engine = engines.create_engine(url)
        yield engine
        engine.dispose()


@pytest.mark.parametrize('text', CONFLICTS)
def test_galera_certification_failures_are_retryable(mariadb, text):
    with pytest.raises(Exception) as raised, mariadb.connect() as conn:
        conn.execute(_signal(db_api.MYSQL_DEADLOCK, text))
    assert db_api.retryable(raised.value), type(raised.value)


def test_other_errors_are_not(mariadb):
    with pytest.raises(Exception) as raised, mariadb.connect() as conn:
        conn.execute(_signal(1146, "Table 'x' doesn't exist"))
    assert not db_api.retryable(raised.value)
    assert not db_api.retryable(ValueError('deadline'))


def test_a_write_that_fails_certification_is_run_again(mariadb,
                                                       admin_context):
    undo = db_api.patch_engine(mariadb)
    attempts = []

    def write():
        attempts.append(1)
        if len(attempts) == 1:
            admin_context.session.execute(_signal(db_api.MYSQL_DEADLOCK,
                                                  CONFLICTS[0]))
        return admin_context.session.execute(sa.text('SELECT 7')).scalar()

    retries = _retries()
    try:
        assert db_api.write_retrying(admin_context, write) == 7
    finally:
        undo()
    assert len(attempts) == 2
    assert _retries() == retries + 1


class _AskTwice(db_api.AskFirst):
    def __init__(self, answers, log):
        super().__init__()
        self.answers, self.log = answers, log

    def ask(self):
        # Asked with no transaction open: what the rolled-back run wrote
        # is not there.
        self.log.append(('asked', _widgets(self.answers['engine'])))
        self.answers['known'] += 1


def _widgets(engine):
    with engine.connect() as conn:
        return conn.scalar(sa.text('SELECT COUNT(*) FROM widgets'))


def test_a_transaction_that_must_ask_first_is_rolled_back_and_run_again(
        db, admin_context):
    """AskFirst: the run is rolled back, ``ask()`` runs outside any
    transaction, and the transaction runs again knowing the answer."""
    with db.begin() as conn:
        conn.execute(sa.text('CREATE TABLE widgets (id INTEGER)'))
    answers, log = {'engine': db, 'known': 0}, []

    def write():
        admin_context.session.execute(
            sa.text('INSERT INTO widgets VALUES (1)'))
        log.append(('ran', answers['known']))
        if answers['known'] < 2:
            raise _AskTwice(answers, log)
        return 'done'

    retries = _retries()
    assert db_api.write_retrying(admin_context, write) == 'done'
    assert log == [('ran', 0), ('asked', 0), ('ran', 1), ('asked', 0),
                   ('ran', 2)]
    assert _widgets(db) == 1
    assert _retries() == retries        # not a lost lock conflict


def test_a_rollback_galera_answers_with_a_deadlock_runs_it_again_quietly(
        mariadb, admin_context, caplog, monkeypatch):
    """A Galera node answers the rollback of a transaction that another
    node's write aborted with a deadlock.  When the transaction was
    ending on an error of its own (here: it must ask Placement first),
    it runs again, as for any lost conflict, and nothing is logged at
    ERROR (the enginefacade logged the first error as "Original
    exception being dropped", with its traceback)."""
    undo = db_api.patch_engine(mariadb)
    real = mariadb.dialect.do_rollback
    aborted, attempts = [], []

    def do_rollback(dbapi_connection):
        real(dbapi_connection)
        if aborted:
            aborted.pop()
            raise mariadb.dialect.dbapi.OperationalError(
                db_api.MYSQL_DEADLOCK, CONFLICTS[1])

    monkeypatch.setattr(mariadb.dialect, 'do_rollback', do_rollback)

    class _Ask(db_api.AskFirst):
        def ask(self):
            attempts.append('asked')

    def write():
        attempts.append('ran')
        admin_context.session.execute(sa.text('SELECT 7'))
        if len(attempts) == 1:
            aborted.append(1)
            raise _Ask()
        return 'done'

    try:
        assert db_api.write_retrying(admin_context, write) == 'done'
    finally:
        undo()
    assert attempts == ['ran', 'ran']
    assert not [r for r in caplog.records if r.levelname == 'ERROR']
