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


@pytest.fixture(scope='module')
def mariadb():
    with databases.throwaway_database('mysql') as url:
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
