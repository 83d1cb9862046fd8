"""A row an ARQ's bind needs stays locked by a transaction that does not
end (another process stalled or stopped in the middle of it, an
operator's forgotten SQL session), against real API, conductor and agent
processes, on MariaDB and PostgreSQL.

The bind waits ``LOCK_WAIT`` seconds for the lock, then answers 503
saying why, before the API stops waiting for the conductor, and writes
nothing: the ARQ is as it was, and binds it again once the lock is gone.
Other ARQs bind meanwhile as usual.  Without the bound, MariaDB held the
bind 50 s per try (eight tries) and PostgreSQL until the lock went; the
API answered 503 after [api]conductor_timeout while the conductor went on
to bind the ARQ afterwards.
"""

import concurrent.futures

import pytest

from cyborg.conf import api as api_conf
from cyborg.db import api as db_api
from tests.fixtures import databases
from tests.fixtures import faults
from tests.fixtures import processes

HOST = 'h1'


def _state(d, arq):
    return d.arqs()[arq].state


@pytest.mark.parametrize('db_kind', ['mysql', 'postgresql'])
def test_a_bind_on_a_row_locked_too_long_answers_503_and_writes_nothing(
        tmp_path, db_kind):
    with faults.FaultDeployment(tmp_path, db_kind, agents=(HOST,)) as d:
        d.profile('fpga', {'resources:FPGA': '1'})
        locked, free = d.create_arqs('fpga', 2)

        with databases.row_locked(
                d.db_url, 'SELECT id FROM extended_accelerator_requests '
                'WHERE uuid = :uuid FOR UPDATE', {'uuid': locked}), \
                concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(d.bind, locked, HOST)
            response, took = d.bind(free, HOST)
            assert response.status_code == 202 and took < 5, (
                response.text, took)
            response, took = waiting.result()
            assert response.status_code == 503, response.text
            assert 'stayed locked by another transaction' in response.text
            assert db_api.LOCK_WAIT <= took < api_conf.CONDUCTOR_TIMEOUT, (
                took)
        processes.wait_for(lambda: _state(d, free) == 'Bound', timeout=10,
                           what='the bind beside the locked row')
        assert _state(d, locked) == 'Initial'
        assert d.handles_in_use() == 1

        response, took = d.bind(locked, HOST)
        assert response.status_code == 202 and took < 5, (response.text,
                                                          took)
        processes.wait_for(lambda: _state(d, locked) == 'Bound', timeout=10,
                           what='the bind once the lock is gone')
        log = d.conductor('c1').log()
        assert log.count('arq_bind: Service unavailable: a row it needs '
                         'stayed locked by another transaction') == 1, log
        d.logs_without_tracebacks('conductor-c1', 'api-api')
