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
``database``
    (``--database``, MariaDB unless ``none``) on a throwaway database of
    the local server, through the driver cyborg is deployed with and no
    ORM: ``commit_ms``, one row inserted and committed (every write
    commits once, and the server's commit waits for its log to reach the
    disk), and ``read_ms``, one row read by its key and the transaction
    rolled back (what a GET reads, at least).
``placement``
    (with ``--placement URL``) one ``GET /allocations/{consumer}``, what a
    bind asks Placement.

From those it prints ``lifecycle_floor_ms``: four HTTP requests, three
RPC calls and, when timed, three commits, the poll's read and the bind's
Placement lookup (the ARQ lifecycle's fixed parts with no policy, no
logging and no statement beyond those).  ``target_floors_ms`` does the
same for each step the absolute targets name (``TARGET_FLOORS``): a
target below its floor cannot be met on that machine by any code.  Each
figure is the median of ``--rounds`` rounds of ``--count`` calls; the
JSON also holds the load average before and after.

Usage (from the repository root; needs the local RabbitMQ and MariaDB)::

    .venv/bin/python tools/bench/floors.py
    .venv/bin/python tools/bench/floors.py --placement http://127.0.0.1:8778

A benchmark, not a test.
"""

import argparse
import contextlib
import itertools
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
import sqlalchemy as sa

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.fixtures import databases, processes, rabbit  # noqa: E402

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


def measure_database(url, count):
    """A write's commit and a read's round trips on database ``url``,
    through its DBAPI driver directly (no ORM, no pool checkout)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as connection:
        # A fresh table each round, on the run's scratch database.
        connection.execute(sa.text('DROP TABLE IF EXISTS floors'))
        connection.execute(sa.text(
            'CREATE TABLE floors (id INTEGER PRIMARY KEY, '
            'uuid VARCHAR(36) NOT NULL)'))
    raw = engine.raw_connection()
    ids = itertools.count(1)
    try:
        cursor = raw.cursor()

        def commit():
            cursor.execute('INSERT INTO floors (id, uuid) VALUES (%s, %s)',
                           (next(ids), str(uuid.uuid4())))
            raw.commit()

        def read():
            cursor.execute('SELECT id, uuid FROM floors WHERE id = %s',
                           (1,))
            cursor.fetchall()
            raw.rollback()
        return {'commit_ms': timed(commit, count),
                'read_ms': timed(read, count)}
    finally:
        raw.close()
        engine.dispose()


def median_of(rounds):
    """{part: {figure: median}} of rounds made by ``one_round``: of the
    parts every round timed (runs pooled may have timed different
    ones)."""
    parts = set.intersection(*(set(round_) for round_ in rounds))
    return {part: {name: round(statistics.median(
        round_[part][name] for round_ in rounds), 3) for name in values}
        for part, values in rounds[0].items() if part in parts}


def _parts(medians):
    """The floors a step is made of, by name, in ms (0 for one not
    timed): ``get``, ``post``, ``rpc``, ``commit``, ``read``,
    ``placement``."""
    database = medians.get('database', {})
    return {'get': medians['http']['get_ms'],
            'post': medians['http']['post_ms'],
            'rpc': medians['rpc']['bare_ms'],
            'commit': database.get('commit_ms', 0),
            'read': database.get('read_ms', 0),
            'placement': medians.get('placement', {}).get(
                'allocations_get_ms', 0)}


# The fixed parts of each step an absolute ARQ target names, as counts
# of ``_parts``: a create is a POST, a call to the conductor and its
# commit; a delete the same with a body-less request; a bind until it is
# seen Bound is the PATCH, its call, its Placement lookup and its commit,
# then the GET that reads it back; a GET is a request and a read.
TARGET_FLOORS = {
    'create': {'post': 1, 'rpc': 1, 'commit': 1},
    'delete': {'get': 1, 'rpc': 1, 'commit': 1},
    'bound': {'post': 1, 'rpc': 1, 'commit': 1, 'placement': 1, 'get': 1,
              'read': 1},
    'get': {'get': 1, 'read': 1},
}
# The lifecycle: create, bind, the poll, delete.
LIFECYCLE_FLOOR = {'get': 4, 'rpc': 3, 'commit': 3, 'read': 1,
                   'placement': 1}


def _sum_of(parts, counts):
    return round(sum(parts[name] * times for name, times in counts.items()),
                 2)


def lifecycle_floor(medians):
    """The ARQ lifecycle's fixed parts, in ms: four HTTP requests, three
    RPC calls and, when timed, three commits, the poll's read and the
    bind's Placement lookup."""
    return _sum_of(_parts(medians), LIFECYCLE_FLOOR)


def target_floors(medians):
    """{step: ms} of ``TARGET_FLOORS`` from the timed floors."""
    parts = _parts(medians)
    return {step: _sum_of(parts, counts)
            for step, counts in TARGET_FLOORS.items()}


def one_round(args, workdir, url, database_url=None):
    result = {}
    with gunicorn_app(workdir) as app_url:
        result['http'] = measure_http(app_url, args.count)
    result['rpc'] = measure_rpc(url, args.count)
    result['amqp'] = measure_amqp(args.count)
    if database_url is not None:
        result['database'] = measure_database(database_url, args.count)
    if args.placement:
        result['placement'] = measure_placement(args.placement, args.count)
    return result


@contextlib.contextmanager
def scratch_database(kind):
    """A throwaway database of ``kind`` on the local server for the
    run's rounds (None for ``none``)."""
    if kind == 'none':
        yield None
        return
    with databases.throwaway_database(kind) as url:
        yield url


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=500,
                        help='calls of each kind per round')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--placement', default=None,
                        help='a Placement endpoint (noauth2) to time')
    parser.add_argument('--database', default='mysql',
                        choices=('mysql', 'postgresql', 'none'),
                        help='the local server whose commit and read to '
                             'time (default mysql: MariaDB)')
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    rounds = []
    with tempfile.TemporaryDirectory() as workdir, \
            rabbit.throwaway_vhost() as url, \
            scratch_database(args.database) as database_url:
        for _ in range(args.rounds):
            rounds.append(one_round(args, workdir, url, database_url))
    medians = median_of(rounds)
    print(json.dumps({
        'cpus': os.cpu_count(),
        'count': args.count,
        'rounds': rounds,
        'median': medians,
        'lifecycle_floor_ms': lifecycle_floor(medians),
        'lifecycle_floor_includes_placement': bool(args.placement),
        'lifecycle_floor_includes_database': args.database != 'none',
        'target_floors_ms': target_floors(medians),
        'load_average_before': [round(x, 2) for x in load_before],
        'load_average_after': [round(x, 2) for x in os.getloadavg()],
    }, indent=1))
    # oslo.messaging's threads would keep the process alive.
    sys.stdout.flush()
    os._exit(0)


if __name__ == '__main__':
    main()
