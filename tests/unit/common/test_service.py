"""The launcher: start order, stop order, grace time, slow starters; and
a SIGTERM before a command installs its own handling."""

import subprocess
import sys
import threading
import time

from oslo_messaging.notify import _impl_test as test_notifications

from cyborg.common import notify
from cyborg.common import service
from tests.fixtures import notifications as notification_fixture


class Recorder:
    def __init__(self, name, log, start_blocks=None, wait_takes=0.0):
        self.name = name
        self.log = log
        self.start_blocks = start_blocks
        self.wait_takes = wait_takes

    def start(self):
        if self.start_blocks is not None:
            self.start_blocks.wait()
        self.log.append(('start', self.name))

    def stop(self):
        self.log.append(('stop', self.name))

    def wait(self):
        time.sleep(self.wait_takes)
        self.log.append(('waited', self.name))

    def __str__(self):
        return self.name


def _run_until_ready(launcher, timeout=5):
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault('status', launcher.run()))
    thread.start()
    assert launcher.ready.wait(timeout)
    return thread, result


def test_starts_in_order_and_stops_in_reverse(conf):
    log = []
    launcher = service.Launcher(conf, 'test')
    for name in ('rpc', 'reporter', 'hotplug'):
        launcher.add(Recorder(name, log))
    thread, result = _run_until_ready(launcher)
    launcher.request_stop()
    thread.join(5)
    assert result['status'] == 0
    # Each stopped once those started after it drained: a service may
    # rely on those started before it while it drains (the all-in-one's
    # background binds on its agent's RPC server and Placement).
    assert log == [('start', 'rpc'), ('start', 'reporter'),
                   ('start', 'hotplug'),
                   ('stop', 'hotplug'), ('waited', 'hotplug'),
                   ('stop', 'reporter'), ('waited', 'reporter'),
                   ('stop', 'rpc'), ('waited', 'rpc')]


def test_a_service_stops_only_once_those_after_it_drained(conf):
    # Slow drains, so that a stop issued before one ended would show.
    log = []
    launcher = service.Launcher(conf, 'test')
    for name, takes in (('placement', 0), ('agent rpc', 0),
                        ('background binds', 0.5), ('api', 0.2)):
        launcher.add(Recorder(name, log, wait_takes=takes))
    thread, result = _run_until_ready(launcher)
    launcher.request_stop()
    thread.join(10)
    assert result['status'] == 0
    assert [e for e in log if e[0] != 'start'] == [
        ('stop', 'api'), ('waited', 'api'),
        ('stop', 'background binds'), ('waited', 'background binds'),
        ('stop', 'agent rpc'), ('waited', 'agent rpc'),
        ('stop', 'placement'), ('waited', 'placement')]


def test_in_flight_work_finishes_before_exit(conf):
    log = []
    launcher = service.Launcher(conf, 'test')
    launcher.add(Recorder('rpc', log, wait_takes=0.5))
    thread, result = _run_until_ready(launcher)
    launcher.request_stop()
    thread.join(5)
    assert ('waited', 'rpc') in log


def test_a_service_still_starting_does_not_hold_up_the_stop(conf):
    log = []
    never = threading.Event()
    launcher = service.Launcher(conf, 'test')
    launcher.add(Recorder('db', log))
    launcher.add(Recorder('rpc-waiting-for-broker', log, start_blocks=never))
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault('status', launcher.run()))
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    launcher.request_stop()
    thread.join(5)
    assert time.monotonic() - started < 2
    assert result['status'] == 0
    # Only what had started is stopped.
    assert log == [('start', 'db'), ('stop', 'db'), ('waited', 'db')]
    # Let the blocked start end, within the test (it logs as it ends).
    never.set()
    for starter in threading.enumerate():
        if starter.name == 'test-start':
            starter.join(5)


def test_a_service_failing_to_start_stops_the_process(conf):
    class Broken:
        def start(self):
            raise RuntimeError('bad config')

        def stop(self):
            pass

    log = []
    launcher = service.Launcher(conf, 'test')
    launcher.add(Recorder('first', log))
    launcher.add(Broken())
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault('status', launcher.run()))
    thread.start()
    thread.join(5)
    assert result['status'] == 1
    assert log == [('start', 'first'), ('stop', 'first'), ('waited', 'first')]


# A cyborg console script (argv[0] starts with "cyborg-") that receives
# SIGTERM while a finalizer runs, before it installed its own handling.
_EARLY_SIGTERM = r'''
import os, signal, sys
sys.argv[0] = 'cyborg-conductor'
import cyborg


class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecodes: the handler runs among them
            pass


thing = Finalized()
del thing
print('still running after SIGTERM', flush=True)
'''


def test_an_early_sigterm_is_never_lost():
    """Until a service installs its own handling, SIGTERM ends one of
    the long-running console scripts (``cyborg.SERVICES``) with status
    0, even when it lands in a finalizer (where an exception such as
    SystemExit would be printed and ignored, and the process would run
    on deaf to it: a test run once waited 5 s for a conductor stopped
    while it started)."""
    done = subprocess.run([sys.executable, '-c', _EARLY_SIGTERM],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, ''), done.stderr


def test_an_api_waits_for_writes_waiting_for_the_conductor(conf):
    """Unset, the grace time covers what an API request may wait for
    (the broker, then the conductor); other processes keep 3 s; a value
    set is used everywhere, and a warning says what one shorter than
    [api]conductor_timeout cuts off."""
    assert conf.graceful_shutdown_timeout is None
    assert service.shutdown_timeout(conf) == 3
    assert service.shutdown_timeout(conf, serves_api=True) == 20 + 2 + 3
    assert service.short_shutdown_warning(conf) is None
    conf.set_override('conductor_timeout', 40, group='api')
    assert service.shutdown_timeout(conf, serves_api=True) == 40 + 2 + 3
    conf.set_override('graceful_shutdown_timeout', 10)
    assert service.shutdown_timeout(conf) == 10
    assert service.shutdown_timeout(conf, serves_api=True) == 10
    assert service.short_shutdown_warning(conf) == (
        '[DEFAULT]graceful_shutdown_timeout (10 s) is shorter than '
        '[api]conductor_timeout (40 s): a stop cuts off the writes still '
        'waiting for the conductor (unset, it is 45 s)')
    conf.set_override('graceful_shutdown_timeout', 40)
    assert service.short_shutdown_warning(conf) is None


def test_an_api_launcher_gives_in_flight_work_the_api_grace(conf):
    """A request still running after the 3 s other processes wait (a
    write waiting for the conductor) is waited for."""
    conf.set_override('conductor_timeout', 2, group='api')
    conf.set_override('broker_retries', 0, group='api')
    log = []
    launcher = service.Launcher(conf, 'test', serves_api=True)
    launcher.add(Recorder('api', log, wait_takes=4))
    thread, result = _run_until_ready(launcher)
    launcher.request_stop()
    thread.join(10)
    assert ('waited', 'api') in log
    assert result['status'] == 0


def test_a_stopping_service_publishes_the_notifications_queued(
        conf, monkeypatch):
    """A service ends with os._exit (``exit_process``), which runs no
    atexit handler: the notifications still queued when it stops are
    published by the stop itself, not lost."""
    publish = test_notifications.TestDriver.notify

    def slow(self, *args, **kwargs):
        time.sleep(0.02)    # a broker taking its time
        return publish(self, *args, **kwargs)

    monkeypatch.setattr(test_notifications.TestDriver, 'notify', slow)
    with notification_fixture.published(conf):
        for index in range(20):
            assert notify.send(conf, None, notify.DEVICE_ADD,
                               {'index': index})
        service.Launcher(conf, 'test')._stop_and_wait([])
        # Read without flushing: what the stop published.
        assert len(test_notifications.NOTIFICATIONS) == 20


_DEPRECATED_NAME = r'''
import sys
from oslo_messaging import opts as messaging_opts
from cyborg.common import service
conf = service.prepare(sys.argv[1:], prog='cyborg-conductor')
for group, opts in messaging_opts.list_opts():
    if group is None:   # as oslo.messaging's server does, where used
        conf.register_opts([opt for opt in opts
                            if opt.dest == 'executor_thread_pool_size'])
assert conf.executor_thread_pool_size == 7
'''


def test_a_deprecated_option_name_is_told_in_the_log(tmp_path):
    """Checking every option's value at start read each one before
    logging was set up: oslo.config's one warning about a deprecated
    name went to stderr then, and never to the service's log."""
    config = tmp_path / 'cyborg.conf'
    config.write_text('[DEFAULT]\nrpc_thread_pool_size = 7\n')
    log_file = tmp_path / 'cyborg.log'
    done = subprocess.run(
        [sys.executable, '-c', _DEPRECATED_NAME, '--config-file',
         str(config), '--log-file', str(log_file)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 'Option "rpc_thread_pool_size" from group "DEFAULT" is ' \
        'deprecated' in log_file.read_text()
