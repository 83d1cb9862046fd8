"""cyborg-aio: the whole service in one process, for trying it out.

    cyborg-aio [--port 6666] [--state-dir ~/.local/state/cyborg]

API, conductor and agent share oslo.messaging's in-process ``fake://``
transport; the database is SQLite in the state directory unless
``[database]connection`` in a ``--config-file`` names another (MariaDB,
PostgreSQL: an empty database, or one this all-in-one used before; the
migrations make or upgrade its schema); authentication is off (noauth);
the agent runs the fake driver plus every other installed driver (those
without hardware here report nothing); the real OpenStack Placement runs
in-process on a free local port with its own SQLite database, holding a
compute-node provider for this host.  With notifications on, they go to
``[oslo_messaging_notifications]transport_url``, else to ``[DEFAULT]
transport_url`` (which RPC does not use here): a notification driver or
that URL that cannot work stops it at start, as it does the other
services.  Ctrl-C or SIGTERM stops everything.
Extra options may come from ``--config-file``; the settings above (but
the database) win over them.
"""

import errno
import fcntl
import importlib.metadata
import os
import shutil
import sys
import uuid

from oslo_config import cfg
from oslo_log import log as logging
import oslo_messaging as messaging
import requests
import sqlalchemy.engine

import cyborg.conf
from cyborg import version
from cyborg.api import app as api_app
from cyborg.cmd import agent as agent_cmd
from cyborg.cmd import api as api_cmd
from cyborg.cmd import conductor as conductor_cmd
from cyborg.common import policy
from cyborg.common import quota
from cyborg.common import rpc
from cyborg.common import service
from cyborg.db import migration
from cyborg.drivers import fake
from cyborg.drivers import loader
from cyborg.placement import embedded

LOG = logging.getLogger(__name__)

PROG = 'cyborg-aio'
DEFAULT_STATE_DIR = os.path.join('~', '.local', 'state', 'cyborg')
# Held (flock) by the cyborg-aio using a state directory, with its pid.
LOCK_FILE = 'cyborg-aio.lock'
_HELD_LOCKS = []

cli_opts = [
    cfg.PortOpt('port', default=6666,
                help='Port of the API on 127.0.0.1.'),
    cfg.StrOpt('state-dir', default=DEFAULT_STATE_DIR,
               help='Directory for the databases, the agent cache and the '
                    'log file.'),
]


def parse(argv):
    conf = cyborg.conf.CONF
    conf.register_cli_opts(cli_opts)
    logging.register_options(conf)
    try:
        service.check_all_values(argv, [], [], extra_opts=cli_opts)
        # --port and --state-dir: their values on the command line are
        # checked only here.
        with service.command_line_values_checked():
            conf(argv, project='cyborg', prog=PROG,
                 version=version.version_string(),
                 default_config_files=[], default_config_dirs=[])
        cyborg.conf.check_values(conf)
        service.check_registered_values(conf)
    except cfg.Error as exc:
        service.config_error(PROG, exc)
    # Its RPC stays in the process (fake://, whatever [DEFAULT]
    # transport_url says): only what notifications use is checked, as
    # the other services check it.
    problem = (quota.config_problem(conf) or policy.config_problem(conf)
               or service.notifications_problem(conf))
    if problem:
        service.config_error(PROG, problem)
    state_dir = os.path.abspath(os.path.expanduser(conf.state_dir))
    try:
        os.makedirs(state_dir, exist_ok=True)
        lock_state_dir(state_dir)
    except OSError as exc:
        # A file there, a path under /proc, a read-only directory.
        why = exc.strerror or str(exc)
        if os.path.exists(state_dir) and not os.path.isdir(state_dir):
            why = 'not a directory'
        sys.exit('cyborg-aio cannot start: the state directory %s is not '
                 'usable (%s); give another with --state-dir'
                 % (state_dir, why))
    # A default, so --log-file (or use_stderr in a config file) still wins.
    conf.set_default('log_file', os.path.join(state_dir, 'cyborg-aio.log'))
    logging.setup(conf, 'cyborg')
    return conf, state_dir


def lock_state_dir(state_dir):
    """Take the state directory for this process (until it exits), or
    exit saying which process has it: two all-in-ones on one set of
    databases would each recover the other's binds as their own."""
    path = os.path.join(state_dir, LOCK_FILE)
    lock = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(lock, 32).decode(errors='replace').strip()
        os.close(lock)
        sys.exit('cyborg-aio cannot start: another cyborg-aio%s is using '
                 '%s; stop it, or give this one another --state-dir'
                 % (f' (pid {holder})' if holder else '', state_dir))
    os.ftruncate(lock, 0)
    os.write(lock, b'%d\n' % os.getpid())
    # Kept open (and so locked) for the life of the process.
    _HELD_LOCKS.append(lock)
    return lock


def configure(conf, state_dir, placement_url):
    """Settings of the all-in-one (they win over any config file).

    ``[database]connection`` is not one of them: its default, SQLite in
    ``$state_path``, follows ``state_path`` into the state directory, and
    a config file may name another database.
    """
    host = conf.host
    overrides = {
        None: {'state_path': state_dir},
        'api': {'host_ip': '127.0.0.1', 'port': conf.port,
                'auth_strategy': 'noauth', 'api_workers': 1},
        'agent': {'enabled_drivers': installed_drivers(),
                  'resource_provider_name': host},
        'placement': {'auth_type': 'none',
                      'endpoint_override': placement_url},
        'nova': {'send_events': False},
    }
    for group, options in overrides.items():
        for name, value in options.items():
            conf.set_override(name, value, group=group)


def _sqlite(state_dir, name):
    return 'sqlite:///' + os.path.join(state_dir, name)


def database_shown(url):
    """``url`` with its password hidden, for the banner."""
    return sqlalchemy.engine.make_url(url).render_as_string(
        hide_password=True)


def installed_drivers():
    """The fake driver and every installed driver that loads here."""
    names = ['fake_driver']
    for entry_point in importlib.metadata.entry_points(
            group=loader.NAMESPACE):
        if entry_point.name in names:
            continue
        try:
            entry_point.load()
        except Exception as exc:
            LOG.warning('Driver %s is not usable here: %s', entry_point.name,
                        exc)
            continue
        names.append(entry_point.name)
    return names


def ensure_compute_node(placement_url, name):
    """Create the compute-node provider ``name`` unless it exists.

    Nova's compute service creates it in a real cloud; here nothing else
    would.  Returns its uuid.
    """
    session = requests.Session()
    session.headers.update({'X-Auth-Token': embedded.NOAUTH_TOKEN,
                            'OpenStack-API-Version': 'placement 1.20'})
    url = placement_url.rstrip('/') + '/resource_providers'
    found = session.get(url, params={'name': name}, timeout=30)
    found.raise_for_status()
    providers = found.json()['resource_providers']
    if providers:
        return providers[0]['uuid']
    created = session.post(url, json={'name': name,
                                      'uuid': str(uuid.uuid4())},
                           timeout=30)
    created.raise_for_status()
    LOG.info('Created compute node provider %s in Placement', name)
    return created.json()['uuid']


class _PlacementService:
    """Stops the embedded Placement last (it starts before the others)."""

    def __init__(self, placement):
        self._placement = placement

    def start(self):
        pass

    def stop(self):
        self._placement.stop()

    def __str__(self):
        return 'embedded Placement'


def build_services(conf, state_dir):
    # The port first: when it is taken, say so before anything else.
    sock = listen_or_exit(conf.port)
    placement = embedded.EmbeddedPlacement(
        _sqlite(state_dir, 'placement.sqlite'))
    try:
        placement_url = placement.start()
    except ImportError as exc:
        sys.exit('cyborg-aio needs the real Placement (%s): install cyborg '
                 'with its "aio" extra, e.g. pip install -e ".[aio]", or '
                 'run tools/run-aio.sh' % exc)
    try:
        configure(conf, state_dir, placement_url)
        # Everyone in this process shares one in-memory transport.
        rpc.set_transport(messaging.get_rpc_transport(conf, url='fake://'))
        migration.upgrade(conf)
        ensure_compute_node(placement_url, conf.host)
        # The conductor also serves this process's one metrics registry,
        # every family (with [metrics]enabled), on [metrics]conductor_port.
        conductor = conductor_cmd.build_services(conf, metrics_of=None)
        agent_rpc, *agent_workers = agent_cmd.build_services(conf)
        app = api_app.build_app(conf, metrics_of=None)
        # Start order; the stop goes backwards, each service once those
        # after it drained.  The agent's RPC server (and Placement) before
        # the conductor, whose background binds call it until they end;
        # the agent's reporter and monitors after the conductor's RPC
        # server, which they report to.
        services = [_PlacementService(placement), agent_rpc, *conductor,
                    *agent_workers,
                    api_cmd.APIServer(conf, app, sock, name='cyborg-aio')]
    except BaseException:
        placement.stop()
        raise
    return services, api_cmd.url_of(sock), placement_url


def listen_or_exit(port):
    """The API's socket on 127.0.0.1:``port``, or exit with a hint."""
    try:
        return api_cmd.listen('127.0.0.1', port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            sys.exit('cyborg-aio cannot start: port %d on 127.0.0.1 is '
                     'taken (another cyborg-aio?); choose another with '
                     '--port, e.g. --port %d' % (port, port + 1))
        sys.exit('cyborg-aio cannot listen on 127.0.0.1:%d: %s'
                 % (port, exc))


def openstack_command():
    """``openstack``, or its full path when the one installed beside
    cyborg (the "aio" extra) is not what the shell would find."""
    beside = os.path.join(os.path.dirname(sys.executable), 'openstack')
    if os.path.exists(beside) and shutil.which('openstack') != beside:
        return beside
    return 'openstack'


def banner(api_url, placement_url, state_dir, database=None):
    return '\n'.join([
        'cyborg-aio is running (cyborg %s; Ctrl-C stops it).'
        % version.version_string(),
        '  API:       %s' % api_url,
        '  Placement: %s' % placement_url,
        '  State:     %s (log: cyborg-aio.log)' % state_dir,
        *(['  Database:  %s' % database] if database else []),
        'Try:',
        '  %s accelerator device list --os-auth-type none '
        '--os-endpoint %s/v2' % (openstack_command(), api_url),
        # The agent watches the fake device's health: this breaks it
        # (removing the file heals it), see cyborg.drivers.fake.
        '  echo \'{"severity": "fatal", "reason": "try"}\' > %s'
        % os.path.join(state_dir, fake.HEALTH_FILE),
        '',
    ])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    conf, state_dir = parse(argv)
    try:
        services, api_url, placement_url = build_services(conf, state_dir)
    except OSError as exc:
        sys.exit('cyborg-aio cannot start: %s' % exc)
    api_cmd.warn_if_shutdown_short(conf)
    launcher = service.Launcher(conf, PROG, serves_api=True)
    for item in services:
        launcher.add(item)
    launcher.install_signal_handlers()
    print(banner(api_url, placement_url, state_dir,
                 database_shown(conf.database.connection)), flush=True)
    service.exit_process(launcher.run())


if __name__ == '__main__':
    main()
