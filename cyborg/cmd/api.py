"""cyborg-api: serves the WSGI app (cyborg.api.app.build_app) with cheroot.

The listening socket is bound once, before any worker starts, so every
worker accepts on the same socket.  With ``[api]api_workers`` = 1 the
process serves by itself; with more it forks that many workers (each with
``[api]threads`` request threads), restarts a worker that dies, on SIGHUP
re-reads the mutable options itself (for the workers it forks later) and
passes the signal on, and on SIGTERM passes the signal on and exits 0
once they are gone (``service.shutdown_timeout``: time for the writes
waiting for the conductor).  Each worker
builds its own app, database engine and RPC client after the fork: none of
them survives a fork.  With several workers it first removes the metrics
files a previous run left in ``PROMETHEUS_MULTIPROC_DIR``, and folds the
files of each worker that dies into archives
(``cyborg.api.metrics_files``).

It refuses to start (configuration error, status 2) with ``[api]
auth_strategy = noauth`` on a ``host_ip`` that is not a loopback address
unless ``[api]noauth_on_any_address`` is set: noauth makes every caller
the identity its headers name, and one naming none the admin.
"""

import errno
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time

from oslo_log import log

import cyborg
from cyborg import version
from cyborg.api import app as api_app
from cyborg.api import auth
from cyborg.api import faults
from cyborg.api import metrics_files
from cyborg.common import exception
from cyborg.common import policy
from cyborg.common import quota
from cyborg.common import service
from cyborg.common import serving
from cyborg.db import api as db_api

LOG = log.getLogger(__name__)

# Errors that only say the client closed its connection.
_CLIENT_GONE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)

# A worker dying sooner than this after its start is not restarted at
# once, so a worker that cannot start does not make a fork loop.
_RESPAWN_DELAY = 1.0
# Blocked across a worker's fork (WorkerPool._spawn).
_FORK_BLOCKED = (*service.STOP_SIGNALS, signal.SIGHUP)


class _SharedSocketServer(serving.Server):
    """A cheroot server accepting on a socket bound by someone else."""

    def __init__(self, sock, **kwargs):
        self._shared_socket = sock
        super().__init__(bind_addr=sock.getsockname()[:2], **kwargs)

    def bind(self, family, type, proto=0):
        self.socket = self._shared_socket

    def error_log(self, msg='', level=logging.INFO, traceback=False):
        # cheroot writes these to stderr, tracebacks included; a client
        # that went away mid-request is no error of ours.
        exc = sys.exc_info()[1]
        if isinstance(exc, _CLIENT_GONE):
            LOG.info('Client connection closed early: %s', exc)
            return
        LOG.log(level, 'HTTP server: %s', msg, exc_info=traceback)


class APIServer:
    """One cheroot server (a pool of request threads) as a service."""

    def __init__(self, conf, app, sock, name='cyborg-api'):
        self._server = _SharedSocketServer(
            sock, wsgi_app=app, numthreads=conf.api.threads,
            server_name=name,
            shutdown_timeout=service.shutdown_timeout(conf,
                                                      serves_api=True),
            request_read_timeout=conf.api.request_read_timeout,
            error_body=faults.body)
        self._thread = None

    def start(self):
        self._server.prepare()
        self._thread = threading.Thread(target=self._server.serve,
                                        name='cyborg-api-accept',
                                        daemon=True)
        self._thread.start()

    def stop(self):
        # Stops accepting, then lets the request threads finish.
        self._server.stop()

    def wait(self):
        if self._thread is not None:
            self._thread.join()

    def __str__(self):
        return 'API server %s:%s' % self._server.bind_addr


def listen(host, port):
    """A listening TCP socket for ``host`` (IPv4 or IPv6) and ``port``."""
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family,
                                backlog=serving.LISTEN_BACKLOG,
                                dualstack_ipv6=host in ('::', '::0'))
    sock.set_inheritable(True)
    # Accepted connections inherit it; cheroot would set it in its own
    # bind(), which the shared socket skips.  Without it a keep-alive
    # client waits ~40 ms (delayed ACK) on every response.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def url_of(sock):
    host, port = sock.getsockname()[:2]
    if ':' in host:
        host = '[%s]' % host
    return 'http://%s:%d' % (host, port)


def _serve_worker(conf, sock, parent=None):
    """Build the app in this process and serve until SIGTERM (or, for a
    forked worker, until its parent is gone)."""
    launcher = service.Launcher(conf, 'cyborg-api worker %d' % os.getpid(),
                                serves_api=True)
    # Before building the app: a SIGTERM from then on must stop us.
    launcher.install_signal_handlers()
    if parent is not None:
        threading.Thread(target=_stop_when_orphaned,
                         args=(launcher, parent), daemon=True).start()
    db_api.configure(conf, wait_for_database=False)
    launcher.add(APIServer(conf, api_app.build_app(conf), sock))
    return launcher.run()


def _stop_when_orphaned(launcher, parent):
    # A parent killed with SIGKILL cannot pass SIGTERM on; without this
    # its workers would keep serving the port forever.
    while os.getppid() == parent:
        time.sleep(1.0)
    LOG.warning('cyborg-api parent %d is gone; stopping', parent)
    launcher.request_stop()


class WorkerPool:
    """Forks, watches and stops the API worker processes."""

    def __init__(self, conf, sock, count):
        self.conf = conf
        self.sock = sock
        self.count = count
        self._children = {}  # pid -> start time
        self._stop = threading.Event()
        self._reload = threading.Event()

    def run(self):
        # Before any worker records into it: a previous run's counts
        # would be added to this one's.
        metrics_files.empty_multiproc_dir()
        for signum in service.STOP_SIGNALS:
            signal.signal(signum, lambda *_: self._stop.set())
        signal.signal(signal.SIGHUP, lambda *_: self._reload.set())
        while not self._stop.is_set():
            if self._reload.is_set():
                self._reload.clear()
                self._reload_options()
            self._reap()
            self._fill()
            self._stop.wait(0.2)
        return self._terminate()

    def _reload_options(self):
        """SIGHUP: the mutable options re-read here, so that the workers
        forked from now on start with them, and by each running worker
        (a worker forked before and not yet listening for SIGHUP has it
        blocked until it does: see ``_spawn``)."""
        LOG.info('SIGHUP: re-reading the mutable options')
        try:
            self.conf.mutate_config_files()
        except BaseException as exc:  # noqa: BLE001 - the API stays up
            # A bad value in the file: oslo.config raises SystemExit for
            # an option of the command line.  The parent, and the workers
            # it starts, keep the options they had.
            LOG.error('SIGHUP: the configuration files could not be read '
                      '(%s); keeping the options in use, and not passing '
                      'SIGHUP on', exception.first_line(exc))
            return
        for pid in list(self._children):
            _signal(pid, signal.SIGHUP)

    def _fill(self):
        while len(self._children) < self.count and not self._stop.is_set():
            self._spawn()

    def _spawn(self):
        parent = os.getpid()
        # The child starts with the parent's handlers, which would only
        # set the parent's stop flag, copied: a SIGTERM sent to it before
        # it installs its own would be lost.  Blocked across the fork, a
        # stop signal waits until the child can act on it.  SIGHUP too,
        # until the worker's Launcher listens for it.
        signal.pthread_sigmask(signal.SIG_BLOCK, _FORK_BLOCKED)
        try:
            pid = os.fork()
            if pid == 0:
                self._worker(parent)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORK_BLOCKED)
        LOG.info('Started cyborg-api worker %d', pid)
        self._children[pid] = time.monotonic()

    def _worker(self, parent):
        """The forked child: never returns."""
        status = 1
        try:
            # Until _serve_worker installs its own: nothing to stop yet.
            for signum in service.STOP_SIGNALS:
                signal.signal(signum, cyborg.exit_zero)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, service.STOP_SIGNALS)
            status = _serve_worker(self.conf, self.sock, parent)
        except Exception:
            LOG.exception('cyborg-api worker failed')
        finally:
            service.exit_process(status)

    def _reap(self):
        while self._children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self._children.clear()
                return
            if pid == 0:
                return
            started = self._children.pop(pid, None)
            if started is None:
                continue
            LOG.warning('cyborg-api worker %d exited (%s); starting another',
                        pid, _describe(status))
            # Its metrics files, folded into the archives: else each
            # worker ever replaced left files every scrape reads.
            metrics_files.worker_exited(pid)
            if time.monotonic() - started < _RESPAWN_DELAY:
                self._stop.wait(_RESPAWN_DELAY)

    def _terminate(self):
        LOG.info('cyborg-api stopping %d worker(s)', len(self._children))
        for pid in list(self._children):
            _signal(pid, signal.SIGTERM)
        # Workers give in-flight requests the grace time, then exit.
        deadline = (time.monotonic() + 1
                    + service.shutdown_timeout(self.conf, serves_api=True))
        while self._children and time.monotonic() < deadline:
            self._reap_quietly()
            time.sleep(0.05)
        for pid in list(self._children):
            LOG.warning('cyborg-api worker %d did not stop; killing it', pid)
            _signal(pid, signal.SIGKILL)
        LOG.info('cyborg-api stopped')
        return 0

    def _reap_quietly(self):
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            self._children.clear()
            return
        self._children.pop(pid, None)


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except OSError as exc:
        if exc.errno != errno.ESRCH:
            raise


def _describe(status):
    if os.WIFSIGNALED(status):
        return 'signal %d' % os.WTERMSIG(status)
    return 'status %d' % os.waitstatus_to_exitcode(status)


def is_loopback(host):
    """Whether ``host`` (an address, or a name: every address it
    resolves to) can be reached from this machine alone."""
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError:
            return False
        addresses = [ipaddress.ip_address(info[4][0].split('%', 1)[0])
                     for info in found]
    return bool(addresses) and all(
        (getattr(a, 'ipv4_mapped', None) or a).is_loopback
        for a in addresses)


def noauth_problem(conf):
    """Why cyborg-api must not serve ``conf`` as it is, or None: noauth
    (every caller the identity its headers name, one naming none the
    admin) on an address others can reach, unless
    ``[api]noauth_on_any_address`` allows it."""
    if (conf.api.auth_strategy != 'noauth'
            or conf.api.noauth_on_any_address
            or is_loopback(conf.api.host_ip)):
        return None
    return ('[api]auth_strategy is noauth, which makes anyone who reaches '
            'the API an admin, and [api]host_ip %s is not a loopback '
            'address: set host_ip = 127.0.0.1 to try cyborg out on this '
            'machine, use auth_strategy = keystone, or set [api]'
            'noauth_on_any_address = true if no one else can reach %s'
            % (conf.api.host_ip, conf.api.host_ip))


def warn_if_shutdown_short(conf):
    warning = service.short_shutdown_warning(conf)
    if warning:
        LOG.warning('%s', warning)


def main(argv=None):
    conf = service.prepare(argv, prog='cyborg-api')
    problem = (auth.keystone_config_problem(conf)
               or quota.config_problem(conf)
               or policy.config_problem(conf)
               or noauth_problem(conf))
    if problem:
        service.config_error('cyborg-api', problem)
    if conf.api.auth_strategy == 'noauth' and \
            not is_loopback(conf.api.host_ip):
        LOG.warning('[api]auth_strategy is noauth and [api]'
                    'noauth_on_any_address is set: anyone who reaches %s '
                    'port %d is an admin', conf.api.host_ip, conf.api.port)
    # Writes need the conductor: said now, not as each one fails.
    service.check_transport_url(conf, 'cyborg-api')
    warn_if_shutdown_short(conf)
    try:
        sock = listen(conf.api.host_ip, conf.api.port)
    except OSError as exc:
        LOG.error('cyborg-api cannot listen on %s:%d: %s%s',
                  conf.api.host_ip, conf.api.port, exc,
                  ' (set another [api]port)'
                  if exc.errno == errno.EADDRINUSE else '')
        service.exit_process(1)
    LOG.info('cyborg-api listening on %s with %d worker(s) of %d threads '
             '(cyborg %s)', url_of(sock), conf.api.api_workers,
             conf.api.threads, version.version_string())
    if conf.api.api_workers == 1:
        service.exit_process(_serve_worker(conf, sock))
    sys.exit(WorkerPool(conf, sock, conf.api.api_workers).run())
