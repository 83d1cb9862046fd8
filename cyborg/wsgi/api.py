"""WSGI entry point for uWSGI, mod_wsgi or gunicorn, and the
``cyborg-wsgi-api`` test server.

A WSGI server loads ``cyborg.wsgi.api:application``, which is built on its
first request from ``/etc/cyborg/cyborg.conf`` (and
``/etc/cyborg/cyborg.conf.d``) or from the files named in
``OS_CYBORG_CONFIG`` (comma separated).  The server's own command line is
never parsed as ours.

A configuration that cannot work (a bad value of any option, cyborg's or
a library's; Keystone or quota settings missing what they need) is
found on that first request: it is logged once, in one line
(``cyborg-wsgi-api: configuration error: <what and where>``), and every
request, that one included, is answered 503 saying that the
configuration is wrong and that the server's log says how (not the line
itself: it names files and values, and any client can ask), until the
server is restarted with a configuration fixed.
The app is not built before its first request because a server may load
it in a process it forks its workers from, and neither the database
engine nor the RPC client survive a fork.

``cyborg-wsgi-api [--host IP] [--port N] -- [--config-file F ...]`` serves
the same application for a quick try; what follows ``--`` is cyborg's own
command line.  Production uses ``cyborg-api`` or a real WSGI server.
"""

import argparse
import sys
import threading

from oslo_config import cfg
from oslo_log import log

import cyborg.conf
from cyborg import version
from cyborg.api import app as api_app
from cyborg.api import auth
from cyborg.api import faults
from cyborg.common import policy
from cyborg.common import quota
from cyborg.common import service
from cyborg.common import serving
from cyborg.db import api as db_api

LOG = log.getLogger(__name__)

PROG = 'cyborg-wsgi-api'
# What every request is answered while the configuration cannot work.
UNAVAILABLE = ('%s: configuration error (the server\'s log says which '
               'option); restart the server once it is fixed' % PROG)

# Said when the app is loaded with [api]auth_strategy = noauth.
NOAUTH_WARNING = ('[api]auth_strategy is noauth: anyone who reaches this '
                  'WSGI server is an admin (a request naming no identity '
                  'is the admin, and one naming any is trusted); keep the '
                  'server on a loopback address or a network only you '
                  'reach')

_LOCK = threading.Lock()
_CONF = None
_APPLICATION = None


class ConfigurationError(Exception):
    """The configuration cannot work; the message says why, in one line
    (``cyborg-wsgi-api: configuration error: ...``).  ``logged``: said
    in the log already (else logging may not be set up yet)."""

    def __init__(self, message, logged=False):
        super().__init__(message)
        self.logged = logged


def init_application(argv=None):
    """Parse config, set up logging and the database; return the app.

    ``argv`` is cyborg's command line (``--config-file`` ...); None means
    none, so a WSGI server's own arguments are never mistaken for ours.
    Raises ``ConfigurationError`` when the configuration cannot work.
    """
    return _build(load_configuration(argv))


def _build(conf):
    db_api.configure(conf, wait_for_database=False)
    return api_app.build_app(conf)


def load_configuration(argv=None):
    """Parse and check the configuration and set up logging; return
    ``cyborg.conf.CONF``.  Once only in a process: oslo.config refuses
    the logging options a second time."""
    conf = cyborg.conf.CONF
    log.register_options(conf)
    try:
        service.parse_args(conf, [] if argv is None else list(argv),
                           prog=PROG)
    except cfg.Error as exc:
        raise ConfigurationError(
            service.config_error_line(PROG, exc)) from exc
    log.setup(conf, 'cyborg')
    problem = (auth.keystone_config_problem(conf)
               or quota.config_problem(conf)
               or policy.config_problem(conf)
               # Writes need the conductor: said now, not at each one.
               or service.transport_url_problem(conf))
    if problem:
        line = service.config_error_line(PROG, problem)
        LOG.error('%s', line)
        raise ConfigurationError(line, logged=True)
    LOG.info('%s %s loaded its configuration from %s', PROG,
             version.version_string(),
             ', '.join(conf.config_file) or 'no file')
    if conf.api.auth_strategy == 'noauth':
        # cyborg-api refuses noauth on an address others reach; here the
        # WSGI server binds, and its address is not known.
        LOG.warning(NOAUTH_WARNING)
    return conf


def unavailable(message):
    """A WSGI app answering every request 503 with ``message``."""
    def app(environ, start_response):
        return faults.response(503, message)(environ, start_response)
    return app


def _get():
    global _APPLICATION, _CONF
    with _LOCK:
        if _APPLICATION is not None:
            return _APPLICATION
        if _CONF is None:
            try:
                _CONF = load_configuration()
            except ConfigurationError as exc:
                # Said once, in the log or else on stderr (which a WSGI
                # server logs); each answer says it again.
                if not exc.logged:
                    _to_stderr(exc)
                _APPLICATION = unavailable(UNAVAILABLE)
                return _APPLICATION
        _APPLICATION = _build(_CONF)
        return _APPLICATION


def _to_stderr(line):
    sys.stderr.write('%s\n' % line)
    sys.stderr.flush()


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
    try:
        app = init_application(passed)
    except ConfigurationError as exc:
        if not exc.logged:
            _to_stderr(exc)
        sys.exit(2)
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
