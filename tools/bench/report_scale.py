"""How much one conductor pays for inventory reports, at scale.

N simulated hosts with M devices each report through RabbitMQ (a fresh
vhost) into one conductor running in this process (the real RPC server on
the threading executor, the real report handling), on MariaDB or
PostgreSQL, against the real Placement served as a separate process.  The
simulated agents are RPC clients on threads of this process.

Phases: ``first`` (each host's first, full report: rows and providers
made), ``unchanged`` (the periodic report of a host with no change),
``changed`` (a delta with one device changed).  For each it prints:

- reports_per_s: reports answered per second of wall time;
- conductor_cpu_s_per_report: CPU seconds of the conductor threads that
  handled the reports (``time.thread_time`` around each handling), and
  process_cpu_s_per_report: this whole process (conductor, simulated
  agents and messaging) from ``resource.getrusage``;
- db_statements_per_report: SQL statements sent (an engine event listener);
- placement_calls_per_report: HTTP calls to Placement.

Usage (from the repository root; needs the local RabbitMQ and database)::

    .venv/bin/python tools/bench/report_scale.py --hosts 1000 --devices 8

Prints one JSON document.  A benchmark, not a test.
"""

import argparse
import concurrent.futures
import json
import os
import resource
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
from tests.fixtures import databases, rabbit
from tests.fixtures import placement as placement_fixture


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


class Bench:
    def __init__(self, conf, manager, engine, senders):
        self.conf = conf
        self.manager = manager
        self.statements = 0
        self.senders = senders
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
        process_cpu = (after.ru_utime + after.ru_stime - usage.ru_utime -
                       usage.ru_stime)
        return {'phase': name, 'reports': n, 'wall_s': round(wall, 3),
                'reports_per_s': round(n / wall, 1),
                'conductor_cpu_s_per_report': round(
                    (self.manager.cpu - cpu) / n, 5),
                'process_cpu_s_per_report': round(process_cpu / n, 5),
                'db_statements_per_report': round(
                    (self.statements - statements) / n, 2),
                'placement_calls_per_report': round(
                    (client.calls - calls) / n, 2)}


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
    hosts = [f'bench-{i:05d}' for i in range(args.hosts)]
    with databases.throwaway_database(args.db) as db_url, \
            databases.throwaway_database(args.db) as placement_db, \
            rabbit.throwaway_vhost() as transport_url, \
            placement_fixture.PlacementProcess(placement_db) as url:
        databases.create_schema(db_url)
        make_compute_nodes(url, hosts)
        conf = make_conf(db_url, transport_url, url, args.workers)
        db_api.configure(conf)
        rpc.get_transport(conf)
        manager = MeasuredManager(conf, 'bench-conductor')
        server = rpc.get_server(conf, conductor_rpcapi.TOPIC,
                                'bench-conductor', [manager])
        server.start()
        try:
            bench = Bench(conf, manager, db_api.get_engine(), args.senders)
            before = {h: host_devices(h, args.devices) for h in hosts}
            after = {h: host_devices(h, args.devices, 1) for h in hosts}
            changed = hosts[:args.changed_hosts or len(hosts)]
            results = [
                bench.phase('first', {h: full_report(before[h])
                                      for h in hosts}),
                bench.phase('unchanged', {h: unchanged_report(before[h])
                                          for h in hosts}),
                bench.phase('changed', {h: changed_report(before[h],
                                                          after[h])
                                        for h in changed}),
                bench.phase('unchanged_after_change', {
                    h: unchanged_report(after[h] if h in changed else
                                        before[h]) for h in hosts}),
            ]
        finally:
            server.stop()
            server.wait()
            rpc.cleanup()
            db_api.context_manager.dispose_pool()
    return {'hosts': args.hosts, 'devices_per_host': args.devices,
            'db': args.db, 'conductor_workers': args.workers,
            'senders': args.senders, 'cpus': os.cpu_count(),
            'phases': results}


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
    args = parser.parse_args(argv)
    print(json.dumps(run(args), indent=1))


if __name__ == '__main__':
    main()
