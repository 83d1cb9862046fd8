"""How cyborg processes run: configuration, logging, services, shutdown.

A process is a ``Launcher`` holding a few services (an RPC server, the
periodic jobs, the agent's reporter...).  Each service has ``start()``,
``stop()`` (stop taking new work) and optionally ``wait()`` (block until
in-flight work is done).  Services start on a thread of their own, because
starting may block while a dependency is absent: oslo.messaging retries
the broker connection forever, and a process must never exit at start-up
just because RabbitMQ or the database is not there yet.

Why not oslo.service's launcher: its threading backend runs every service
in a cotyledon worker process under a master process.  The conductor and
the agent need no worker processes, and the extra process doubles their
memory (the agent's budget is 80 MB for all its processes), so they run in
one process with the small launcher below.  cyborg-api forks its own
workers (cyborg.cmd.api).

Shutdown: SIGTERM or SIGINT stops the services in reverse order of start,
each once those started after it have finished their in-flight work (so
a service may rely on those started before it while it drains), in at
most ``shutdown_timeout`` seconds in all (``[DEFAULT]
graceful_shutdown_timeout``; unset, longer for a process serving the
API than the longest a write waits for the conductor); then the process
exits with status 0, without a traceback.  SIGHUP re-reads the mutable
options (``[DEFAULT]debug`` and ``log_config_append``, oslo.log's).

Configuration: every option's value is checked at start
(``check_all_values``), the libraries' included, so that a bad one is
the one line and exit status 2 of ``config_error``, never a traceback
later on; so is a message broker URL that cannot work, or a
notification driver that is not installed (``check_transport_url``).
"""

import contextlib
import copy
import importlib.metadata
import io
import itertools
import logging as std_logging
import os
import re
import signal
import sys
import threading
import time
import urllib.parse

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_log import log as logging
from oslo_log import versionutils

import cyborg.conf
from cyborg import version
from cyborg.common import exception
from cyborg.common import notify
from cyborg.common import rpc
from cyborg.conf import default as default_conf

LOG = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# Seconds a stopping process gives its broker connections to close.
_CLEANUP_TIMEOUT = 0.2
# How often, and how many times, a stopping RPC server is woken up.
_WAKE_EVERY = 0.2
_WAKE_ATTEMPTS = 5


def prepare(argv=None, conf=None, prog=None):
    """Parse the command line and config files and set up logging.

    Returns the ConfigOpts (the global ``cyborg.conf.CONF`` by default).
    """
    conf = conf if conf is not None else cyborg.conf.CONF
    logging.register_options(conf)
    # Before parsing, so a config file's default_log_levels still wins.
    logging.set_defaults(default_log_levels=logging.get_default_log_levels()
                         + ['stevedore=WARN', 'cheroot=WARN'])
    parse_or_exit(conf, argv, prog)
    logging.setup(conf, 'cyborg')
    return conf


def parse_or_exit(conf, argv=None, prog=None):
    """``parse_args``, or exit saying what is wrong with the
    configuration (``config_error``)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        parse_args(conf, argv, prog=prog)
    except cfg.Error as exc:
        config_error(prog, exc)
    return conf


def parse_args(conf, argv, prog=None):
    """``cyborg.conf.parse_args`` once ``check_all_values`` found nothing
    wrong; raises ``cfg.Error`` saying what is."""
    argv = config_options_first(argv)
    check_all_values(argv, cyborg.conf.default_config_files(),
                     cyborg.conf.default_config_dirs())
    with command_line_values_checked():
        cyborg.conf.parse_args(conf, argv, prog=prog)
    with _deprecations_untold(conf):
        check_registered_values(conf)
    return conf


@contextlib.contextmanager
def _deprecations_untold(conf):
    """Reads of ``conf`` that tell no deprecated option name: oslo.config
    says each once per process (and per ConfigOpts), when it is first
    read.  Reading every option to check its value, before logging is set
    up, would use that once up on stderr: the process's log would never
    say it."""
    quiet = std_logging.getLogger('oslo_config.cfg')
    was_disabled, quiet.disabled = quiet.disabled, True
    sent = {message: list(args) for message, args in
            versionutils._deprecated_messages_sent.items()}
    emitted = set(getattr(conf, '_emitted_deprecations', ()))
    try:
        yield
    finally:
        quiet.disabled = was_disabled
        versionutils._deprecated_messages_sent.clear()
        versionutils._deprecated_messages_sent.update(sent)
        if hasattr(conf, '_emitted_deprecations'):
            conf._emitted_deprecations.clear()
            conf._emitted_deprecations.update(emitted)


# The options a cyborg process may read, by their oslo.config.opts entry
# points: cyborg's and its libraries' (the namespaces of
# etc/cyborg/cyborg-config-generator.conf).  A library registers its
# options only where it uses them (a middleware as the API's app is
# built, the broker's driver as it first connects), and oslo.config
# checks a value only as it is read: a bad one crashed the process then,
# or went unnoticed.  And oslo.config ends a process whose config file
# gives a bad value to one of its command-line options ([DEFAULT]debug)
# with status 1 and a line of its own.
OPTION_NAMESPACES = ('cyborg', 'oslo.log', 'oslo.messaging', 'oslo.policy',
                     'oslo.middleware.cors',
                     'oslo.middleware.http_proxy_to_wsgi',
                     'oslo.middleware.healthcheck',
                     'oslo.middleware.sizelimit')
# Arguments that print something and exit: no value is checked for them.
_PRINT_ONLY = ('-h', '--help', '--version')


def check_all_values(argv, default_config_files, default_config_dirs,
                     extra_opts=()):
    """Check the value of every option of ``OPTION_NAMESPACES`` (and of
    ``extra_opts``, in [DEFAULT]) that the configuration files of
    ``argv``'s ``CONFIG_OPTIONS`` (else the defaults) or the environment
    set; raise ``cfg.Error`` for the first bad one.

    Read on a ConfigOpts of its own, where each is registered (and so
    none a library registers later on the process's can clash): before
    the process's own parse, which would end the process on a bad value
    of a command-line option.
    """
    if any(arg in _PRINT_ONLY for arg in argv):
        return
    probe = cfg.ConfigOpts()
    for group, opts in [*namespace_opts(), (None, extra_opts)]:
        if str(group) == 'DEFAULT':
            group = None    # the generator's name for no group
        for opt in opts:
            if opt.required:
                # Listed for the sample (a keystoneauth plugin's, which
                # only the plugin a group names registers): not here.
                opt = copy.copy(opt)
                opt.required = False
            try:
                probe.register_opt(opt, group=group)
            except cfg.DuplicateOptError:
                pass    # listed twice, differently: one is checked
    config_args, _rest = split_config_options(argv)
    try:
        with _deprecations_untold(probe):
            probe(config_args, project='cyborg',
                  default_config_files=default_config_files,
                  default_config_dirs=default_config_dirs)
            check_registered_values(probe)
    finally:
        probe.clear()


def check_registered_values(conf):
    """Read every option registered on ``conf`` (a parsed ConfigOpts)
    once: oslo.config checks a value (type, range, choices) only as it
    is read.  Raises ``cfg.Error`` for the first bad one."""
    for name in conf:
        section = conf[name]
        if isinstance(section, cfg.ConfigOpts.GroupAttr):
            for opt_name in section:
                section[opt_name]


def namespace_opts():
    """(group, options) of every ``OPTION_NAMESPACES`` entry point."""
    found = {entry_point.name: entry_point for entry_point in
             importlib.metadata.entry_points(group='oslo.config.opts')}
    listed = []
    for namespace in OPTION_NAMESPACES:
        listed.extend(found[namespace].load()())
    return listed


# Options that say where the configuration is: accepted after a
# subcommand too ("cyborg-dbsync upgrade --config-file ..."), which
# argparse would refuse, its subcommands knowing none of them.
CONFIG_OPTIONS = ('--config-file', '--config-dir')


def config_options_first(argv):
    """``argv`` with ``CONFIG_OPTIONS`` (and their values) moved before
    everything else, in their order; the rest as it was."""
    first, rest = split_config_options(argv)
    return first + rest


def split_config_options(argv):
    """(``CONFIG_OPTIONS`` of ``argv`` with their values, the rest)."""
    first, rest = [], []
    args = iter(argv)
    for arg in args:
        if arg in CONFIG_OPTIONS:
            # With its value, if any: without, argparse says so.
            first += [arg, *itertools.islice(args, 1)]
        elif arg.partition('=')[0] in CONFIG_OPTIONS:
            first.append(arg)
        else:
            rest.append(arg)
    return first, rest


# What oslo.config writes on stderr for a command-line option's value
# that is not of its type, before it ends the process with status 1.
_BAD_COMMAND_LINE_VALUE = re.compile(r'argument -\S+: Invalid .* value: ')


@contextlib.contextmanager
def command_line_values_checked():
    """Around the parse of a command line (calling a ConfigOpts): a
    command-line option's value that is not of its type (``cyborg-aio
    --port 70000``) raises ``cfg.Error``, for ``config_error``'s one line
    and status 2.  oslo.config would write a line of its own and end the
    process with status 1; it checks those values only then.  What else
    the parse writes on stderr (argparse's usage and error, status 2)
    is written as it was."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            yield
    except SystemExit as exc:
        line = said.getvalue()
        if exc.code == 1 and _BAD_COMMAND_LINE_VALUE.match(line):
            said = None
            raise cfg.Error(line.strip()) from None
        raise
    finally:
        if said is not None:
            sys.stderr.write(said.getvalue())
            sys.stderr.flush()


# oslo.config names where a bad value came from as a LocationInfo repr.
_LOCATION = re.compile(r"LocationInfo\(location=<[^>]*>, detail='([^']*)'\)")


def config_error(prog, problem):
    """Say what is wrong with the configuration in one line and exit 2
    (no traceback: nothing is wrong with the program)."""
    sys.stderr.write(config_error_line(prog, problem) + '\n')
    sys.stderr.flush()
    sys.exit(2)


def config_error_line(prog, problem):
    """``<prog>: configuration error: <problem>``, with oslo.config's
    ``LocationInfo`` reprs replaced by the file they name."""
    return '%s: configuration error: %s' % (
        prog or 'cyborg', _LOCATION.sub(r'\1', str(problem)))


# Where stevedore says it found no driver of a transport_url (a WARNING,
# before the one line of ``check_transport_url``).
_DRIVER_LOGGER = 'stevedore.named'

# The options naming a message broker, as (group, name): the RPC one,
# and the one notifications go to where it is set (``notify``).
RPC_URL = ('DEFAULT', 'transport_url')
NOTIFICATIONS_URL = (notify.GROUP, 'transport_url')

# A port of a host of a transport URL: 0 too, which the rabbit driver
# takes for its default port (a configuration that works is not
# refused).
_PORTS = range(0, 65536)

# The options of oslo.messaging's rabbit driver that it checks against
# each other as it loads: a pool's size at least its minimum.
_RABBIT_DRIVERS = ('rabbit', 'kombu')
_POOL_SIZE = 'rpc_conn_pool_size'
_POOL_MIN_SIZE = 'conn_pool_min_size'
# Where oslo.config says an option's value was left to its default.
_DEFAULTED = (cfg.Locations.opt_default, cfg.Locations.set_default)


def check_transport_url(conf, prog):
    """Exit with ``config_error``'s one line when ``[DEFAULT]
    transport_url``, the ``[oslo_messaging_notifications]driver`` or the
    ``[oslo_messaging_notifications]transport_url`` notifications go to
    cannot work (``transport_url_problem``): a driver that is not
    installed, or that needs a library that is not, a URL oslo.messaging
    cannot read, a port out of range, driver options it refuses.
    Otherwise a service would find it out only as its RPC server is made
    (status 1, "cannot start") or as it connects, the API at every
    write, and notifications at the first one, or never (an unknown
    notification driver sends nothing).  Nothing connects to the broker
    here: one that is away is still waited for."""
    problem = transport_url_problem(conf)
    if problem:
        config_error(prog, problem)


def transport_url_problem(conf):
    """Why ``[DEFAULT]transport_url`` (``rpc.check_transport_url``),
    ``[oslo_messaging_notifications]driver`` (a name no installed
    notification driver has: ``notify.driver_problem``) or, where
    notifications are on and go to a broker of their own,
    ``[oslo_messaging_notifications]transport_url``
    (``notify.check_transport_url``) cannot work, in that order; None
    when all can (see ``check_transport_url``)."""
    problem = (_transport_problem(conf, RPC_URL, rpc.check_transport_url)
               or notify.driver_problem(conf))
    if problem is None and notify.own_transport_url(conf):
        problem = _transport_problem(conf, NOTIFICATIONS_URL,
                                     notify.check_transport_url)
    return problem


def notifications_problem(conf):
    """``transport_url_problem`` for a process whose RPC does not go
    through ``[DEFAULT]transport_url`` (``cyborg-aio``'s stays in the
    process): only what notifications use.  The
    ``[oslo_messaging_notifications]driver`` and, where notifications
    are on, the URL they go to: their own, else ``[DEFAULT]
    transport_url``, said of the option that names it.  None when all
    can work, or notifications are off."""
    problem = notify.driver_problem(conf)
    if problem is not None:
        return problem
    if notify.own_transport_url(conf):
        return _transport_problem(conf, NOTIFICATIONS_URL,
                                  notify.check_transport_url)
    if any(name not in ('', notify.NOOP_DRIVER)
           for name in conf[notify.GROUP].driver):
        return _transport_problem(conf, RPC_URL, rpc.check_transport_url)
    return None


def _transport_problem(conf, option, check):
    """Why the URL of ``option`` cannot work, or None; ``check(conf)``
    makes its transport (which registers the option) and drops it."""
    try:
        with untold(conf, _DRIVER_LOGGER):
            check(conf)
    except rpc.TRANSPORT_URL_ERRORS as exc:
        return (_port_problem(conf, option)
                or _pool_problem(conf, option, exc)
                or '%s: %s' % (_label(option), exception.first_line(exc)))
    return _port_problem(conf, option)


def _label(option):
    return '[%s]%s' % option


def _url(conf, option):
    """The value of ``option``; None where it is not registered (a
    transport made beforehand, on another ConfigOpts: ``rpc``'s check
    then makes none)."""
    group, name = option
    try:
        return (conf if group == 'DEFAULT' else conf[group])[name]
    except cfg.NoSuchOptError:
        return None


def _port_problem(conf, option):
    """The first host of ``option``'s URL whose port is not a number from
    0 to 65535.  oslo.messaging takes any integer (99999 fails only as
    the first connection is made, "Port out of range"; 0 is 5672 to its
    rabbit driver) and says of one that is not an integer only int()'s
    "invalid literal".  What else it cannot read it says itself."""
    url = _url(conf, option)
    try:
        hosts = urllib.parse.urlsplit(url).netloc.split(',') if url else ()
    except ValueError:
        return None
    for host in hosts:
        # As oslo.messaging splits them (oslo_utils.netutils
        # .parse_host_port), credentials first.
        address = host.rsplit('@', 1)[-1]
        if address.startswith('['):
            name, _bracket, port = address[1:].partition(']')
            if not port.startswith(':'):
                continue
            port = port[1:]
        elif address.count(':') == 1:
            name, port = address.split(':')
        else:
            continue
        if not (port.isascii() and port.isdigit() and int(port) in _PORTS):
            return '%s: host %s has port %r, not a number from %d to %d' % (
                _label(option), name, port, _PORTS[0], _PORTS[-1])
    return None


def _pool_problem(conf, option, exc):
    """oslo.messaging's rabbit driver refuses a connection pool whose size
    (``rpc_conn_pool_size``) is less than its minimum
    (``conn_pool_min_size``) as it loads, which oslo.messaging then says
    as the driver failing to load: say it of the option that is wrong,
    in ``[oslo_messaging_rabbit]`` or the URL's query (whose options win),
    the other beside it."""
    if not (isinstance(exc, messaging.DriverLoadFailure)
            and exc.driver.split('+')[0] in _RABBIT_DRIVERS
            and rpc.RABBIT_GROUP in conf):
        return None
    query = messaging.TransportURL.parse(conf, _url(conf, option)).query
    (size_label, size, size_set), (min_label, minimum, min_set) = [
        _pool_option(conf, option, query, name)
        for name in (_POOL_SIZE, _POOL_MIN_SIZE)]
    if size >= minimum:
        return None
    if min_set and not size_set:
        return '%s: %d must be less than or equal to %s: %d' % (
            min_label, minimum, size_label, size)
    return '%s: %d must be greater than or equal to %s: %d' % (
        size_label, size, min_label, minimum)


def _pool_option(conf, option, query, name):
    """(where the value comes from, the value, whether it was set rather
    than left to its default) of the rabbit driver's option ``name``."""
    if name in query:
        # The driver has already read it as its option's type.
        return "%s's %s" % (_label(option), name), int(query[name]), True
    location = conf.get_location(name, rpc.RABBIT_GROUP).location
    return ('[%s]%s' % (rpc.RABBIT_GROUP, name),
            conf[rpc.RABBIT_GROUP][name], location not in _DEFAULTED)


@contextlib.contextmanager
def untold(conf, logger):
    """What the library logger named ``logger`` logs meanwhile, not told
    unless ``--debug``: a command's one line says what went wrong."""
    quiet = std_logging.getLogger(logger)
    was_disabled = quiet.disabled
    quiet.disabled = not conf.debug
    try:
        yield
    finally:
        quiet.disabled = was_disabled


class RPCService:
    """An oslo.messaging RPC server on the threading executor.

    oslo.messaging's consumer thread notices a stop only when its poll of
    the broker ends (up to 5 s on an idle server), and its executor's
    idle threads a second later: ``stop()`` therefore stops the server on
    a thread of its own and wakes the consumer up with a message to its
    own queue (``rpc.wake_server``); ``wait()`` returns once the consumer
    has stopped and every message it took has been answered
    (``rpc.CountingRPCServer``): at once when idle.  oslo.messaging
    finishes its own wait in the background."""

    def __init__(self, conf, topic, host, endpoints):
        self.conf = conf
        self.topic = topic
        self.host = host
        self._server = rpc.get_server(conf, topic, host, endpoints)
        self._stopper = None
        self._consumer_stopped = threading.Event()

    def start(self):
        self._server.start()
        LOG.info('RPC server listening on topic %s as %s', self.topic,
                 self.host)

    def stop(self):
        self._stopper = threading.Thread(target=self._stop_server,
                                         daemon=True,
                                         name='stop-%s' % self.topic)
        self._stopper.start()
        # Woken up more than once: a message that reaches the consumer
        # before it saw the stop only starts one more poll.
        for _attempt in range(_WAKE_ATTEMPTS):
            rpc.wake_server(self.conf, self.topic, self.host)
            if self._consumer_stopped.wait(_WAKE_EVERY):
                break

    def _stop_server(self):
        _quietly(self._server.stop, self)
        self._consumer_stopped.set()
        _quietly(self._server.wait, self)

    def wait(self):
        if self._stopper is not None:
            self._consumer_stopped.wait()
            self._server.wait_idle()

    def __str__(self):
        return 'RPC server %s.%s' % (self.topic, self.host)


def shutdown_timeout(conf, serves_api=False):
    """Seconds a stopping process waits for its in-flight work:
    ``[DEFAULT]graceful_shutdown_timeout``, or when unset
    ``api_shutdown_timeout`` for a process that ``serves_api``, else
    ``SHUTDOWN_TIMEOUT``."""
    if conf.graceful_shutdown_timeout is not None:
        return conf.graceful_shutdown_timeout
    if serves_api:
        return api_shutdown_timeout(conf)
    return default_conf.SHUTDOWN_TIMEOUT


def api_shutdown_timeout(conf):
    """The longest an API request may wait for the broker and for the
    conductor, and then answer: a stop that waits this long cuts off no
    write."""
    return (conf.api.conductor_timeout + conf.api.broker_retries
            + default_conf.API_SHUTDOWN_MARGIN)


def short_shutdown_warning(conf):
    """What a configured grace time shorter than ``[api]
    conductor_timeout`` does to an API's writes, or None."""
    grace = conf.graceful_shutdown_timeout
    if grace is None or grace >= conf.api.conductor_timeout:
        return None
    return ('[DEFAULT]graceful_shutdown_timeout (%g s) is shorter than '
            '[api]conductor_timeout (%d s): a stop cuts off the writes '
            'still waiting for the conductor (unset, it is %g s)'
            % (grace, conf.api.conductor_timeout,
               api_shutdown_timeout(conf)))


class Launcher:
    """Runs services until SIGTERM/SIGINT, then stops them gracefully,
    within ``shutdown_timeout`` (that of a process that ``serves_api``
    when it does)."""

    def __init__(self, conf, name, serves_api=False):
        self.conf = conf
        self.name = name
        self.serves_api = serves_api
        self._services = []
        self._started = []
        self._started_lock = threading.Lock()
        self._stop_requested = threading.Event()
        self._start_failed = False
        self.ready = threading.Event()

    def add(self, service):
        self._services.append(service)
        return service

    # -- signals -----------------------------------------------------------

    def install_signal_handlers(self):
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_stop_signal)
        signal.signal(signal.SIGHUP, self._on_sighup)
        # A forked API worker starts with SIGHUP blocked (so that one its
        # parent sends it meanwhile is not lost): it arrives now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGHUP])

    def _on_stop_signal(self, signum, _frame):
        # Only set an event here: signal handlers run between bytecodes of
        # the main thread, which may hold locks that logging needs.
        self._stop_requested.set()

    def _on_sighup(self, _signum, _frame):
        threading.Thread(target=self._reload, daemon=True).start()

    def _reload(self):
        LOG.info('SIGHUP: re-reading the mutable options')
        self.conf.mutate_config_files()

    # -- life cycle --------------------------------------------------------

    def request_stop(self):
        self._stop_requested.set()

    def run(self):
        """Start the services, block until asked to stop, stop them.

        Returns the exit status: 0 after a stop request, 1 when a service
        failed to start.
        """
        starter = threading.Thread(target=self._start_all,
                                   name='%s-start' % self.name, daemon=True)
        starter.start()
        # wait() with a timeout keeps the main thread responsive to signals.
        while not self._stop_requested.wait(1.0):
            pass
        LOG.info('%s stopping', self.name)
        if self._stop_all():
            LOG.info('%s stopped', self.name)
        return 1 if self._start_failed else 0

    def _start_all(self):
        for service in self._services:
            if self._stop_requested.is_set():
                return
            try:
                service.start()
            except Exception:
                LOG.exception('%s: %s failed to start; stopping', self.name,
                              service)
                self._start_failed = True
                self._stop_requested.set()
                return
            with self._started_lock:
                self._started.append(service)
        LOG.info('%s started', self.name)
        self.ready.set()

    def _stop_all(self):
        """Stop started services in reverse order within the grace time,
        each after the ones started after it finished their work.

        A service still starting (e.g. waiting for the broker) has taken
        no work yet; it is abandoned with its daemon thread.
        """
        grace = shutdown_timeout(self.conf, self.serves_api)
        deadline = time.monotonic() + grace
        with self._started_lock:
            started = list(reversed(self._started))
        stopper = threading.Thread(target=self._stop_and_wait,
                                   args=(started,), daemon=True,
                                   name='%s-stop' % self.name)
        stopper.start()
        stopper.join(max(0.0, deadline - time.monotonic()))
        if stopper.is_alive():
            LOG.warning('%s: in-flight work did not finish within %g s; '
                        'exiting anyway', self.name, grace)
            return False
        return True

    def _stop_and_wait(self, services):
        # One at a time, each waited for before the next is stopped: a
        # service draining its work may use those started before it (the
        # API's in-flight requests the conductor, the all-in-one's
        # background binds its agent and Placement).
        for service in services:
            _quietly(service.stop, service)
            LOG.debug('%s stopped', service)
            if hasattr(service, 'wait'):
                _quietly(service.wait, service)
                LOG.debug('%s finished its in-flight work', service)
        # Notifications still queued (the process exits with os._exit,
        # which runs no atexit handler): published before the transports
        # close, within notify.EXIT_WAIT.
        notify = sys.modules.get('cyborg.common.notify')
        if notify is not None:
            _quietly(lambda: notify.flush(notify.EXIT_WAIT), 'notifications')
        # Closing the broker connections politely joins oslo.messaging's
        # consumer threads, each of which notices only at the end of its
        # current poll (up to a second each): bounded, because nothing is
        # in flight any more and the process exits right after (the broker
        # drops its connections and reply queues then).
        _bounded(rpc.cleanup, 'RPC transport', _CLEANUP_TIMEOUT)
        # Only processes that use the database have imported its layer.
        db_api = sys.modules.get('cyborg.db.api')
        if db_api is not None:
            _quietly(db_api.context_manager.dispose_pool, 'database pool')


def exit_process(status):
    """Flush the logs and end the process now.

    Once the services are stopped nothing is left to do, but threads of
    libraries (a call waiting for its reply, a broker reconnect loop, a
    pool's workers) could keep a normal interpreter exit waiting well past
    the grace time.
    """
    for handler in logging.getLogger().logger.handlers:
        _quietly(handler.flush, 'log handler')
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _bounded(func, what, timeout):
    """``func()`` on a daemon thread, waited for at most ``timeout`` s."""
    thread = threading.Thread(target=_quietly, args=(func, what),
                              daemon=True, name='stop-%s' % what)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        LOG.debug('%s still closing after %s s; not waiting for it', what,
                  timeout)


def _quietly(func, what):
    try:
        func()
    except Exception as exc:
        LOG.warning('Error while stopping %s: %s', what, exc)


def run_process(prog, build_services, argv=None, config_problem=None):
    """The ``main()`` of a service process; never returns.

    Stop signals are watched before anything else, so a SIGTERM that
    arrives while the process is still starting also ends it cleanly.
    ``build_services(conf)`` returns the services in start order.
    ``config_problem(conf)`` says why the configuration cannot work, or
    None; a problem stops the process at once (``config_error``), as a
    transport URL that cannot work does (``check_transport_url``).
    """
    launcher = Launcher(cyborg.conf.CONF, prog)
    launcher.install_signal_handlers()
    conf = prepare(argv, prog=prog)
    problem = config_problem(conf) if config_problem else None
    if problem:
        config_error(prog, problem)
    check_transport_url(conf, prog)
    LOG.info('%s %s starting on host %s', prog, version.version_string(),
             conf.host)
    try:
        for service in build_services(conf):
            launcher.add(service)
    except Exception as exc:
        LOG.error('%s cannot start: %s', prog, exc)
        exit_process(1)
    exit_process(launcher.run())
