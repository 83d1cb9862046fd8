"""cyborg-api's worker processes, forked by the real WorkerPool."""

import os
import signal
import time

from cyborg.cmd import api as api_cmd

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
