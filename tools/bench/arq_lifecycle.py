#!/usr/bin/env python3
"""ARQ lifecycle benchmark: create -> bind -> get -> delete, as Nova does it.

    python tools/bench/arq_lifecycle.py http://127.0.0.1:6666 \
        [--count 200] [--concurrency 1,8] [--profile NAME] [--wait-bound]

Talks HTTP only.  With ``noauth`` (the all-in-one, tests) it sends
X-Project-Id/X-Roles and, for the service-only calls (bind, delete by
instance), an ``X-Service-Token`` header; behind Keystone pass
``--token`` and ``--service-token``.

It finds what it needs through the API: the device profile (``--profile``,
else the first whose groups ask for one resource and need no programming,
else it creates ``bench-arq`` for the fake driver's FPGA), and the device's
provider (the deployable with the most accelerators; its host is the
device whose hostname prefixes its name).  Each lifecycle uses a fresh
instance uuid.  Prints JSON: lifecycles/s and p50/p99 latency (ms) per call
and concurrency level.  A benchmark, not a test.
"""

import argparse
import concurrent.futures
import json
import statistics
import sys
import threading
import time
import uuid

import requests

CALLS = ('create', 'bind', 'get', 'delete')


class Client:
    def __init__(self, endpoint, token=None, service_token=None,
                 project='bench'):
        self.base = endpoint.rstrip('/') + '/v2'
        self.user = {'Accept': 'application/json'}
        if token:
            self.user['X-Auth-Token'] = token
        else:
            self.user.update({'X-Project-Id': project, 'X-User-Id': 'bench',
                              'X-Roles': 'admin,member,reader'})
        self.service = dict(self.user, **{
            'X-Service-Token': service_token or 'bench-service-token'})
        self._local = threading.local()

    def _session(self):
        if not hasattr(self._local, 'session'):
            self._local.session = requests.Session()
        return self._local.session

    def call(self, method, path, service=False, expect=(200,), **kwargs):
        headers = self.service if service else self.user
        response = self._session().request(method, self.base + path,
                                           headers=headers, timeout=60,
                                           **kwargs)
        if response.status_code not in expect:
            raise RuntimeError(f'{method} {path}: {response.status_code} '
                               f'{response.text[:300]}')
        return response


def find_profile(client, name):
    profiles = client.call('GET', '/device_profiles').json()[
        'device_profiles']
    if name:
        for profile in profiles:
            if profile['name'] == name:
                return profile['name']
        sys.exit(f'no device profile named {name}')
    for profile in profiles:
        groups = profile['groups']
        if len(groups) == 1 and _simple(groups[0]):
            return profile['name']
    client.call('POST', '/device_profiles', expect=(201,), json=[{
        'name': 'bench-arq', 'groups': [{
            'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]}])
    return 'bench-arq'


def _simple(group):
    amounts = [int(v) for k, v in group.items() if k.startswith('resources:')]
    return sum(amounts) == 1 and not any(k.startswith('accel:')
                                         for k in group)


def find_target(client):
    """(hostname, rp_uuid) of the deployable with most accelerators."""
    deployables = client.call('GET', '/deployables').json()['deployables']
    hosts = {d['hostname'] for d in
             client.call('GET', '/devices').json()['devices']}
    for deployable in sorted(deployables,
                             key=lambda d: -d['num_accelerators']):
        for host in hosts:
            if deployable['name'].startswith(host + '_') and \
                    deployable['rp_uuid']:
                return host, deployable['rp_uuid']
    sys.exit('no deployable with a provider found through the API')


def lifecycle(client, profile, host, rp_uuid, wait_bound):
    times = {}
    instance = str(uuid.uuid4())

    def timed(name, *args, **kwargs):
        started = time.perf_counter()
        response = client.call(*args, **kwargs)
        times[name] = (time.perf_counter() - started) * 1000
        return response

    arqs = timed('create', 'POST', '/accelerator_requests', expect=(201,),
                 json={'device_profile_name': profile}).json()['arqs']
    patch = {arq['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': host},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
        for arq in arqs}
    timed('bind', 'PATCH', '/accelerator_requests', service=True,
          expect=(202,), json=patch)
    if wait_bound:
        started = time.perf_counter()
        while client.call('GET', '/accelerator_requests?instance=' +
                          instance + '&bind_state=resolved',
                          expect=(200, 423)).status_code == 423:
            time.sleep(0.005)
        times['get'] = (time.perf_counter() - started) * 1000
    else:
        timed('get', 'GET', '/accelerator_requests?instance=' + instance)
    timed('delete', 'DELETE', '/accelerator_requests?instance=' + instance,
          service=True, expect=(204,))
    return times


def run(client, profile, host, rp_uuid, count, concurrency, wait_bound):
    samples = {name: [] for name in CALLS}
    errors = []
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(lifecycle, client, profile, host, rp_uuid,
                               wait_bound) for _ in range(count)]
        for future in concurrent.futures.as_completed(futures):
            try:
                for name, ms in future.result().items():
                    samples[name].append(ms)
            except Exception as e:  # noqa: BLE001 - counted and shown
                errors.append(str(e))
    elapsed = time.perf_counter() - started
    done = count - len(errors)
    return {
        'concurrency': concurrency, 'lifecycles': done,
        'errors': len(errors), 'first_error': errors[0] if errors else None,
        'seconds': round(elapsed, 3),
        'lifecycles_per_s': round(done / elapsed, 2),
        'latency_ms': {name: _percentiles(values)
                       for name, values in samples.items()},
    }


def _percentiles(values):
    if not values:
        return None
    values = sorted(values)
    if len(values) > 1:
        p99 = statistics.quantiles(values, n=100, method='inclusive')[98]
    else:
        p99 = values[0]
    return {'p50': round(statistics.median(values), 2),
            'p99': round(p99, 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('endpoint', help='cyborg API URL, e.g. '
                                         'http://127.0.0.1:6666')
    parser.add_argument('--count', type=int, default=200,
                        help='lifecycles per concurrency level')
    parser.add_argument('--concurrency', default='1,8',
                        help='comma-separated concurrency levels')
    parser.add_argument('--profile', help='device profile name to use')
    parser.add_argument('--wait-bound', action='store_true',
                        help='poll ?bind_state=resolved until the bind is '
                             'resolved instead of one GET')
    parser.add_argument('--token', help='Keystone token (else noauth)')
    parser.add_argument('--service-token', help='Keystone service token')
    parser.add_argument('--warmup', type=int, default=5,
                        help='lifecycles run first and not measured')
    args = parser.parse_args(argv)

    client = Client(args.endpoint, args.token, args.service_token)
    profile = find_profile(client, args.profile)
    host, rp_uuid = find_target(client)
    if args.warmup:
        run(client, profile, host, rp_uuid, args.warmup, 1, args.wait_bound)
    results = [run(client, profile, host, rp_uuid, args.count, int(level),
                   args.wait_bound)
               for level in args.concurrency.split(',')]
    print(json.dumps({'endpoint': args.endpoint, 'device_profile': profile,
                      'hostname': host, 'device_rp_uuid': rp_uuid,
                      'wait_bound': args.wait_bound, 'results': results},
                     indent=2))
    return 1 if any(r['errors'] for r in results) else 0


if __name__ == '__main__':
    sys.exit(main())
