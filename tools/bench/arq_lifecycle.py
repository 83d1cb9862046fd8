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
and concurrency level, and of each lifecycle (``lifecycle``) and, with
``--wait-bound``, of the bind until it is seen resolved (``bound``: the
PATCH and the poll).  A benchmark, not a test.  ``side_by_side.py`` runs
it against two APIs in turn.

Per-hop breakdown: with ``[metrics]enabled`` on the API (``/metrics``; under
several workers with ``PROMETHEUS_MULTIPROC_DIR``) and ``--conductor-metrics
URL`` (the conductor's metrics endpoint), each level also carries
``breakdown``: for every API route and conductor RPC method it served, the
mean milliseconds per call of each phase (``cyborg.common.timing``), the
statements per call, and what is left: ``wsgi_and_routing`` (the request
less the dispatcher's phases), ``handler_own`` (the handler less its RPC
round trip and database time), ``messaging`` (the RPC round trip less the
conductor's time serving it).

CPU per lifecycle: ``--cpu-pids FILE`` (lines ``name pid``, as
``tools/multihost-demo.sh`` writes ``<workdir>/pids``) and ``--cpu
name=pid`` (any other process: RabbitMQ, the database) add
``cpu_ms_per_lifecycle`` to each level: the user and system CPU each
process and its direct children (gunicorn's workers) spent during the
level, per lifecycle, from ``/proc``.  On a machine with few cores the
sum says how much of the lifecycle's time is CPU the services share.
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

# This folder, where the benchmark runs from.
import procstat

CALLS = ('create', 'bind', 'get', 'delete')
# Per lifecycle besides the calls: the bind until it is seen resolved
# (the PATCH and the poll, with --wait-bound) and the whole lifecycle.
SPANS = ('bound', 'lifecycle')


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
    """(hostname, rp_uuid) of the deployable with most accelerators (its
    host: the one whose name prefixes the deployable's, or the only
    one)."""
    deployables = client.call('GET', '/deployables').json()['deployables']
    hosts = {d['hostname'] for d in
             client.call('GET', '/devices').json()['devices']}
    for deployable in sorted(deployables,
                             key=lambda d: -d['num_accelerators']):
        if not deployable['rp_uuid']:
            continue
        for host in hosts:
            if deployable['name'].startswith(host + '_'):
                return host, deployable['rp_uuid']
        if len(hosts) == 1:
            return next(iter(hosts)), deployable['rp_uuid']
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
    if wait_bound:
        times['bound'] = times['bind'] + times['get']
    times['lifecycle'] = sum(times[name] for name in CALLS)
    return times


def run(client, profile, host, rp_uuid, count, concurrency, wait_bound):
    samples = {name: [] for name in CALLS + SPANS}
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
                       for name, values in samples.items() if values},
    }


# -- per-hop breakdown -------------------------------------------------------

API_PHASES = ('policy', 'validate', 'handler', 'render')


def scrape(url):
    """{(sample name, sorted label items): value} of a metrics endpoint."""
    from prometheus_client import parser

    text = requests.get(url, timeout=30).text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in parser.text_string_to_metric_families(text)
            for sample in family.samples}


def _deltas(before, after, name, key):
    """{key(labels): after - before} of the samples called ``name``."""
    found = {}
    for (sample, labels), value in after.items():
        if sample == name:
            delta = value - before.get((sample, labels), 0.0)
            if delta:
                labels = dict(labels)
                found[key(labels)] = found.get(key(labels), 0.0) + delta
    return found


def _route(labels):
    return f"{labels['method']} {labels['route']}"


def _method(labels):
    return labels['method']


def _means(scrapes, prefix, key):
    """{call: {'calls', 'statements', 'ms': {phase: mean}}} of the
    ``<prefix>_seconds``, ``<prefix>_phase_seconds`` and
    ``<prefix>_db_statements_total`` samples between two scrapes."""
    before, after = scrapes
    calls = _deltas(before, after, prefix + '_seconds_count', key)
    total = _deltas(before, after, prefix + '_seconds_sum', key)
    phases = _deltas(before, after, prefix + '_phase_seconds_sum',
                     lambda labels: (key(labels), labels['phase']))
    statements = _deltas(before, after, prefix + '_db_statements_total',
                         key)
    means = {}
    for name, n in calls.items():
        ms = {phase: 1000 * seconds / n
              for (call, phase), seconds in phases.items() if call == name}
        ms['total'] = 1000 * total.get(name, 0.0) / n
        means[name] = {'calls': int(n),
                       'statements': round(statements.get(name, 0) / n, 2),
                       'ms': ms}
    return means


def api_metrics_url(endpoint):
    """The API's ``/metrics`` URL, or None when it serves none
    (``[metrics]enabled`` off, or not cyborg)."""
    url = endpoint.rstrip('/') + '/metrics'
    return url if requests.get(url, timeout=30).status_code == 200 else None


def with_breakdown(run, api_metrics, conductor_metrics):
    """``run()``'s result, with its per-hop ``breakdown`` when either
    metrics URL is given: both endpoints are read before and after."""
    if not (api_metrics or conductor_metrics):
        return run()

    def scrapes():
        return [url and scrape(url)
                for url in (api_metrics, conductor_metrics)]
    api_before, conductor_before = scrapes()
    result = run()
    api_after, conductor_after = scrapes()
    result['breakdown'] = breakdown(
        api_metrics and (api_before, api_after),
        conductor_metrics and (conductor_before, conductor_after))
    return result


def breakdown(api, conductor):
    """Mean ms per call of each phase, from (before, after) scrapes."""
    result = {'api': _means(api, 'cyborg_api_request', _route) if api
              else {},
              'conductor': _means(conductor, 'cyborg_conductor_rpc',
                                  _method) if conductor else {}}
    for call in result['api'].values():
        ms = call['ms']
        ms['wsgi_and_routing'] = ms['total'] - sum(
            ms.get(phase, 0.0) for phase in API_PHASES)
        ms['handler_own'] = (ms.get('handler', 0.0) - ms.get('rpc', 0.0)
                             - ms.get('db', 0.0))
    for route, method in _RPC_OF.items():
        api_call = result['api'].get(route)
        served = result['conductor'].get(method)
        if api_call and served and 'rpc' in api_call['ms']:
            api_call['ms']['messaging'] = (api_call['ms']['rpc']
                                           - served['ms']['total'])
    for side in result.values():
        for call in side.values():
            call['ms'] = {k: round(v, 3) for k, v in sorted(
                call['ms'].items())}
    return result


# The conductor method each API route calls.
_RPC_OF = {'POST /v2/accelerator_requests': 'arq_create',
           'PATCH /v2/accelerator_requests': 'arq_bind',
           'DELETE /v2/accelerator_requests': 'arq_delete'}


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


# -- CPU per process ----------------------------------------------------------

def _cpu_seconds(pid):
    """CPU seconds of ``pid`` (0 once it is gone)."""
    try:
        return procstat.cpu_seconds(pid)
    except OSError:
        return 0.0


def cpu_targets(pids_file, extra):
    """{name: [pid, ...]}: each named process with its direct children."""
    named = []
    if pids_file:
        with open(pids_file) as f:
            named += [line.split() for line in f if line.strip()]
    named += [item.split('=', 1) for item in extra]
    return {name: [int(pid)] + procstat.children(int(pid))
            for name, pid in named}


def cpu_now(targets):
    return {name: sum(_cpu_seconds(pid) for pid in pids)
            for name, pids in targets.items()}


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
    parser.add_argument('--no-api-metrics', action='store_true',
                        help='do not read the API\'s /metrics')
    parser.add_argument('--conductor-metrics',
                        help='URL of the conductor\'s metrics endpoint, '
                             'e.g. http://127.0.0.1:9102/metrics')
    parser.add_argument('--cpu-pids', metavar='FILE',
                        help='"name pid" lines of processes whose CPU per '
                             'lifecycle to report')
    parser.add_argument('--cpu', action='append', default=[],
                        metavar='NAME=PID',
                        help='another process whose CPU to report')
    args = parser.parse_args(argv)
    targets = cpu_targets(args.cpu_pids, args.cpu)

    client = Client(args.endpoint, args.token, args.service_token)
    profile = find_profile(client, args.profile)
    host, rp_uuid = find_target(client)
    if args.warmup:
        run(client, profile, host, rp_uuid, args.warmup, 1, args.wait_bound)
    api_metrics = (None if args.no_api_metrics
                   else api_metrics_url(args.endpoint))
    results = []
    for level in args.concurrency.split(','):
        def run_level():
            cpu_before = cpu_now(targets)
            result = run(client, profile, host, rp_uuid, args.count,
                         int(level), args.wait_bound)
            if targets:
                cpu_after, done = cpu_now(targets), result['lifecycles']
                result['cpu_ms_per_lifecycle'] = {
                    name: round((cpu_after[name] - cpu_before[name]) * 1000
                                / max(done, 1), 2) for name in targets}
            return result
        results.append(with_breakdown(run_level, api_metrics,
                                      args.conductor_metrics))
    print(json.dumps({'endpoint': args.endpoint, 'device_profile': profile,
                      'hostname': host, 'device_rp_uuid': rp_uuid,
                      'wait_bound': args.wait_bound, 'results': results},
                     indent=2))
    return 1 if any(r['errors'] for r in results) else 0


if __name__ == '__main__':
    sys.exit(main())
