"""cyborg-api and cyborg-aio as real processes: they serve, and SIGTERM
ends them within 5 s with status 0."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests

from cyborg.db import migration
from tests.fixtures import databases
from tests.fixtures import processes

ADMIN = {'X-Roles': 'admin', 'X-Project-Id': 'functional'}


def _get(url, timeout=30.0, **kwargs):
    """GET ``url``, waiting for the server to answer at all."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return requests.get(url, timeout=5, **kwargs)
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_api_workers_serve_restart_and_stop(tmp_path):
    port = processes.free_port()
    with databases.throwaway_database('sqlite') as db_url:
        databases.create_schema(db_url)
        config = processes.write_config(tmp_path / 'api.conf', {
            'DEFAULT': {'transport_url': 'rabbit://guest:guest@127.0.0.1:1/'},
            'api': {'host_ip': '127.0.0.1', 'port': port, 'api_workers': 2,
                    'threads': 4, 'auth_strategy': 'noauth'},
            'database': {'connection': db_url},
        })
        api = processes.ServiceProcess('cyborg-api', config,
                                       tmp_path / 'api.log')
        api.start()
        try:
            api.wait_for_log('listening on http://127.0.0.1:%d' % port)
            root = _get('http://127.0.0.1:%d/' % port)
            assert root.status_code == 200
            assert root.json()['versions'][0]['id'] == 'v2'
            devices = _get('http://127.0.0.1:%d/v2/devices' % port,
                           headers=ADMIN)
            assert devices.status_code == 200, devices.text
            assert devices.json() == {'devices': []}

            # A worker that dies is replaced; the port keeps answering.
            workers = re.findall(r'Started cyborg-api worker (\d+)',
                                 api.log())
            assert len(workers) == 2
            os.kill(int(workers[0]), signal.SIGKILL)
            api.wait_for_log('starting another')
            processes.wait_for(
                lambda: api.log().count('Started cyborg-api worker') == 3,
                timeout=15, what='a third worker')
            assert _get('http://127.0.0.1:%d/' % port).status_code == 200

            api.stop()
            assert 'Traceback' not in api.log()
        finally:
            api.kill()


def test_aio_shows_the_fake_fpga_to_the_openstack_client(tmp_path):
    port = processes.free_port()
    state_dir = tmp_path / 'state'
    # Short health timers, so that the broken device comes back quickly.
    metrics_port = processes.free_port()
    config = processes.write_config(tmp_path / 'extra.conf', {
        'health': {'check_interval': 0.2, 'hold_down': 1},
        'metrics': {'enabled': True, 'conductor_port': metrics_port}})
    aio = processes.ServiceProcess(
        'cyborg-aio', config, tmp_path / 'aio.out',
        args=['--port', str(port), '--state-dir', str(state_dir)])
    aio.start()
    try:
        aio.wait_for_log('cyborg-aio is running', timeout=60)
        url = 'http://127.0.0.1:%d' % port
        assert url in aio.log()
        assert _get(url + '/').status_code == 200
        assert processes.wait_for(lambda: _devices(url),
                                  what='the first report') == [('FPGA',
                                                                '0xABCD')]

        listed = subprocess.run(
            [os.path.join(sys.prefix, 'bin', 'openstack'), 'accelerator',
             'device', 'list', '--os-auth-type', 'none',
             '--os-endpoint', url + '/v2', '-f', 'json'],
            capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert [(r['type'], r['vendor']) for r in rows] == [('FPGA',
                                                             '0xABCD')]
        assert (state_dir / 'cyborg.sqlite').exists()
        assert (state_dir / 'placement.sqlite').exists()

        # A new user breaks the fake device as the banner says, watches it
        # leave the schedule, heals it and watches it come back.
        fault = state_dir / 'fake_driver_health.json'
        assert str(fault) in aio.log()
        fault.write_text('{"severity": "fatal", "reason": "try"}')
        processes.wait_for(lambda: _health(url) == ['unhealthy'],
                           timeout=10, what='the fake device unhealthy')
        fault.unlink()
        processes.wait_for(lambda: _health(url) == ['healthy'],
                           timeout=20, what='the fake device healthy')

        # One process, one registry: the API's /metrics and the
        # conductor's port both serve the families of every kind.
        for scraped in (url + '/metrics',
                        'http://127.0.0.1:%d/metrics' % metrics_port):
            families = _families(_get(scraped).text)
            assert {'cyborg_api_requests_total', 'cyborg_conductor_hosts',
                    'cyborg_conductor_health_transitions_total',
                    'cyborg_agent_health_readings_total',
                    'cyborg_db_transaction_retries_total'} <= families, (
                scraped, sorted(families))
        aio.stop()
    finally:
        aio.kill()


def _families(exposition):
    # '# TYPE <name> <type>' lines.
    return {line.split()[2] for line in exposition.splitlines()
            if line.startswith('# TYPE ')}


def _devices(url):
    devices = _get(url + '/v2/devices', headers=ADMIN).json()['devices']
    return [(d['type'], d['vendor']) for d in devices]


def _health(url):
    devices = _get(url + '/v2/devices', headers=dict(
        ADMIN, **{'OpenStack-API-Version': 'accelerator 2.4'})).json()
    return [d['health'] for d in devices['devices']]


def _catches_sigterm(pid):
    with open('/proc/%d/status' % pid) as f:
        caught = next(line for line in f if line.startswith('SigCgt:'))
    return int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1))


def test_sigterm_while_starting_is_a_clean_exit(tmp_path):
    config = processes.write_config(tmp_path / 'any.conf', {
        'DEFAULT': {'state_path': tmp_path,
                    'transport_url': 'rabbit://guest:guest@127.0.0.1:1/'},
        'api': {'host_ip': '127.0.0.1', 'port': processes.free_port()},
        'agent': {'enabled_drivers': 'fake_driver', 'hotplug': False},
    })
    started = [processes.ServiceProcess(script, config,
                                        tmp_path / f'{script}.log').start()
               for script in ('cyborg-api', 'cyborg-conductor',
                              'cyborg-agent')]
    try:
        for process in started:
            # As soon as Python runs our code, not before: a signal that
            # comes while the interpreter itself starts kills any program.
            processes.wait_for(lambda: _catches_sigterm(process.pid),
                               what='a SIGTERM handler')
        for process in started:
            process.stop()
    finally:
        for process in started:
            process.kill()


@pytest.mark.parametrize('kind', databases.KINDS)
def test_dbsync_upgrade_creates_the_schema(tmp_path, kind):
    with databases.throwaway_database(kind) as db_url:
        config = processes.write_config(tmp_path / 'db.conf', {
            'database': {'connection': db_url}})
        command = [os.path.join(sys.prefix, 'bin', 'cyborg-dbsync'),
                   '--config-file', str(config)]
        upgraded = subprocess.run(command + ['upgrade'], capture_output=True,
                                  text=True, timeout=120)
        assert upgraded.returncode == 0, upgraded.stderr
        version = subprocess.run(command + ['version'], capture_output=True,
                                 text=True, timeout=120)
        assert version.stdout.strip() == migration.head()
