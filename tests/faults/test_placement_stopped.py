"""Serving ARQs without Placement, a compute node named as Nova names it,
and a Nova event left behind for an ARQ deleted since (real processes,
the real Placement actually stopped and started again, on MariaDB and
PostgreSQL).

- Nova names the compute node after the hypervisor's host name
  (``cmp1.cloud.example.org`` here), not the service host (``cmp1``): the
  conductor finds that provider in Placement by the name the agent
  reports, and a bind naming either is a bind on that host.
- With Placement stopped, a bind still answers 202 at once and ends Bound;
  the conductor logs one WARNING line for the allocation check it skipped,
  no traceback.
- An event row a conductor left when it died between Nova's answer and the
  row's delete, for an ARQ deleted since, is dropped: Nova hears nothing
  more of it.
"""

import time
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa

from cyborg.db import models
from tests.fixtures import faults
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes

HOST, NODE = 'cmp1', 'cmp1.cloud.example.org'


def _state(d, arq):
    return d.arqs()[arq].state


@pytest.mark.parametrize('db_kind', ['mysql', 'postgresql'])
def test_binds_need_neither_placement_nor_the_service_host_name(tmp_path,
                                                                db_kind):
    with faults.FaultDeployment(
            tmp_path, db_kind, agents=(HOST,), node_names={HOST: NODE},
            conductor_options={'nova_event_retry_interval': 1}) as d:
        node = requests.get(
            d.placement_url + '/resource_providers/' + faults.device_rp(HOST),
            headers=placement_fixture.HEADERS, timeout=10).json()
        root = requests.get(
            d.placement_url + '/resource_providers?name=' + NODE,
            headers=placement_fixture.HEADERS, timeout=10).json()
        assert node['parent_provider_uuid'] == (
            root['resource_providers'][0]['uuid'])
        d.profile('fpga', {'resources:FPGA': '1'})
        by_node, by_host, elsewhere = d.create_arqs('fpga', 3)

        # Nova's hostname is the compute node's name.
        response, _ = d.bind(by_node, HOST)
        assert response.status_code == 202, response.text
        processes.wait_for(lambda: _state(d, by_node) == 'Bound',
                           timeout=10, what='the bind by node name')
        response, _ = d.bind(elsewhere, HOST, hostname='cmp2')
        assert response.status_code == 400, response.text
        assert 'not on host cmp2' in response.text

        d.stop_placement()
        response, took = d.bind(by_host, HOST, hostname=HOST)
        assert response.status_code == 202 and took < 5, (response.text,
                                                          took)
        processes.wait_for(lambda: _state(d, by_host) == 'Bound',
                           timeout=10, what='the bind without Placement')
        log = d.conductor('c1').log()
        assert log.count('without checking its allocations') == 1, log
        d.start_placement()

        # A Nova event left behind for an ARQ deleted since.
        processes.wait_for(lambda: len(d.nova.events) == 2, timeout=15,
                           what='both bind events at Nova')
        instance = d.arqs()[by_node].instance_uuid
        response, _ = d.call('DELETE',
                             '/accelerator_requests?instance=' + instance)
        assert response.status_code == 204, response.text
        d.execute(sa.insert(models.NovaEvent.__table__).values(
            batch_id=str(uuidlib.uuid4()), instance_uuid=instance,
            arq_uuid=by_node, status='completed', attempts=0, owner='c1',
            next_attempt_at=models._now()))

        def pending():
            with d._engine.connect() as c:
                return c.scalar(sa.select(sa.func.count()).select_from(
                    models.NovaEvent))
        processes.wait_for(lambda: pending() == 0, timeout=10,
                           what='the stale event to be dropped')
        time.sleep(0.5)
        assert [e['tag'] for e in d.nova.events].count(by_node) == 1
        assert 'Dropped 1 accelerator event' in d.conductor('c1').log()
        d.logs_without_tracebacks('conductor-c1', 'api-api')
