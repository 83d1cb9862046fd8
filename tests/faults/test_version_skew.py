"""Agents of another version than the conductor, as real processes over
RabbitMQ against the current conductor, the real Placement and MariaDB or
PostgreSQL (each test runs on both).

- An N-1 agent: a cyborg-agent capped at the previous release
  (``[upgrade_levels]conductor = 2027.1``, RPC 1.4; a cap below the
  oldest release is refused at start) and a report recorded in the 1.0
  format (without
  ``resource_provider_name``) sent at version 1.0: both hosts' inventories
  land in the database and in Placement.
- A newer agent's report (a device type, an attach type and fields this
  conductor does not know): the rest of the host's inventory is stored
  and synced, nothing stored before is deleted or changed.
- An agent started before any conductor: registered within seconds of the
  conductor's start, not after the 60 s RPC timeout.
"""

import json
import pathlib
import time

import oslo_messaging as messaging
import pytest
from oslo_config import cfg
import requests
import sqlalchemy as sa

from cyborg.cmd import aio
from cyborg.common import context as cyborg_context
from cyborg.common import rpc
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.objects import inventory
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes
from tests.fixtures import rabbit

# Starts several processes (Placement, conductor, agents): a longer hard
# bound than the stage's default.
pytestmark = pytest.mark.timeout(180, method='signal')

RECORDED = pathlib.Path(__file__).parent / 'data' / \
    'inventory_report_rpc_1.0.json'
RECORDED_HOST = 'compute-1'          # the host its deployables are named for
CAPPED_HOST = 'n-minus-1'
NEWER_HOST = 'newer'
FIRST_REPORT_BOUND = 10.0            # seconds after the conductor started


class Skew:
    """A throwaway vhost, database (MariaDB or PostgreSQL) and Placement,
    with processes started on demand."""

    def __init__(self, tmp, transport_url, db_url, placement_url):
        self.tmp = tmp
        self.transport_url = transport_url
        self.db_url = db_url
        self.placement_url = placement_url
        self.processes = []

    def config(self, name, host, **sections):
        base = {'DEFAULT': {'transport_url': self.transport_url,
                            'host': host, 'periodic_interval': 5,
                            'state_path': str(self.tmp / ('state-' + host))},
                'database': {'connection': self.db_url},
                'placement': placement_fixture.placement_options(
                    self.placement_url),
                'agent': {'enabled_drivers': 'fake_driver',
                          'hotplug': 'false',
                          'resource_provider_name': host}}
        for section, options in sections.items():
            base.setdefault(section, {}).update(options)
        return processes.write_config(self.tmp / (name + '.conf'), base)

    def start(self, script, name, host, **sections):
        process = processes.ServiceProcess(
            script, self.config(name, host, **sections),
            self.tmp / (name + '.log'))
        self.processes.append(process.start())
        return process

    def devices(self, host):
        """{cpid_info: (type, [(deployable, num, handles)])} in the DB."""
        engine = sa.create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text(
                    'SELECT c.cpid_info, d.type, p.name, '
                    'p.num_accelerators, COUNT(h.id) AS handles '
                    'FROM devices d JOIN controlpath_ids c '
                    'ON c.device_id = d.id JOIN deployables p '
                    'ON p.device_id = d.id LEFT JOIN attach_handles h '
                    'ON h.deployable_id = p.id WHERE d.hostname = :host '
                    'GROUP BY c.cpid_info, d.type, p.name, '
                    'p.num_accelerators'), {'host': host}).all()
        finally:
            engine.dispose()
        found = {}
        for row in rows:
            found.setdefault(row.cpid_info, (row.type, []))[1].append(
                (row.name, row.num_accelerators, row.handles))
        return found

    def providers(self, host):
        """{provider name: {rc: total}} under the host's compute node."""
        get = lambda path: requests.get(  # noqa: E731
            self.placement_url + path, timeout=10,
            headers=placement_fixture.HEADERS).json()
        (cn,) = get('/resource_providers?name=%s' % host)[
            'resource_providers']
        found = {}
        for rp in get('/resource_providers?in_tree=%s' % cn['uuid'])[
                'resource_providers']:
            if rp['uuid'] != cn['uuid']:
                invs = get('/resource_providers/%s/inventories' % rp['uuid'])
                found[rp['name']] = {rc: inv['total'] for rc, inv in
                                     invs['inventories'].items()}
        return found

    def send_report(self, host, report, version):
        """``report_inventory`` as an agent speaking ``version`` sends it."""
        client = rpc.get_client(self._conf(), conductor_rpcapi.TOPIC,
                                version, timeout=30)
        return client.prepare(version=version).call(
            cyborg_context.get_admin_context(), 'report_inventory',
            hostname=host, report=report)

    def _conf(self):
        conf = cfg.ConfigOpts()
        conf([], default_config_files=[], default_config_dirs=[])
        return conf


@pytest.fixture(params=['mysql', 'postgresql'])
def skew(request, tmp_path):
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database(request.param) as db_url, \
            placement_fixture.PlacementProcess(
                log_path=tmp_path / 'placement.log') as placement_url:
        databases.create_schema(db_url)
        for host in (RECORDED_HOST, CAPPED_HOST, NEWER_HOST, 'early'):
            aio.ensure_compute_node(placement_url, host)
        env = Skew(tmp_path, transport_url, db_url, placement_url)
        transport = messaging.get_rpc_transport(env._conf(),
                                                url=transport_url)
        rpc.register_messaging_opts(transport.conf)
        previous = rpc._TRANSPORT
        rpc.set_transport(transport)
        try:
            yield env
        finally:
            rpc.set_transport(previous)
            transport.cleanup()
            for process in env.processes:
                process.kill()


def _fake(host):
    return {'0000:0c:00.0': ('FPGA', [(host + '_FakeDevice', 16, 16)])}


def test_previous_version_agents_fill_the_db_and_placement(skew):
    conductor = skew.start('cyborg-conductor', 'conductor', 'c1')
    conductor.wait_for_log('cyborg-conductor started', timeout=60)
    agent = skew.start('cyborg-agent', 'agent-capped', CAPPED_HOST,
                       upgrade_levels={'conductor': '2027.1'},
                       health={'check_interval': 1, 'report_interval': 2})
    recorded = json.loads(RECORDED.read_text())
    assert 'resource_provider_name' not in recorded
    reply = skew.send_report(RECORDED_HOST, recorded, '1.0')
    assert reply == {'digest': recorded['digest'], 'need_full': False}

    processes.wait_for(lambda: skew.devices(CAPPED_HOST) == _fake(
        CAPPED_HOST), timeout=60, what='the capped agent in the DB')
    processes.wait_for(lambda: skew.providers(CAPPED_HOST) == {
        CAPPED_HOST + '_FakeDevice': {'FPGA': 16}}, timeout=30,
        what="the capped agent's provider")
    assert skew.devices(RECORDED_HOST) == {
        '0000:23:00.0': ('GPU', [('compute-1_0000:23:00.0', 1, 1)]),
        '0000:c3:00.0': ('GPU', [('compute-1_0000:c3:00.0', 1, 1)])}
    processes.wait_for(lambda: skew.providers(RECORDED_HOST) == {
        'compute-1_0000:23:00.0': {'PGPU': 1},
        'compute-1_0000:c3:00.0': {'PGPU': 1}}, timeout=30,
        what="the recorded report's providers")

    # The capped agent's health reports (at most 1.4) are served: the
    # conductor sees no call it cannot serve.
    time.sleep(3)                    # a few health rounds
    for log in (conductor.log(), agent.log()):
        assert 'UnsupportedVersion' not in log
        assert 'Traceback' not in log


def test_a_newer_agents_report_stores_what_the_conductor_understands(skew):
    conductor = skew.start('cyborg-conductor', 'conductor', 'c1')
    conductor.wait_for_log('cyborg-conductor started', timeout=60)
    recorded = json.loads(RECORDED.read_text())
    skew.send_report(NEWER_HOST, recorded, '1.0')
    before = skew.devices(NEWER_HOST)
    # The same host after an upgrade of its agent: the first GPU is now
    # reported as a kind this conductor does not know, a new device has
    # an attach type it does not know, the other GPU carries new fields.
    devices = [inventory.DriverDevice.from_dict(d)
               for d in recorded['devices']]
    devices[0].type = 'DPU'
    vfio = inventory.DriverDevice.from_dict(recorded['devices'][1])
    vfio.controlpath_id.cpid_info = '0000:c4:00.0'
    vfio.deployables[0].name = 'compute-1_0000:c4:00.0'
    vfio.deployables[0].attach_handles[0].attach_type = 'VFIO_USER'
    devices.append(vfio)
    newer = {'digest': inventory.inventory_digest(devices),
             'base_digest': recorded['digest'], 'full': True,
             'devices': [d.to_dict() for d in devices], 'removed': [],
             'resource_provider_name': NEWER_HOST,
             'report_format': 3}
    newer['devices'][1]['numa_node'] = 1
    reply = skew.send_report(NEWER_HOST, newer, '1.1')
    assert reply == {'digest': newer['digest'], 'need_full': False}
    assert skew.devices(NEWER_HOST) == before
    assert set(skew.providers(NEWER_HOST)) == {'compute-1_0000:23:00.0',
                                               'compute-1_0000:c3:00.0'}
    log = conductor.log()
    assert log.count("unknown device type 'DPU'") == 1, log[-3000:]
    assert "unknown attach type 'VFIO_USER'" in log and 'numa_node' in log
    # Its next delta is answered need_full (the conductor stored less than
    # the agent thinks), so the full report comes again every period.
    unchanged = {'digest': newer['digest'], 'base_digest': newer['digest'],
                 'full': False, 'devices': [], 'removed': []}
    assert skew.send_report(NEWER_HOST, unchanged, '1.1')['need_full']
    assert 'Traceback' not in conductor.log()


def test_an_agent_started_before_the_conductor_registers_at_once(skew):
    agent = skew.start('cyborg-agent', 'agent-early', 'early')
    agent.wait_for_log('No conductor listens on the broker yet', timeout=60)
    conductor = skew.start('cyborg-conductor', 'conductor', 'c1')
    conductor.wait_for_log('cyborg-conductor started', timeout=60)
    started = time.monotonic()
    processes.wait_for(lambda: skew.devices('early') == _fake('early'),
                       timeout=30, what='the early agent in the DB',
                       interval=0.1)
    took = time.monotonic() - started
    assert took < FIRST_REPORT_BOUND, took
    agent.wait_for_log('reported after', timeout=10)
