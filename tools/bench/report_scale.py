"""How much one conductor pays for inventory reports, at scale.

N simulated hosts with M devices each report through RabbitMQ (a fresh
vhost) into one conductor running in this process (the real RPC server on
the threading executor, the real report handling), on MariaDB or
PostgreSQL, against the real Placement served as a separate process.  The
simulated agents are RPC clients on threads of this process.

Phases: ``first`` (each host's first, full report: rows and providers
made; with ``--hosts 1000`` this is a boot storm of 1,000 new hosts
reporting at once), ``unchanged`` (the periodic report of a host with no
change), ``changed`` (a delta with one device changed),
``unchanged_after_change``.  For each it prints:

- wall_s, reports_per_s: reports answered per second of wall time;
- conductor_cpu_s_per_report: CPU seconds of the conductor threads that
  handled the reports (``time.thread_time`` around each handling), and
  process_cpu_s_per_report: this whole process (conductor, simulated
  agents and messaging) from ``resource.getrusage``;
- placement_server_cpu_s_per_report: CPU of the Placement processes
  (``--placement-workers`` of them, serving one port; they run beside, on
  the same machine);
- db_statements_per_report: SQL statements sent (an engine event listener);
- placement_calls_per_report and placement_calls_per_device: HTTP calls
  to Placement.

With ``--runs N`` the whole benchmark runs N times on fresh databases and
the JSON also holds each phase's medians and whether they meet the targets
of issue #12 (a first report: <= 2 Placement calls per device plus a
constant, <= 20 ms of conductor CPU, 1,000 hosts in < 60 s; an unchanged
report: <= 0.94 ms, 1 statement, no Placement call).  The load average
before and after says how busy the machine was.

Usage (from the repository root; needs the local RabbitMQ and database)::

    .venv/bin/python tools/bench/report_scale.py --hosts 1000 --devices 8
    # the boot storm alone, three times:
    .venv/bin/python tools/bench/report_scale.py --hosts 1000 \
        --phases first,unchanged --runs 3

Prints one JSON document.  A benchmark, not a test.
"""

import argparse
import concurrent.futures
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

# The repository root, for the test fixtures that make throwaway databases,
# vhosts and the Placement process.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

import requests
import sqlalchemy as sa

import cyborg.conf
from cyborg.common import context as cyborg_context
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import api as db_api
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import databases, processes, rabbit
from tests.fixtures import placement as placement_fixture

import procstat


class MeasuredManager(conductor_manager.ConductorManager):
    """The real endpoints, timing the CPU of each report's handling."""

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.lock = threading.Lock()
        self.cpu = 0.0

    def report_inventory(self, context, hostname, report):
        start = time.thread_time()
        try:
            return super().report_inventory(context, hostname, report)
        finally:
            spent = time.thread_time() - start
            with self.lock:
                self.cpu += spent


def host_devices(host, devices, generation=0):
    """``devices`` GPU-like devices; ``generation`` changes device 0."""
    found = []
    for index in range(devices):
        address = f'0000:{0x10 + index:02x}:00.0'
        attributes = {'rc': 'PGPU', 'trait0': 'CUSTOM_BENCH_GPU',
                      'numa_node': str(index % 2)}
        if index == 0 and generation:
            attributes['trait1'] = f'CUSTOM_BENCH_GEN{generation % 2}'
        found.append(inventory.DriverDevice(
            type='GPU', vendor='10de', model='A100',
            controlpath_id=inventory.ControlPathID(address),
            std_board_info={'product_id': '20b5'},
            deployables=[inventory.Deployable(
                name=f'{host}_{address}', num_accelerators=1,
                attributes=attributes, driver_name='nvidia_gpu_driver',
                attach_handles=[inventory.AttachHandle(
                    'PCI', inventory.pci_info(address))])]))
    return found


def full_report(devices):
    return {'digest': inventory.inventory_digest(devices),
            'base_digest': None, 'full': True,
            'devices': [d.to_dict() for d in devices], 'removed': []}


def unchanged_report(devices):
    digest = inventory.inventory_digest(devices)
    return {'digest': digest, 'base_digest': digest, 'full': False,
            'devices': [], 'removed': []}


def changed_report(before, after):
    return {'digest': inventory.inventory_digest(after),
            'base_digest': inventory.inventory_digest(before),
            'full': False, 'devices': [after[0].to_dict()], 'removed': []}


def process_cpu(pids):
    """CPU seconds processes ``pids`` have used (Linux), or None."""
    try:
        return sum(procstat.cpu_seconds(pid) for pid in pids)
    except OSError:
        return None


class Bench:
    def __init__(self, conf, manager, engine, senders, placement_pids=(),
                 devices=1):
        self.conf = conf
        self.manager = manager
        self.statements = 0
        self.senders = senders
        self.placement_pids = placement_pids
        self.devices = devices
        self.api = conductor_rpcapi.ConductorAPI(conf, timeout=120)
        self.context = cyborg_context.get_admin_context()
        sa.event.listen(engine, 'before_cursor_execute', self._count)

    def _count(self, *_args):
        self.statements += 1

    def phase(self, name, reports):
        """Send ``reports`` ({host: report}); return the phase's numbers."""
        client = placement_client.get_client(self.conf)
        calls, statements = client.calls, self.statements
        cpu, usage = self.manager.cpu, resource.getrusage(resource.RUSAGE_SELF)
        placement_cpu = process_cpu(self.placement_pids)
        started = time.monotonic()

        def send(item):
            host, report = item
            reply = self.api.report_inventory(self.context, host, report)
            if reply['need_full'] or reply['digest'] != report['digest']:
                raise RuntimeError(f'{host}: unexpected reply {reply}')

        with concurrent.futures.ThreadPoolExecutor(self.senders) as pool:
            list(pool.map(send, reports.items()))
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        n = len(reports)
        print(f'{name}: {n} reports in {wall:.1f} s', file=sys.stderr)
        own_cpu = (after.ru_utime + after.ru_stime - usage.ru_utime -
                   usage.ru_stime)
        placement_after = process_cpu(self.placement_pids)
        calls = client.calls - calls
        return {'phase': name, 'reports': n, 'wall_s': round(wall, 3),
                'reports_per_s': round(n / wall, 1),
                'conductor_cpu_s_per_report': round(
                    (self.manager.cpu - cpu) / n, 5),
                'process_cpu_s_per_report': round(own_cpu / n, 5),
                'placement_server_cpu_s_per_report': None
                if placement_cpu is None else round(
                    (placement_after - placement_cpu) / n, 5),
                'db_statements_per_report': round(
                    (self.statements - statements) / n, 2),
                'placement_calls_per_report': round(calls / n, 2),
                'placement_calls_per_device': round(
                    calls / n / self.devices, 3)}


def make_conf(db_url, transport_url, placement_url, workers):
    # Imported late: cyborg must pick oslo.service's threading backend
    # before oslo.messaging's option modules are loaded.
    from oslo_messaging import opts as messaging_opts

    conf = cyborg.conf.CONF
    for group, opts in messaging_opts.list_opts():
        conf.register_opts(opts, group=group)
    conf([], project='cyborg', default_config_files=[],
         default_config_dirs=[])
    conf.set_override('transport_url', transport_url)
    conf.set_override('connection', db_url, group='database')
    conf.set_override('max_pool_size', workers + 2, group='database')
    conf.set_override('executor_thread_pool_size', workers)
    placement_fixture.placement_conf(conf, placement_url)
    return conf


def make_compute_nodes(url, hosts):
    with requests.Session() as session:
        for host in hosts:
            resp = session.post(url + '/resource_providers',
                                json={'name': host},
                                headers=placement_fixture.HEADERS, timeout=30)
            resp.raise_for_status()


def run(args):
    """One run of the chosen phases on fresh databases: [phase results]."""
    hosts = [f'bench-{i:05d}' for i in range(args.hosts)]
    with databases.throwaway_database(args.db) as db_url, \
            databases.throwaway_database(args.db) as placement_db, \
            rabbit.throwaway_vhost() as transport_url, \
            contextlib.ExitStack() as stack:
        url, pids = placement_workers(stack, placement_db,
                                      args.placement_workers)
        return _run(args, hosts, db_url, transport_url, url, pids)


def placement_workers(stack, db_url, count):
    """Start ``count`` Placement processes sharing one port and database
    (as a deployment's API workers do), one after the other (each syncs
    the schema first); ``stack`` stops them.  Returns (url, pids)."""
    shared = count > 1
    # SO_REUSEPORT cannot share port 0.
    port = processes.free_port() if shared else 0
    workers = []
    for _ in range(count):
        workers.append(placement_fixture.PlacementProcess(
            db_url, port=port, reuse_port=shared))
        url = stack.enter_context(workers[-1])
    return url, [w._proc.pid for w in workers]


def _run(args, hosts, db_url, transport_url, url, placement_pids):
    databases.create_schema(db_url)
    make_compute_nodes(url, hosts + [WARM_UP])
    conf = make_conf(db_url, transport_url, url, args.workers)
    db_api.configure(conf)
    rpc.get_transport(conf)
    manager = MeasuredManager(conf, 'bench-conductor')
    server = rpc.get_server(conf, conductor_rpcapi.TOPIC,
                            'bench-conductor', [manager])
    server.start()
    try:
        bench = Bench(conf, manager, db_api.get_engine(), args.senders,
                      placement_pids, args.devices)
        # Not measured: what a conductor does once (custom traits and
        # classes made, connections opened) and Placement's first requests.
        bench.api.report_inventory(bench.context, WARM_UP, full_report(
            host_devices(WARM_UP, args.devices)))
        before = {h: host_devices(h, args.devices) for h in hosts}
        after = {h: host_devices(h, args.devices, 1) for h in hosts}
        changed = hosts[:args.changed_hosts or len(hosts)]
        reports = {
            'first': lambda: {h: full_report(before[h]) for h in hosts},
            'unchanged': lambda: {h: unchanged_report(before[h])
                                  for h in hosts},
            'changed': lambda: {h: changed_report(before[h], after[h])
                                for h in changed},
            'unchanged_after_change': lambda: {
                h: unchanged_report(after[h] if h in changed else
                                    before[h]) for h in hosts},
        }
        return [bench.phase(name, reports[name]())
                for name in PHASES if name in args.phases]
    finally:
        server.stop()
        server.wait()
        rpc.cleanup()
        db_api.context_manager.dispose_pool()


PHASES = ('first', 'unchanged', 'changed', 'unchanged_after_change')
WARM_UP = 'bench-warm-up'



def medians(runs):
    """{phase: {metric: median over the runs}}."""
    found = {}
    for phases in runs:
        for result in phases:
            for key, value in result.items():
                if isinstance(value, (int, float)) and key != 'reports':
                    found.setdefault(result['phase'], {}).setdefault(
                        key, []).append(value)
    return {phase: {key: statistics.median(values)
                    for key, values in metrics.items()}
            for phase, metrics in found.items()}


def targets(median, hosts, devices):
    """Issue #12's targets, checked on the medians."""
    met = {}
    first = median.get('first')
    if first:
        per_1000 = first['wall_s'] * 1000 / hosts
        met['first_wall_s_for_1000_hosts'] = {
            'value': round(per_1000, 1), 'target': '< 60',
            'met': per_1000 < 60,
            'extrapolated': hosts != 1000}
        met['first_conductor_cpu_s'] = {
            'value': first['conductor_cpu_s_per_report'],
            'target': '<= 0.020',
            'met': first['conductor_cpu_s_per_report'] <= 0.020}
        calls = first['placement_calls_per_report']
        met['first_placement_calls'] = {
            'value': calls, 'target': f'<= 2 x {devices} devices + 3',
            'met': calls <= 2 * devices + 3}
    unchanged = median.get('unchanged')
    if unchanged:
        met['unchanged_conductor_cpu_s'] = {
            'value': unchanged['conductor_cpu_s_per_report'],
            'target': '<= 0.00094',
            'met': unchanged['conductor_cpu_s_per_report'] <= 0.00094}
        met['unchanged_statements'] = {
            'value': unchanged['db_statements_per_report'],
            'target': '<= 1',
            'met': unchanged['db_statements_per_report'] <= 1}
        met['unchanged_placement_calls'] = {
            'value': unchanged['placement_calls_per_report'],
            'target': '0',
            'met': unchanged['placement_calls_per_report'] == 0}
    return met


def _run_apart(argv):
    argv = list(sys.argv[1:] if argv is None else argv) + ['--runs', '1']
    out = subprocess.run([sys.executable, os.path.abspath(__file__)] + argv,
                         check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)['runs'][0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--devices', type=int, default=8)
    parser.add_argument('--db', choices=('mysql', 'postgresql'),
                        default='mysql')
    parser.add_argument('--workers', type=int, default=8,
                        help='conductor RPC worker threads')
    parser.add_argument('--senders', type=int, default=16,
                        help='simulated agents reporting at once')
    parser.add_argument('--changed-hosts', type=int, default=0,
                        help='hosts sending a changed report (0: all)')
    parser.add_argument('--phases', default=','.join(PHASES),
                        type=lambda v: v.split(','),
                        help='comma-separated phases to run, in order '
                             f'(of {", ".join(PHASES)})')
    parser.add_argument('--placement-workers', type=int, default=1,
                        help='Placement processes serving one port, as a '
                             "deployment's API workers do")
    parser.add_argument('--runs', type=int, default=1,
                        help='times to run it all, each on fresh databases')
    args = parser.parse_args(argv)
    unknown = set(args.phases) - set(PHASES)
    if unknown:
        parser.error(f'unknown phase(s): {", ".join(sorted(unknown))}')
    load_before = os.getloadavg()
    if args.runs == 1:
        runs = [run(args)]
    else:
        # Each run in a process of its own: the engine facade, the RPC
        # transport and the configuration are process globals.
        runs = [_run_apart(argv) for _ in range(args.runs)]
    median = medians(runs)
    print(json.dumps({
        'hosts': args.hosts, 'devices_per_host': args.devices,
        'db': args.db, 'conductor_workers': args.workers,
        'senders': args.senders, 'cpus': os.cpu_count(),
        'placement_workers': args.placement_workers,
        'load_average_before': [round(v, 2) for v in load_before],
        'load_average_after': [round(v, 2) for v in os.getloadavg()],
        'runs': runs, 'median': median,
        'targets': targets(median, args.hosts, args.devices)}, indent=1))


if __name__ == '__main__':
    main()
