"""RabbitMQ with quorum queues (``[oslo_messaging_rabbit]
rabbit_quorum_queue``, what clustered brokers run), on a vhost of its
own: an agent's report and an API write reach the conductor through
quorum queues, as they do through classic ones; on MariaDB and
PostgreSQL."""

import subprocess

import pytest
import requests

from cyborg.cmd import aio
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes
from tests.fixtures import rabbit

# Starts several processes (Placement, conductor, agents): a longer hard
# bound than the stage's default.
pytestmark = pytest.mark.timeout(150, method='signal')

ADMIN = {'X-Roles': 'admin', 'X-Project-Id': 'quorum'}


def _queue_types(vhost):
    """{queue name: type} of the vhost (rabbitmqctl, as the fixture)."""
    out = subprocess.run(
        ['rabbitmqctl', '-q', 'list_queues', '-p', vhost, 'name', 'type'],
        capture_output=True, text=True, check=True, timeout=60).stdout
    return dict(line.split('\t')[:2] for line in out.splitlines()
                if '\t' in line and not line.startswith('name'))


@pytest.mark.parametrize('db_kind', ['mysql', 'postgresql'])
def test_report_and_api_write_over_quorum_queues(tmp_path, db_kind):
    port = processes.free_port()
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database(db_kind) as db_url, \
            placement_fixture.PlacementProcess(
                log_path=tmp_path / 'placement.log') as placement_url:
        databases.create_schema(db_url)
        aio.ensure_compute_node(placement_url, 'quorum-host')
        config = processes.write_config(tmp_path / 'cyborg.conf', {
            'DEFAULT': {'transport_url': transport_url,
                        'host': 'quorum-host', 'state_path': tmp_path},
            'oslo_messaging_rabbit': {'rabbit_quorum_queue': 'true'},
            'database': {'connection': db_url},
            'placement': placement_fixture.placement_options(placement_url),
            'api': {'host_ip': '127.0.0.1', 'port': port,
                    'auth_strategy': 'noauth'},
            'agent': {'enabled_drivers': 'fake_driver', 'hotplug': 'false',
                      'resource_provider_name': 'quorum-host'},
        })
        started = [processes.ServiceProcess(
            script, config, tmp_path / (script + '.log')).start()
            for script in ('cyborg-conductor', 'cyborg-agent', 'cyborg-api')]
        conductor, agent, api = started
        try:
            conductor.wait_for_log('cyborg-conductor started', timeout=60)
            api.wait_for_log('listening on', timeout=60)
            base = 'http://127.0.0.1:%d/v2' % port
            devices = processes.wait_for(
                lambda: requests.get(base + '/devices', headers=ADMIN,
                                     timeout=10).json()['devices'],
                timeout=60, what="the agent's report over quorum queues")
            assert [(d['type'], d['hostname']) for d in devices] == [
                ('FPGA', 'quorum-host')]
            created = requests.post(base + '/device_profiles', json=[{
                'name': 'quorum', 'groups': [{'resources:FPGA': '1'}]}],
                headers=ADMIN, timeout=60)
            assert created.status_code == 201, created.text
            vhost = transport_url.rsplit('/', 1)[1]
            types = _queue_types(vhost)
            assert types['cyborg-conductor'] == 'quorum', types
            assert types['cyborg-agent.quorum-host'] == 'quorum', types
            for process in started:
                assert process.returncode is None
                assert 'Traceback' not in process.log()
        finally:
            for process in started:
                process.kill()
