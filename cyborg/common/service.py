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
most ``[DEFAULT]graceful_shutdown_timeout`` seconds in all; then the
process exits with status 0, without a traceback.  SIGHUP re-reads the
mutable options (log levels).
"""

import itertools
import os
import re
import signal
import sys
import threading
import time

from oslo_config import cfg
from oslo_log import log as logging

import cyborg.conf
from cyborg import version
from cyborg.common import rpc

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
    """``cyborg.conf.parse_args``, or exit saying what is wrong with the
    configuration (``config_error``)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        cyborg.conf.parse_args(conf, config_options_first(argv), prog=prog)
    except cfg.Error as exc:
        config_error(prog, exc)
    return conf


# Options that say where the configuration is: accepted after a
# subcommand too ("cyborg-dbsync upgrade --config-file ..."), which
# argparse would refuse, its subcommands knowing none of them.
CONFIG_OPTIONS = ('--config-file', '--config-dir')


def config_options_first(argv):
    """``argv`` with ``CONFIG_OPTIONS`` (and their values) moved before
    everything else, in their order; the rest as it was."""
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
    return first + rest


# oslo.config names where a bad value came from as a LocationInfo repr.
_LOCATION = re.compile(r"LocationInfo\(location=<[^>]*>, detail='([^']*)'\)")


def config_error(prog, problem):
    """Say what is wrong with the configuration in one line and exit 2
    (no traceback: nothing is wrong with the program)."""
    text = _LOCATION.sub(r'\1', str(problem))
    sys.stderr.write('%s: configuration error: %s\n' % (
        prog or 'cyborg', text))
    sys.stderr.flush()
    sys.exit(2)


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


class Launcher:
    """Runs services until SIGTERM/SIGINT, then stops them gracefully."""

    def __init__(self, conf, name):
        self.conf = conf
        self.name = name
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
        deadline = (time.monotonic()
                    + self.conf.graceful_shutdown_timeout)
        with self._started_lock:
            started = list(reversed(self._started))
        stopper = threading.Thread(target=self._stop_and_wait,
                                   args=(started,), daemon=True,
                                   name='%s-stop' % self.name)
        stopper.start()
        stopper.join(max(0.0, deadline - time.monotonic()))
        if stopper.is_alive():
            LOG.warning('%s: in-flight work did not finish within %s s; '
                        'exiting anyway', self.name,
                        self.conf.graceful_shutdown_timeout)
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
    None; a problem stops the process at once (``config_error``).
    """
    launcher = Launcher(cyborg.conf.CONF, prog)
    launcher.install_signal_handlers()
    conf = prepare(argv, prog=prog)
    problem = config_problem(conf) if config_problem else None
    if problem:
        config_error(prog, problem)
    LOG.info('%s %s starting on host %s', prog, version.version_string(),
             conf.host)
    try:
        for service in build_services(conf):
            launcher.add(service)
    except Exception as exc:
        LOG.error('%s cannot start: %s', prog, exc)
        exit_process(1)
    exit_process(launcher.run())
