"""WSGI entry point for uWSGI, mod_wsgi or gunicorn, and the
``cyborg-wsgi-api`` test server.

A WSGI server loads ``cyborg.wsgi.api:application``, which is built on its
first request from ``/etc/cyborg/cyborg.conf`` (and
``/etc/cyborg/cyborg.conf.d``) or from the files named in
``OS_CYBORG_CONFIG`` (comma separated).  The server's own command line is
never parsed as ours.

``cyborg-wsgi-api [--host IP] [--port N] -- [--config-file F ...]`` serves
the same application for a quick try; what follows ``--`` is cyborg's own
command line.  Production uses ``cyborg-api`` or a real WSGI server.
"""

import argparse
import sys
import threading

from oslo_log import log

import cyborg.conf
from cyborg import version
from cyborg.api import app as api_app
from cyborg.api import auth
from cyborg.common import quota
from cyborg.common import serving
from cyborg.db import api as db_api

LOG = log.getLogger(__name__)

_LOCK = threading.Lock()
_APPLICATION = None


def init_application(argv=None):
    """Parse config, set up logging and the database; return the app.

    ``argv`` is cyborg's command line (``--config-file`` ...); None means
    none, so a WSGI server's own arguments are never mistaken for ours.
    """
    conf = cyborg.conf.CONF
    log.register_options(conf)
    cyborg.conf.parse_args(conf, [] if argv is None else list(argv),
                           prog='cyborg-wsgi-api')
    log.setup(conf, 'cyborg')
    problem = (auth.keystone_config_problem(conf)
               or quota.config_problem(conf))
    if problem:
        # A WSGI server shows this (and refuses to load the app).
        raise RuntimeError('cyborg-wsgi-api: configuration error: '
                           + problem)
    LOG.info('cyborg-wsgi-api %s loaded its configuration from %s',
             version.version_string(),
             ', '.join(conf.config_file) or 'no file')
    db_api.configure(conf, wait_for_database=False)
    return api_app.build_app(conf)


def _get():
    global _APPLICATION
    with _LOCK:
        if _APPLICATION is None:
            _APPLICATION = init_application()
        return _APPLICATION


def application(environ, start_response):
    """The WSGI callable; builds the real app on its first request."""
    return _get()(environ, start_response)


def _parser():
    parser = argparse.ArgumentParser(
        prog='cyborg-wsgi-api',
        description='Serve the cyborg API for a quick try (production: '
                    'cyborg-api, or cyborg.wsgi.api:application under a '
                    'WSGI server).',
        usage='%(prog)s [-h] [--version] [--host IP] [--port PORT] '
              '-- [cyborg options, e.g. --config-file F]')
    parser.add_argument('--version', action='version',
                        version=version.version_string())
    parser.add_argument('--host', '-b', default='127.0.0.1',
                        help='address to listen on (default %(default)s)')
    parser.add_argument('--port', '-p', type=int, default=8000,
                        help='TCP port to listen on (default %(default)s)')
    parser.add_argument('args', nargs=argparse.REMAINDER,
                        metavar='-- [cyborg options]',
                        help='everything after "--" is cyborg\'s command '
                             'line: --config-file, --config-dir, ...')
    return parser


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    passed = list(args.args)
    if passed and passed[0] == '--':
        passed.pop(0)
    elif passed:
        parser.error('unrecognized arguments: %s (cyborg options go after '
                     '"--")' % ' '.join(passed))
    app = init_application(passed)
    try:
        server = serving.Server((args.host, args.port), app,
                                server_name='cyborg-wsgi-api')
        server.prepare()
    except OSError as exc:
        sys.exit('cyborg-wsgi-api cannot listen on %s:%d: %s (choose '
                 'another with --port)' % (args.host, args.port, exc))
    host, port = server.bind_addr[:2]
    LOG.info('cyborg-wsgi-api serving on http://%s:%d', host, port)
    print('cyborg-wsgi-api serving on http://%s:%d' % (host, port),
          flush=True)
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
