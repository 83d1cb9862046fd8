"""A Placement that hangs (it takes connections and answers nothing: here
its process is stopped with SIGSTOP) against real API, conductor and agent
processes over RabbitMQ, on MariaDB and PostgreSQL.

- With the default options, a bind answers 202 and ends Bound while
  Placement hangs, within ``[api]conductor_timeout`` (20 s): the
  allocation lookup gives up after ``[placement]timeout`` (10 s) and the
  check is skipped with one WARNING line, as when Placement is stopped.
  Without a timeout the lookup waited forever, and the API answered 503
  with the ARQ left for the bind timeout.
- Once Placement answers again the next bind is checked as usual.
"""

import pytest

from cyborg.conf import placement as placement_conf
from tests.fixtures import faults
from tests.fixtures import processes

HOST = 'h1'


def _state(d, arq):
    return d.arqs()[arq].state


@pytest.mark.parametrize('db_kind', ['mysql', 'postgresql'])
def test_binds_go_on_while_placement_hangs(tmp_path, db_kind):
    with faults.FaultDeployment(tmp_path, db_kind, agents=(HOST,)) as d:
        d.profile('fpga', {'resources:FPGA': '1'})
        hung, well = d.create_arqs('fpga', 2)

        d.pause_placement()
        try:
            response, took = d.bind(hung, HOST)
        finally:
            d.resume_placement()
        assert response.status_code == 202, response.text
        # The lookup's timeout and a second transaction, before the API
        # gives up on the conductor.
        assert took < placement_conf.TIMEOUT + 5, took
        processes.wait_for(lambda: _state(d, hung) == 'Bound', timeout=10,
                           what='the bind while Placement hangs')
        log = d.conductor('c1').log()
        assert log.count('without checking its allocations') == 1, log

        response, took = d.bind(well, HOST)
        assert response.status_code == 202 and took < 5, (
            response.text, took)
        processes.wait_for(lambda: _state(d, well) == 'Bound', timeout=10,
                           what='the bind once Placement answers')
        assert d.conductor('c1').log().count(
            'without checking its allocations') == 1
        d.logs_without_tracebacks('conductor-c1', 'api-api')
