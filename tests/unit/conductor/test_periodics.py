"""The periodic runner's stop: asked at once, waited for briefly.  A job
running at SIGTERM (a re-send to a Nova that does not answer) held the
conductor's stop in the runner's join, past the grace time: the RPC
server, stopped after it, went on taking calls it would never answer,
and the background binds were never drained."""

import threading
import time

from cyborg.conductor import periodics

BLOCKED = threading.Event()
RAN = threading.Event()


def blocking_job(conf, context):
    RAN.set()
    BLOCKED.wait(30)


def test_a_running_job_does_not_hold_up_the_stop(conf):
    conf.set_override('reconcile_interval', 1, group='conductor')
    runner = periodics.PeriodicRunner(conf, [
        ('blocking', 'reconcile_interval',
         'tests.unit.conductor.test_periodics:blocking_job')])
    runner.start()
    try:
        assert RAN.wait(10)
        started = time.monotonic()
        runner.stop()
        assert time.monotonic() - started < 0.5
        runner.wait()
        assert time.monotonic() - started < periodics.STOP_WAIT + 1
    finally:
        BLOCKED.set()
