"""cyborg-api's worker processes, forked by the real WorkerPool."""

import os
import signal
import threading
import time

from oslo_config import cfg

import cyborg.conf
from cyborg.cmd import api as api_cmd
from cyborg.common import service

SLOW_START = 2.0     # seconds the worker takes to start, in this test


def test_a_worker_told_to_stop_as_it_starts_stops(monkeypatch):
    """The parent may send SIGTERM the moment it has forked a worker (it
    was itself told to stop): the worker has the parent's handlers until
    it installs its own, and those only set the parent's stop flag, its
    own copy.  The signal must not be lost: the worker exits at once,
    status 0, instead of starting to serve."""
    def slow_start(conf, sock, parent):
        time.sleep(SLOW_START)      # building the app, opening pools...
        return 3                    # served and stopped: not wanted here

    monkeypatch.setattr(api_cmd, '_serve_worker', slow_start)
    pool = api_cmd.WorkerPool(None, None, 1)
    # What WorkerPool.run installs in the parent before it forks.
    previous = {signum: signal.signal(signum, lambda *_: pool._stop.set())
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        pool._spawn()
        [pid] = pool._children
        started = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        took = time.monotonic() - started
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert os.waitstatus_to_exitcode(status) == 0
    assert took < SLOW_START / 2, took
    assert not pool._stop.is_set()      # the parent was not told anything


class _Options:
    """Stands for the worker's ConfigOpts: says whether it was told to
    re-read its mutable options."""

    def __init__(self):
        self.mutated = threading.Event()

    def mutate_config_files(self):
        self.mutated.set()


def test_a_worker_sent_sighup_as_it_starts_reloads(monkeypatch):
    """The parent passes SIGHUP on to every worker it has, one that is
    still starting included.  Until the worker's own handler is in
    place, the signal must wait (blocked), not run the parent's handler
    copied into the child, which left the worker with its old options."""
    def slow_start(conf, sock, parent):
        time.sleep(SLOW_START / 2)      # building the app...
        options = _Options()
        launcher = service.Launcher(options, 'test worker')
        launcher.install_signal_handlers()
        return 0 if options.mutated.wait(SLOW_START) else 4

    monkeypatch.setattr(api_cmd, '_serve_worker', slow_start)
    pool = api_cmd.WorkerPool(None, None, 1)
    # As WorkerPool.run does in the parent before it forks: handlers that
    # only note the signal in the parent (copied, in the child too).
    handlers = {signal.SIGTERM: lambda *_: pool._stop.set(),
                signal.SIGINT: lambda *_: pool._stop.set(),
                signal.SIGHUP: lambda *_: None}
    previous = {signum: signal.signal(signum, handler)
                for signum, handler in handlers.items()}
    try:
        pool._spawn()
        [pid] = pool._children
        os.kill(pid, signal.SIGHUP)
        _, status = os.waitpid(pid, 0)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_sighup_with_a_bad_value_in_the_file_keeps_the_api_up(
        tmp_path):
    """oslo.config exits (SystemExit) when the file now holds a bad value
    of a command-line option: the parent, re-reading the mutable options
    on SIGHUP, went down with it, and the workers with their parent."""
    config = tmp_path / 'cyborg.conf'
    config.write_text('[DEFAULT]\ndebug = true\n[api]\nauth_strategy = '
                      'noauth\n')
    # A ConfigOpts of its own: the global one may hold options other
    # tests registered (keystoneauth's required [oslo_limit] auth-url).
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf = service.prepare(['--config-file', str(config)], conf=conf,
                           prog='cyborg-api')
    pool = api_cmd.WorkerPool(conf, None, 0)
    config.write_text('[DEFAULT]\ndebug = maybe\n[api]\n'
                      'auth_strategy = noauth\n')
    pool._reload_options()      # logs an ERROR, raises nothing
    assert conf.debug is True
