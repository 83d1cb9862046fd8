"""Placement taken away while agents report, and agents (re)started while
it is away (the real Placement behind a TCP proxy), against real
conductor and agent processes over RabbitMQ, on MariaDB and PostgreSQL.

Every process stays up and logs one line per failure, not a traceback;
reports are stored while Placement is away (nothing lost); when it comes
back the providers converge by themselves (the next periodic report of
each unsynced host syncs it), and the provider that was already there is
neither deleted nor changed.
"""

import urllib.parse

import pytest
import requests

from cyborg.cmd import aio
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes
from tests.fixtures import rabbit
from tests.fixtures import tcp_proxy

# Starts several processes (Placement, conductor, agents): a longer hard
# bound than the stage's default.
pytestmark = pytest.mark.timeout(150, method='signal')

OUTAGE = 6              # seconds Placement stays away
CONVERGE = 15           # seconds after its return for the tree to be right


def _providers(url, host):
    """{provider name: (generation, {rc: total})} under ``host``."""
    def get(path):
        resp = requests.get(url + path, headers=placement_fixture.HEADERS,
                            timeout=10)
        resp.raise_for_status()
        return resp.json()
    (cn,) = get('/resource_providers?name=%s' % host)['resource_providers']
    found = {}
    for rp in get('/resource_providers?in_tree=%s' % cn['uuid'])[
            'resource_providers']:
        if rp['uuid'] != cn['uuid']:
            invs = get('/resource_providers/%s/inventories' % rp['uuid'])
            found[rp['name']] = (rp['generation'], {
                rc: inv['total'] for rc, inv in invs['inventories'].items()})
    return found


def _query(db_url, sql):
    import sqlalchemy as sa
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).all()
    finally:
        engine.dispose()


def _stored_hosts(db_url):
    return {r.hostname for r in _query(
        db_url, 'SELECT DISTINCT hostname FROM devices')}


def _synced_hosts(db_url):
    """Hosts whose last sync completed (recorded after its last
    Placement call)."""
    return {r.hostname for r in _query(
        db_url, 'SELECT hostname FROM hosts WHERE placement_synced')}


def _inventories(url, host):
    return {name: inv for name, (_gen, inv) in _providers(url, host).items()}


@pytest.mark.parametrize('db_kind', ['mysql', 'postgresql'])
def test_placement_away_while_agents_report_and_start(tmp_path, db_kind):
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database(db_kind) as db_url, \
            placement_fixture.PlacementProcess(
                log_path=tmp_path / 'placement.log') as placement_url:
        databases.create_schema(db_url)
        for host in ('steady', 'late'):
            aio.ensure_compute_node(placement_url, host)
        target = urllib.parse.urlsplit(placement_url)
        with tcp_proxy.tcp_proxy(target.port) as proxy:
            proxied = 'http://127.0.0.1:%d%s' % (proxy.port, target.path)
            _run(tmp_path, transport_url, db_url, placement_url, proxied,
                 proxy)


def _run(tmp, transport_url, db_url, placement_url, proxied, proxy):
    def start(script, host):
        config = processes.write_config(tmp / (host + '.conf'), {
            'DEFAULT': {'transport_url': transport_url, 'host': host,
                        'periodic_interval': 2,
                        'state_path': str(tmp / ('state-' + host))},
            'database': {'connection': db_url},
            'placement': placement_fixture.placement_options(proxied),
            'agent': {'enabled_drivers': 'fake_driver', 'hotplug': 'false',
                      'resource_provider_name': host}})
        process = processes.ServiceProcess(script, config,
                                           tmp / (host + '.log'))
        started.append(process.start())
        return process

    started = []
    try:
        conductor = start('cyborg-conductor', 'conductor')
        conductor.wait_for_log('cyborg-conductor started', timeout=60)
        steady = start('cyborg-agent', 'steady')
        # The first sync done, not only begun: a provider is listed from
        # its create on, before its traits and inventory are set.
        processes.wait_for(lambda: 'steady' in _synced_hosts(db_url),
                           timeout=60, what="the first host's first sync")
        before = _providers(placement_url, 'steady')
        assert _inventories(placement_url, 'steady') == {
            'steady_FakeDevice': {'FPGA': 16}}

        proxy.cut()
        # A restarted agent and a new one report while Placement is away.
        steady.stop()
        steady.start()
        start('cyborg-agent', 'late')
        processes.wait_for(lambda: 'late' in _stored_hosts(db_url),
                           timeout=30, what="the new host's report stored")
        steady.wait_for_log('cyborg-agent started', timeout=30, count=2)
        # The new host's sync fails, and is tried again with its next
        # periodic reports.
        conductor.wait_for_log('Placement sync of host late failed',
                               timeout=30, count=2)
        assert all(p.returncode is None for p in started)
        assert _providers(placement_url, 'late') == {}
        proxy.restore()

        processes.wait_for(
            lambda: 'late' in _synced_hosts(db_url), timeout=CONVERGE,
            what='the new host in Placement after its return')
        assert _inventories(placement_url, 'late') == {
            'late_FakeDevice': {'FPGA': 16}}
        # The provider that was there is untouched: same generation.
        assert _providers(placement_url, 'steady') == before
        assert _stored_hosts(db_url) == {'steady', 'late'}
        assert all(p.returncode is None for p in started)
        for process in started:
            assert 'Traceback' not in process.log(), process.log()[-3000:]
    finally:
        for process in started:
            process.kill()
