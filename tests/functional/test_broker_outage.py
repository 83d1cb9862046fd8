"""RabbitMQ taken away from a running API and conductor (through a TCP
proxy: the broker itself is shared) and brought back.

While it is away: the processes stay up, reads are served at once, and
writes answer 503 within seconds (never 500, never a hang), writing
nothing.  When it is back, a write works again within 4 s.
"""

import concurrent.futures
import time

import requests

from tests.fixtures import databases
from tests.fixtures import processes
from tests.fixtures import rabbit
from tests.fixtures import tcp_proxy
from tests.functional.test_processes import _free_port

ADMIN = {'X-Roles': 'admin', 'X-Project-Id': 'functional'}
WRITES_DURING_OUTAGE = 20       # more than [api]threads allows to wait
RECOVERY_BOUND = 4.0


class Deployment:
    def __init__(self, port):
        self.base = 'http://127.0.0.1:%d' % port
        self.created = 0

    def request(self, method, path, **kwargs):
        start = time.monotonic()
        resp = requests.request(method, self.base + path, headers=ADMIN,
                                timeout=60, **kwargs)
        return resp, time.monotonic() - start

    def create_profile(self):
        self.created += 1
        return self.request('POST', '/v2/device_profiles', json=[{
            'name': 'outage-%d' % self.created,
            'groups': [{'resources:FPGA': '1'}]}])

    def profiles(self):
        resp, _ = self.request('GET', '/v2/device_profiles')
        return len(resp.json()['device_profiles'])


def _start(tmp_path, proxy, db_url, vhost_url):
    port = _free_port()
    url = vhost_url.replace(':%d/' % rabbit.RABBIT_PORT,
                            ':%d/' % proxy.port)
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'DEFAULT': {'transport_url': url},
        'api': {'host_ip': '127.0.0.1', 'port': port, 'threads': 16,
                'auth_strategy': 'noauth'},
        'database': {'connection': db_url},
    })
    conductor = processes.ServiceProcess('cyborg-conductor', config,
                                         tmp_path / 'conductor.log')
    api = processes.ServiceProcess('cyborg-api', config,
                                   tmp_path / 'api.log')
    conductor.start()
    api.start()
    api.wait_for_log('listening on')
    conductor.wait_for_log('cyborg-conductor started')
    return Deployment(port), [api, conductor]


def _recovers(deployment, restored_at):
    """Seconds from the broker's return to the first successful write."""
    while time.monotonic() - restored_at < 30:
        resp, _ = deployment.create_profile()
        assert resp.status_code in (201, 503), resp.text
        if resp.status_code == 201:
            return time.monotonic() - restored_at
        time.sleep(0.2)
    raise AssertionError('no write succeeded within 30 s of the return')


def _check_outage(deployment, services):
    before = deployment.profiles()
    with concurrent.futures.ThreadPoolExecutor(WRITES_DURING_OUTAGE) as pool:
        writes = [pool.submit(deployment.create_profile)
                  for _ in range(WRITES_DURING_OUTAGE)]
        time.sleep(0.3)
        for path in ('/', '/v2/devices', '/v2/device_profiles'):
            resp, took = deployment.request('GET', path)
            assert resp.status_code == 200 and took < 1.0, (path, took)
        results = [w.result() for w in writes]
    statuses = sorted({resp.status_code for resp, _ in results})
    assert statuses == [503], [r.text for r, _ in results]
    assert max(took for _, took in results) < 10, results
    assert all('broker' in resp.text or 'conductor' in resp.text
               for resp, _ in results)
    assert deployment.profiles() == before      # nothing written
    assert all(s.returncode is None for s in services)


def test_broker_lost_and_back(tmp_path):
    with databases.throwaway_database('mysql') as db_url, \
            rabbit.throwaway_vhost() as vhost_url, \
            tcp_proxy.tcp_proxy(rabbit.RABBIT_PORT) as proxy:
        databases.create_schema(db_url)
        deployment, services = _start(tmp_path, proxy, db_url, vhost_url)
        try:
            assert deployment.create_profile()[0].status_code == 201
            proxy.cut()
            _check_outage(deployment, services)
            time.sleep(3)
            proxy.restore()
            assert _recovers(deployment, time.monotonic()) < RECOVERY_BOUND
            for service in services:
                service.stop()
            log = services[0].log()
            assert 'Traceback' not in log and 'Unexpected error' not in log
        finally:
            for service in services:
                service.kill()


def test_broker_away_before_the_first_write(tmp_path):
    """The reply queue cannot be opened: writes still answer 503 in
    seconds, and work once the broker is back."""
    with databases.throwaway_database('sqlite') as db_url, \
            rabbit.throwaway_vhost() as vhost_url, \
            tcp_proxy.tcp_proxy(rabbit.RABBIT_PORT) as proxy:
        databases.create_schema(db_url)
        deployment, services = _start(tmp_path, proxy, db_url, vhost_url)
        try:
            proxy.cut()
            _check_outage(deployment, services)
            proxy.restore()
            assert _recovers(deployment, time.monotonic()) < RECOVERY_BOUND
        finally:
            for service in services:
                service.kill()
