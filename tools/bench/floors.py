"""What the ARQ path's parts cost with nothing of cyborg in them.

The ARQ targets (a lifecycle five times faster than OpenStack Cyborg's, a
create or delete in 4 ms, a GET in 1.5 ms) are measured through the whole
deployment: the benchmark's HTTP client, gunicorn, the API, RabbitMQ and
oslo.messaging, the conductor, the database and Placement.  This measures,
on the same machine and in one run, what the parts that are not cyborg's
code cost alone, so a target can be set against what is reachable:

``http``
    gunicorn with 2 sync workers (the API's deployment) serving a WSGI
    application that answers a fixed JSON document, asked by a
    ``requests`` session as ``arq_workload.py`` asks: GET, and POST with a
    small JSON body.  Every API request pays at least this.
``rpc``
    an oslo.messaging call (threading executor, the rabbit driver, its
    publisher confirms) to a server process that answers at once: empty
    (``bare``) and, ``cyborg``, through cyborg's own client, server,
    serializer and a request context.  Every write pays at least one.
``amqp``
    the same round trip in raw AMQP (py-amqp, publisher confirms): what
    RabbitMQ itself costs, below oslo.messaging.
``placement``
    (with ``--placement URL``) one ``GET /allocations/{consumer}``, what a
    bind asks Placement.

From those it prints ``lifecycle_floor_ms``: four HTTP requests, three
RPC calls and the bind's Placement lookup (the ARQ lifecycle's fixed
parts with no SQL, no policy and no logging at all).  Each figure is the
median of ``--rounds`` rounds of ``--count`` calls; the JSON also holds
the load average before and after.

Usage (from the repository root; needs the local RabbitMQ)::

    .venv/bin/python tools/bench/floors.py
    .venv/bin/python tools/bench/floors.py --placement http://127.0.0.1:8778

A benchmark, not a test.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.fixtures import processes, rabbit  # noqa: E402

APP = textwrap.dedent('''
    BODY = b'{"arqs": []}'

    def application(environ, start_response):
        length = int(environ.get('CONTENT_LENGTH') or 0)
        if length:
            environ['wsgi.input'].read(length)
        start_response('200 OK', [('Content-Type', 'application/json'),
                                  ('Content-Length', str(len(BODY)))])
        return [BODY]
''')

# The RPC server, run as its own process: ``bare`` answers an empty call
# with oslo.messaging's defaults, ``cyborg`` serves through cyborg's own
# server (its serializer, the request context rebuilt).
RPC_SERVER = textwrap.dedent('''
    import sys, time
    sys.path.insert(0, sys.argv[3])
    import oslo_messaging as messaging
    from oslo_config import cfg
    from cyborg.common import rpc

    url, kind = sys.argv[1], sys.argv[2]
    conf = cfg.ConfigOpts()
    conf([], project='floors')
    rpc.set_transport(messaging.get_rpc_transport(conf, url=url))
    rpc.register_messaging_opts(rpc.get_transport(conf).conf)

    class Endpoint:
        target = messaging.Target(version='1.0')

        def echo(self, context, **kwargs):
            return kwargs

    if kind == 'bare':
        server = messaging.get_rpc_server(
            rpc.get_transport(conf),
            messaging.Target(topic='floors_bare', server='floors'),
            [Endpoint()])
    else:
        server = rpc.get_server(conf, 'floors_cyborg', 'floors',
                                [Endpoint()])
    server.start()
    print('ready', flush=True)
    while True:
        time.sleep(60)
''')


def timed(fn, count, warmup=20):
    """Median milliseconds of ``count`` calls of ``fn`` after a warm-up."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


@contextlib.contextmanager
def gunicorn_app(workdir):
    """gunicorn, 2 sync workers, serving ``APP``; yields its URL."""
    with open(os.path.join(workdir, 'floors_app.py'), 'w') as f:
        f.write(APP)
    port = processes.free_port()
    gunicorn = os.path.join(os.path.dirname(sys.executable), 'gunicorn')
    proc = subprocess.Popen(
        [gunicorn, '--workers', '2', '--no-control-socket', '--bind',
         f'127.0.0.1:{port}', '--chdir', workdir, 'floors_app:application'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    url = f'http://127.0.0.1:{port}'
    try:
        processes.wait_for(lambda: _answers(url), timeout=30,
                           what='gunicorn')
        yield url
    finally:
        processes.kill_group(proc)


def _answers(url):
    try:
        return requests.get(url, timeout=1).ok
    except requests.RequestException:
        return False


def measure_http(url, count):
    session = requests.Session()
    headers = {'Accept': 'application/json', 'X-Auth-Token': 'admin'}
    body = {'device_profile_name': 'bench'}

    def get():
        session.get(url + '/v2/accelerator_requests', headers=headers,
                    timeout=10).raise_for_status()

    def post():
        session.post(url + '/v2/accelerator_requests', headers=headers,
                     json=body, timeout=10).raise_for_status()
    return {'get_ms': timed(get, count), 'post_ms': timed(post, count)}


@contextlib.contextmanager
def rpc_server(url, kind):
    proc = subprocess.Popen(
        [sys.executable, '-c', RPC_SERVER, url, kind, ROOT],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True)
    try:
        if proc.stdout.readline().strip() != 'ready':
            raise RuntimeError(f'the {kind} RPC server did not start')
        yield
    finally:
        processes.kill_group(proc)


def measure_rpc(url, count):
    import oslo_messaging as messaging
    from oslo_config import cfg

    from cyborg.common import context
    from cyborg.common import rpc

    conf = cfg.ConfigOpts()
    conf([], project='floors')
    rpc.set_transport(messaging.get_rpc_transport(conf, url=url))
    rpc.register_messaging_opts(rpc.get_transport(conf).conf)
    bare = messaging.get_rpc_client(
        rpc.get_transport(conf),
        messaging.Target(topic='floors_bare', server='floors',
                         version='1.0'))
    ours = rpc.get_client(conf, 'floors_cyborg', '1.0', server='floors')
    ctxt = context.RequestContext(
        user_id=uuid.uuid4().hex, project_id=uuid.uuid4().hex,
        roles=['member', 'reader'], request_id='req-' + str(uuid.uuid4()))
    # What a create sends and gets back, in size and shape.
    arq = {'uuid': str(uuid.uuid4()), 'state': 'Initial',
           'device_profile_name': 'bench', 'device_profile_group_id': 0,
           'project_id': ctxt.project_id, 'hostname': None,
           'device_rp_uuid': None, 'instance_uuid': None,
           'attach_handle_type': None, 'attach_handle_uuid': None,
           'attach_handle_info': None, 'created_at': '2026-01-01T00:00:00',
           'updated_at': None}
    try:
        with rpc_server(url, 'bare'), rpc_server(url, 'cyborg'):
            return {
                'bare_ms': timed(lambda: bare.call({}, 'echo'), count),
                'cyborg_ms': timed(
                    lambda: ours.call(ctxt, 'echo', arqs=[arq]), count),
            }
    finally:
        rpc.cleanup()


def measure_amqp(count):
    import amqp

    def connect():
        conn = amqp.Connection(
            f'{rabbit.RABBIT_HOST}:{rabbit.RABBIT_PORT}',
            userid=rabbit.RABBIT_USER, password=rabbit.RABBIT_PASSWORD,
            confirm_publish=True)
        conn.connect()
        return conn, conn.channel()

    queue = 'floors_' + uuid.uuid4().hex
    replies = queue + '_replies'
    server, server_channel = connect()
    client, client_channel = connect()
    server_channel.queue_declare(queue, auto_delete=True)
    client_channel.queue_declare(replies, auto_delete=True, exclusive=True)
    got = []

    def answer(message):
        server_channel.basic_publish(amqp.Message(message.body),
                                     exchange='', routing_key=replies)
        server_channel.basic_ack(message.delivery_tag)
    server_channel.basic_consume(queue, callback=answer)
    client_channel.basic_consume(replies, callback=got.append, no_ack=True)

    def call():
        client_channel.basic_publish(amqp.Message(b'{}'), exchange='',
                                     routing_key=queue)
        server.drain_events(timeout=5)
        while not got:
            client.drain_events(timeout=5)
        got.clear()
    try:
        return {'round_trip_ms': timed(call, count)}
    finally:
        client.close()
        server.close()


def measure_placement(url, count):
    session = requests.Session()
    headers = {'X-Auth-Token': 'admin', 'Accept': 'application/json',
               'OpenStack-API-Version': 'placement 1.28'}
    consumer = str(uuid.uuid4())

    def lookup():
        session.get(f'{url}/allocations/{consumer}', headers=headers,
                    timeout=10).raise_for_status()
    return {'allocations_get_ms': timed(lookup, count)}


def median_of(rounds):
    """{part: {figure: median}} of rounds made by ``one_round``."""
    return {part: {name: round(statistics.median(
        round_[part][name] for round_ in rounds), 3) for name in values}
        for part, values in rounds[0].items()}


def lifecycle_floor(medians):
    """The ARQ lifecycle's fixed parts, in ms: four HTTP requests, three
    RPC calls and, when timed, the bind's Placement lookup."""
    return round(4 * medians['http']['get_ms'] + 3 * medians['rpc']['bare_ms']
                 + medians.get('placement', {}).get('allocations_get_ms', 0),
                 2)


def one_round(args, workdir, url):
    result = {}
    with gunicorn_app(workdir) as app_url:
        result['http'] = measure_http(app_url, args.count)
    result['rpc'] = measure_rpc(url, args.count)
    result['amqp'] = measure_amqp(args.count)
    if args.placement:
        result['placement'] = measure_placement(args.placement, args.count)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=500,
                        help='calls of each kind per round')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--placement', default=None,
                        help='a Placement endpoint (noauth2) to time')
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    rounds = []
    with tempfile.TemporaryDirectory() as workdir, \
            rabbit.throwaway_vhost() as url:
        for _ in range(args.rounds):
            rounds.append(one_round(args, workdir, url))
    medians = median_of(rounds)
    print(json.dumps({
        'cpus': os.cpu_count(),
        'count': args.count,
        'rounds': rounds,
        'median': medians,
        'lifecycle_floor_ms': lifecycle_floor(medians),
        'lifecycle_floor_includes_placement': bool(args.placement),
        'load_average_before': [round(x, 2) for x in load_before],
        'load_average_after': [round(x, 2) for x in os.getloadavg()],
    }, indent=1))
    # oslo.messaging's threads would keep the process alive.
    sys.stdout.flush()
    os._exit(0)


if __name__ == '__main__':
    main()
