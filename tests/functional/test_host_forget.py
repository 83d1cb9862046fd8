"""Retiring a compute host with ``cyborg-manage host forget``, end to end:
cyborg-conductor and cyborg-agent as real processes on the machine's
RabbitMQ (a vhost of their own), MariaDB and the real Placement, and
cyborg-manage as the operator runs it.

Before, nothing removed a host: a retired one stayed silent for ever
(the ``CyborgSilentHosts`` alert never cleared), its devices listed and
its providers in Placement.  The command is refused while the agent
reports and while an allocation holds the host's provider; once the
agent is stopped and the allocation released, the host goes with its
rows and providers, and an agent started again brings it back as new.
"""

import os
import subprocess
import sys
import uuid

import requests
import sqlalchemy as sa

from cyborg.cmd import aio
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes
from tests.fixtures import rabbit

CONDUCTOR_HOST = 'conductor-fg'
AGENT_HOST = 'agent-fg'
# Seconds between reports: the host is silent three of them after its
# agent stops.
PERIOD = 1


def _query(db_url, sql, **params):
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(sql), params).mappings().all()
    finally:
        engine.dispose()


def _count(db_url, table):
    return _query(db_url, f'SELECT COUNT(*) AS n FROM {table} '
                          f'WHERE hostname = :h', h=AGENT_HOST)[0]['n']


def _manage(config, *args):
    return subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-manage'),
         '--config-file', str(config), *args],
        capture_output=True, text=True, timeout=90)


def _listed(config):
    """{host: its line of ``host list``, split}."""
    listed = _manage(config, 'host', 'list')
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ['HOST', 'COMPUTE']
    return {line.split()[0]: line.split() for line in lines[1:]}


def _provider(placement_url, rp_uuid):
    return requests.get(f'{placement_url}/resource_providers/{rp_uuid}',
                        headers=placement_fixture.HEADERS, timeout=10)


def test_a_retired_host_is_forgotten(tmp_path):
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database('mysql') as db_url, \
            placement_fixture.PlacementProcess() as placement_url:
        databases.create_schema(db_url)
        cn_uuid = aio.ensure_compute_node(placement_url, AGENT_HOST)
        common = {'transport_url': transport_url, 'debug': True,
                  'state_path': tmp_path / 'state',
                  'periodic_interval': PERIOD}
        conductor = processes.ServiceProcess(
            'cyborg-conductor', processes.write_config(
                tmp_path / 'conductor.conf', {
                    'DEFAULT': dict(common, host=CONDUCTOR_HOST),
                    'database': {'connection': db_url},
                    'placement': placement_fixture.placement_options(
                        placement_url),
                    'nova': {'send_events': False}}),
            tmp_path / 'conductor.log')
        agent_conf = processes.write_config(tmp_path / 'agent.conf', {
            'DEFAULT': dict(common, host=AGENT_HOST),
            'agent': {'enabled_drivers': 'fake_driver', 'hotplug': False,
                      'resource_provider_name': AGENT_HOST}})
        agent = processes.ServiceProcess('cyborg-agent', agent_conf,
                                         tmp_path / 'agent.log')
        # The operator's: the broker only, no database.
        manage = processes.write_config(tmp_path / 'manage.conf', {
            'DEFAULT': {'transport_url': transport_url}})
        try:
            conductor.start().wait_for_log('cyborg-conductor started')
            agent.start().wait_for_log('cyborg-agent started')
            (rp,) = processes.wait_for(lambda: _query(
                db_url, 'SELECT d.rp_uuid FROM deployables d JOIN hosts h '
                        'ON h.hostname = :h WHERE h.placement_synced',
                h=AGENT_HOST), what='the first report, synced')
            rp_uuid = rp['rp_uuid']
            assert _provider(placement_url, rp_uuid).status_code == 200

            assert _listed(manage)[AGENT_HOST][-3:] == [
                'reporting', '1', 'synced']
            refused = _manage(manage, 'host', 'forget', AGENT_HOST)
            assert refused.returncode == 1, refused
            assert 'its agent runs' in refused.stderr
            assert 'Traceback' not in refused.stderr

            # Retire it: the agent stops for good, while an instance
            # still holds one of its accelerators.
            agent.stop()
            consumer = str(uuid.uuid4())
            placement_fixture.hold_allocation(placement_url, consumer,
                                              {rp_uuid: {'FPGA': 1}})
            processes.wait_for(
                lambda: _listed(manage)[AGENT_HOST][-3] == 'silent',
                what='the host to fall silent')
            refused = _manage(manage, 'host', 'forget', AGENT_HOST)
            assert refused.returncode == 1, refused
            assert consumer in refused.stderr
            assert _count(db_url, 'devices') == 1

            placement_fixture.hold_allocation(placement_url, consumer, {})
            done = _manage(manage, 'host', 'forget', AGENT_HOST)
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith(
                f'Forgot host {AGENT_HOST}: removed 1 device(s)')
            assert _count(db_url, 'hosts') == 0
            assert _count(db_url, 'devices') == 0
            assert _query(db_url, 'SELECT COUNT(*) AS n FROM deployables'
                          )[0]['n'] == 0
            assert _provider(placement_url, rp_uuid).status_code == 404
            assert _provider(placement_url, cn_uuid).status_code == 200
            assert AGENT_HOST not in _listed(manage)
            gone = _manage(manage, 'host', 'forget', AGENT_HOST)
            assert gone.returncode == 1
            assert 'No host' in gone.stderr

            # Back in service: its agent's next report makes it anew.
            agent.start().wait_for_log('cyborg-agent started', count=2)
            processes.wait_for(lambda: _query(
                db_url, 'SELECT hostname FROM hosts WHERE hostname = :h '
                        'AND placement_synced', h=AGENT_HOST),
                what='the host reporting again')
            assert _count(db_url, 'devices') == 1
            assert _provider(placement_url, rp_uuid).status_code == 200
            assert 'Traceback' not in conductor.log()
        finally:
            agent.kill()
            conductor.kill()
