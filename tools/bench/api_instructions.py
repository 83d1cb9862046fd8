"""Instructions the API runs per request, counted by callgrind.

On a shared machine the API's CPU time per request moves by a third from
one minute to the next, more than most changes to the code; the number of
instructions it runs moves far less (valgrind's callgrind counts them:
the same code, data and input give counts within about 4 % of each
other from one run to the next, whatever else the machine does; name
each tree several times, alternating, and compare medians).  This
counts them per request for the API's hot routes, in one or more
checkouts, so a change to the request path can be compared with the code
before it on any machine, however busy.

Each route runs in a child process under ``valgrind --tool=callgrind
--instr-atstart=no``: the whole WSGI application in process (middleware,
routing, policy, validation, the handler and the view; noauth), the
conductor's RPC server in the same process on oslo.messaging's
``fake://`` transport, and a fresh database (``--db``) with 20 devices of
the fake kind and one device profile.  After a warm-up the child turns
counting on, runs ``--requests`` requests, has callgrind dump (and zero)
its counters, runs twice as many, and dumps again; the difference of the
two dumps divided by the difference of the requests is what one request
costs, and what asking callgrind costs cancels out.

Counted, in ``per_request``: the main thread, which makes the requests
and serves them: cyborg's Python, the libraries it calls and the
database driver on the client side; for ``arq_create_delete``, the API's
side (the conductor answers its two RPC calls in threads of its own).
``all_threads`` adds every other thread of the process: the conductor's
work for ``arq_create_delete``, but also the in-memory transport's
listener, which looks for messages every 50 ms whether or not there are
any, so it grows with how long the run takes: compare ``per_request``.
For a GET the conductor is stopped after the warm-up (a read never
calls it), so the two are the same.  Not counted: the database server,
RabbitMQ and gunicorn (other processes), nor waiting.  It is a measure of
work, not of latency: a change that saves a round trip to the database
shows only as the driver's instructions it saves.

Usage (from the repository root; needs valgrind, and MariaDB or
PostgreSQL unless ``--db sqlite``)::

    .venv/bin/python tools/bench/api_instructions.py
    # the code before a change, in a worktree, against this one:
    git worktree add /tmp/before HEAD~1
    .venv/bin/python tools/bench/api_instructions.py --tree /tmp/before \\
        --tree . --route devices --route profile_by_name

It prints one JSON document: per tree and route, the instructions per
request (``per_request``, ``all_threads``), each dump's count
(``dumps``: the main thread's; ``dumps_all_threads``) and the access
log's lines.  A tree named twice is measured twice (the second as
``<tree> (2)``): alternating ``--tree A --tree B --tree A --tree B``
shows how far the counts move.  A benchmark, not a test.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

PROFILE = 'bench'
DEVICES = 20

# name: (method, path), asked at microversion 2.0 as Nova asks;
# ``{device}``, ``{deployable}`` and ``{profile}`` are a seeded device's,
# its deployable's and the profile's uuids.
ROUTES = {
    'profiles': ('GET', '/v2/device_profiles'),
    'profile_by_name': ('GET', '/v2/device_profiles?name=' + PROFILE),
    'profile': ('GET', '/v2/device_profiles/{profile}'),
    'arqs': ('GET', '/v2/accelerator_requests'),
    'devices': ('GET', '/v2/devices'),
    'device': ('GET', '/v2/devices/{device}'),
    'attributes': ('GET', '/v2/attributes'),
    'deployables': ('GET', '/v2/deployables'),
    'deployable': ('GET', '/v2/deployables/{deployable}'),
    # One POST of an ARQ and the DELETE of it: a pair per "request".
    'arq_create_delete': ('POST', '/v2/accelerator_requests'),
}

WARMUP = 30


def _dump_totals(prefix, main_only=False):
    """The ``totals`` of each callgrind dump, by its number N: the sum
    over the threads' files ``prefix``.N-T (``--separate-threads``), or
    thread 1's alone (the main thread) with ``main_only``."""
    found = {}
    for path in glob.glob(prefix + '.*-*'):
        number, thread = path.rsplit('.', 1)[1].split('-', 1)
        if not (number.isdigit() and thread.isdigit()):
            continue
        if main_only and int(thread) != 1:
            continue
        with open(path) as f:
            for line in f:
                if line.startswith(('totals:', 'summary:')):
                    found[int(number)] = (found.get(int(number), 0)
                                          + int(line.split()[1]))
                    break
    return [found[n] for n in sorted(found)]


def per_request(totals, requests):
    """Instructions per request from the two dumps: the second dump ran
    twice the requests of the first, and both paid the same for asking
    callgrind."""
    first, second = totals
    return round((second - first) / requests)


def measure(tree, route, db, requests, python):
    """Run ``route`` of ``tree``'s cyborg under callgrind; returns
    {'per_request', 'dumps', 'all_threads', 'dumps_all_threads',
    'log_lines'}."""
    with tempfile.TemporaryDirectory(prefix='cyborg-callgrind-') as out:
        prefix = os.path.join(out, 'callgrind.out')
        command = ['valgrind', '--tool=callgrind', '--instr-atstart=no',
                   '--separate-threads=yes',
                   f'--callgrind-out-file={prefix}', python,
                   os.path.abspath(__file__), '--child', route,
                   '--tree', tree, '--db', db,
                   '--requests', str(requests),
                   '--log-file', os.path.join(out, 'api.log')]
        # The same hash seed each run: str hashes (and so dict and set
        # work) otherwise differ from one process to the next.
        env = dict(os.environ, PYTHONHASHSEED='0')
        result = subprocess.run(command, capture_output=True, text=True,
                                cwd=tree, env=env)
        if result.returncode != 0:
            sys.exit(f'{route} in {tree} failed:\n{result.stdout}'
                     f'{result.stderr[-4000:]}')
        main = _dump_totals(prefix, main_only=True)
        every = _dump_totals(prefix)
        if len(main) < 2:
            sys.exit(f'{route} in {tree}: callgrind left {len(main)} '
                     f'dumps, not 2:\n{result.stderr[-4000:]}')
        log_lines = _count_lines(os.path.join(out, 'api.log'))
        return {'per_request': per_request(main[:2], requests),
                'dumps': main[:2],
                'all_threads': per_request(every[:2], requests),
                'dumps_all_threads': every[:2],
                'log_lines': log_lines}


def _count_lines(path):
    with open(path) as f:
        return sum(1 for _ in f)


# -- the child, under callgrind ---------------------------------------------

def _callgrind(*args):
    subprocess.run(['callgrind_control', *args, str(os.getpid())],
                   check=True, capture_output=True)


def child(route, tree, db, requests, log_file):
    sys.path.insert(0, os.path.abspath(tree))
    import webob

    from tests.fixtures import api as api_fixture

    method, path = ROUTES[route]
    with api_fixture.api_service({('api', 'validate_responses'): False},
                                 db_kind=db) as service:
        _tune(service.engine)
        _log_to(log_file)
        devices = [api_fixture.seed_device(service.engine,
                                           f'host{i % 4}', f'dev{i}')
                   for i in range(DEVICES)]

        def call(verb, where, body=None, expect=(200,)):
            req = webob.Request.blank(where, method=verb)
            req.headers['OpenStack-API-Version'] = 'accelerator 2.0'
            if body is not None:
                req.body = json.dumps(body).encode()
                req.content_type = 'application/json'
            resp = req.get_response(service.app)
            # Sent as a server sends it: the body read to its end and
            # closed (the access line is written then).
            resp.body
            if resp.status_int not in expect:
                raise SystemExit(f'{verb} {where}: {resp.status}\n'
                                 f'{resp.text}')
            return resp

        call('POST', '/v2/device_profiles',
             [{'name': PROFILE, 'groups': [{'resources:FPGA': '1'}]}],
             expect=(200, 201))
        [profile] = call('GET', ROUTES['profile_by_name'][1]).json[
            'device_profiles']
        path = path.format(device=devices[3]['device_uuid'],
                           deployable=devices[3]['deployable_uuid'],
                           profile=profile['uuid'])
        if method == 'GET':
            def one():
                call('GET', path)
        else:
            def one():
                arqs = call('POST', path, {'device_profile_name': PROFILE},
                            expect=(200, 201)).json['arqs']
                call('DELETE', path + '?arqs=' + ','.join(
                    arq['uuid'] for arq in arqs), expect=(204,))
        for _ in range(WARMUP):
            one()
        server = getattr(service, 'server', None)   # older trees: none
        if method == 'GET' and server is not None:
            # A read never calls the conductor: its RPC server's listener
            # (which wakes every 50 ms, for as long as the run takes) would
            # only take the interpreter from the main thread now and then.
            server.stop()
            server.wait()
        _callgrind('--instr=on')
        _callgrind('--zero')
        for count in (requests, 2 * requests):
            for _ in range(count):
                one()
            _callgrind('--dump')
        _callgrind('--instr=off')


def _log_to(path):
    # Logging as the API's WSGI entry point sets it up (oslo.log, INFO),
    # into a file: every request's access line is formatted and written,
    # as in a deployment.
    from oslo_config import cfg
    from oslo_log import log
    conf = cfg.ConfigOpts()
    log.register_options(conf)
    conf([], project='cyborg', default_config_files=[],
         default_config_dirs=[])
    conf.set_override('log_file', path)
    log.setup(conf, 'cyborg')


def _tune(engine):
    # The pool as the services tune it: the fixture's engine is not made
    # by db_api.configure, and in trees before 2026-11-29 the fixture did
    # not tune it (later ones do: left as it is).
    from sqlalchemy.pool import base as pool_base

    from cyborg.db import api as db_api
    if engine.pool._reset_on_return is not pool_base.reset_none:
        db_api._tune_pool(engine)


def _names(trees):
    """A name per tree for the report: the tree, then ``<tree> (2)`` and
    so on for the times it is named again."""
    names, seen = [], {}
    for tree in trees:
        seen[tree] = seen.get(tree, 0) + 1
        names.append(tree if seen[tree] == 1 else f'{tree} ({seen[tree]})')
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--tree', action='append',
                        help='a checkout whose cyborg to measure '
                             '(repeatable; default: this one)')
    parser.add_argument('--route', action='append', choices=sorted(ROUTES),
                        help='a route to measure (repeatable; default: '
                             'all)')
    parser.add_argument('--db', default='mysql',
                        choices=('mysql', 'postgresql', 'sqlite'))
    parser.add_argument('--requests', type=int, default=100,
                        help='requests of the first dump (the second '
                             'runs twice as many)')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    parser.add_argument('--log-file', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error('--requests must be at least 1')
    trees = args.tree or [ROOT]
    if args.child:
        return child(args.child, trees[0], args.db, args.requests,
                     args.log_file)
    routes = args.route or list(ROUTES)
    names = _names(trees)
    results = {name: {} for name in names}
    for route in routes:
        for name, tree in zip(names, trees):
            results[name][route] = measure(tree, route, args.db,
                                           args.requests, sys.executable)
    print(json.dumps({'db': args.db, 'requests': args.requests,
                      'devices': DEVICES, 'trees': results}, indent=2))


if __name__ == '__main__':
    sys.exit(main())
