"""``cyborg-agent --config-file X`` on a fake sysfs tree, as a real process
with a real cyborg-conductor over the local RabbitMQ, MariaDB and the real
Placement: it reports exactly the golden inventory, watches udev, and a
restart with its cache re-sends nothing."""

import json
import time

import requests
import sqlalchemy as sa

from cyborg.objects import inventory
from tests.fixtures import databases, processes, rabbit
from tests.fixtures import placement as pf
from tests.fixtures import sysfs as fake_sysfs
from tests.unit.drivers import golden_reports

HOST = fake_sysfs.HOST
SCENARIO = 'mixed'


def _ini(options):
    """[agent] options as oslo.config reads them from a file."""
    values = {}
    for key, value in options.items():
        if isinstance(value, dict):
            value = ','.join('{}:{}'.format(*kv) for kv in value.items())
        elif key == 'passthrough_whitelist':
            [value] = value          # one JSON entry (MultiStrOpt)
        values[key] = value
    return values


def _wait(what, predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, 'timed out waiting for ' + what
        time.sleep(0.2)


def _acknowledged(cache_path):
    try:
        with open(cache_path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def _stored_deployables(db_url):
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return set(conn.execute(sa.text(
                'SELECT d.name FROM deployables d JOIN devices v '
                'ON v.id = d.device_id WHERE v.hostname = :h'),
                {'h': HOST}).scalars())
    finally:
        engine.dispose()


def _providers_under(url, cn_uuid):
    rps = requests.get(f'{url}/resource_providers?in_tree={cn_uuid}',
                       headers=pf.HEADERS, timeout=10).json()
    return {rp['name'] for rp in rps['resource_providers']
            if rp['uuid'] != cn_uuid}


def test_agent_process_reports_the_golden_inventory(tmp_path):
    golden = golden_reports.load_golden(SCENARIO)
    names = {dep['name'] for dev in golden for dep in dev['deployables']}
    root = tmp_path / 'sys'
    _tree, options = fake_sysfs.build(SCENARIO, root)
    state = tmp_path / 'state'
    cache_path = state / (f'agent-{HOST}.json')
    with databases.throwaway_database('mysql') as db_url, \
            rabbit.throwaway_vhost() as transport_url, \
            pf.PlacementProcess('sqlite://',
                                log_path=tmp_path / 'placement.log') as url:
        databases.create_schema(db_url)
        cn = requests.post(url + '/resource_providers', json={'name': HOST},
                           headers=pf.HEADERS, timeout=10).json()['uuid']
        common = {'transport_url': transport_url, 'debug': True,
                  'periodic_interval': 600}
        conductor_conf = processes.write_config(tmp_path / 'conductor.conf', {
            'DEFAULT': dict(common, host='conductor-1'),
            'database': {'connection': db_url},
            'placement': pf.placement_options(url)})
        agent_conf = processes.write_config(tmp_path / 'agent.conf', {
            'DEFAULT': dict(common, host=HOST, state_path=state),
            'agent': dict(_ini(options), sysfs_root=root)})
        conductor = processes.ServiceProcess(
            'cyborg-conductor', conductor_conf, tmp_path / 'conductor.log')
        agent = processes.ServiceProcess('cyborg-agent', agent_conf,
                                         tmp_path / 'agent.log')
        second = processes.ServiceProcess('cyborg-agent', agent_conf,
                                          tmp_path / 'agent-2.log')
        try:
            conductor.start().wait_for_log('cyborg-conductor started')
            agent.start()
            record = _wait('the first acknowledged report',
                           lambda: _acknowledged(cache_path))
            agent.wait_for_log('Watching udev subsystems pci, mdev')

            # What the conductor acknowledged is exactly the golden file.
            assert golden_reports.inventory_json(
                [inventory.DriverDevice.from_dict(d)
                 for d in record['devices']]) == golden
            assert record['digest'] == inventory.inventory_digest(
                [inventory.DriverDevice.from_dict(d) for d in golden])
            assert _stored_deployables(db_url) == names
            _wait('the provider tree',
                  lambda: _providers_under(url, cn) == names)

            # A restarted agent finds its cache: an empty delta, no more.
            agent.stop()
            second.start()
            second.wait_for_log(f'Reporting the inventory of {HOST}: '
                                'delta, 0 device(s) sent, 0 removed')
            assert ': full, ' not in second.log()
            assert _acknowledged(cache_path)['digest'] == record['digest']
            second.stop()
            conductor.stop()
        finally:
            for proc in (second, agent, conductor):
                proc.kill()
