import os
import threading
import time

from cyborg.agent import hotplug


class _Counter:
    def __init__(self):
        self.calls = []
        self.event = threading.Event()

    def __call__(self):
        self.calls.append(time.monotonic())
        self.event.set()


def _watcher(conf, debounce=0.2):
    conf.set_override('hotplug_debounce', debounce, 'agent')
    counter = _Counter()
    return hotplug.HotplugWatcher(conf, counter), counter


def test_real_udev_monitor_starts_and_stops(conf):
    watcher, _ = _watcher(conf)
    watcher.start()
    try:
        assert watcher.monitoring
        assert len(watcher._threads) == 2
    finally:
        watcher.stop()
    assert not watcher.monitoring
    assert watcher._threads == []


def test_a_burst_yields_one_call_within_a_second(conf):
    watcher, counter = _watcher(conf, debounce=0.2)
    watcher.start()
    try:
        start = time.monotonic()
        for n in range(50):
            watcher.inject('add', 'pci', '/devices/pci0000:3b/0000:3b:00.%d'
                           % (n % 8))
        assert counter.event.wait(1.0)
        assert counter.calls[0] - start < 1.0
        time.sleep(0.4)
        assert len(counter.calls) == 1
    finally:
        watcher.stop()


def test_a_steady_stream_still_reports_within_a_second(conf):
    watcher, counter = _watcher(conf, debounce=0.3)
    watcher.start()
    try:
        start = time.monotonic()
        while time.monotonic() - start < 1.2:
            watcher.inject('bind', 'pci', '/devices/x')
            time.sleep(0.05)
        assert counter.calls and counter.calls[0] - start < 1.0
    finally:
        watcher.stop()


def test_separate_events_make_separate_calls(conf):
    watcher, counter = _watcher(conf, debounce=0.05)
    watcher.start()
    try:
        watcher.inject('add', 'mdev', '/devices/a')
        assert counter.event.wait(1.0)
        counter.event.clear()
        watcher.inject('remove', 'mdev', '/devices/a')
        assert counter.event.wait(1.0)
        assert len(counter.calls) == 2
    finally:
        watcher.stop()


def _break(monitor):
    """Make the real udev monitor's next poll fail as a netlink socket in
    trouble does (libudev's receive raises OSError): its descriptor now
    reads from /dev/null, which is no socket."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, monitor.fileno())
    finally:
        os.close(null)


def test_a_failed_udev_monitor_is_opened_again(conf, monkeypatch, caplog):
    """A monitor that fails (ENOBUFS in a burst of VF events) is opened
    again after a back-off, and a report is asked for: events were lost."""
    caplog.set_level('WARNING', logger='cyborg.agent.hotplug')
    monkeypatch.setattr(hotplug, 'REOPEN_DELAY', 0.1)
    watcher, counter = _watcher(conf, debounce=0.05)
    watcher.start()
    try:
        broken = watcher._monitor
        _break(broken)
        assert counter.event.wait(3.0)
        assert watcher.monitoring and watcher._monitor is not broken
        assert 'udev monitor failed' in caplog.text
        # The new monitor is read: it keeps working, and so do reports.
        counter.event.clear()
        time.sleep(2 * hotplug._POLL_TIMEOUT)
        assert all(t.is_alive() for t in watcher._threads)
        watcher.inject('add', 'pci', '/devices/x')
        assert counter.event.wait(1.0)
        assert len(counter.calls) == 2
    finally:
        watcher.stop()


def test_a_monitor_that_cannot_be_opened_at_start_is_tried_again(
        conf, monkeypatch, caplog):
    """udev's netlink socket refused when the agent starts (early boot, a
    transient failure): the monitor was never tried again, and hotplug
    waited on the periodic report for the agent's whole life."""
    import pyudev

    caplog.set_level('DEBUG', logger='cyborg.agent.hotplug')
    monkeypatch.setattr(hotplug, 'REOPEN_DELAY', 0.1)
    real = pyudev.Monitor.from_netlink
    refusals = []

    def from_netlink(*args, **kwargs):
        if len(refusals) < 3:
            refusals.append(1)
            raise OSError(111, 'Connection refused')
        return real(*args, **kwargs)
    monkeypatch.setattr(pyudev.Monitor, 'from_netlink', from_netlink)
    watcher, counter = _watcher(conf, debounce=0.05)
    watcher.start()
    try:
        assert not watcher.monitoring
        # Opened on the third try; what it missed is reported.
        assert counter.event.wait(5.0)
        assert watcher.monitoring and len(refusals) == 3
        warned = [r for r in caplog.records if r.levelname == 'WARNING']
        assert len(warned) == 1, caplog.text
        counter.event.clear()
        watcher.inject('add', 'pci', '/devices/x')
        assert counter.event.wait(1.0)
    finally:
        watcher.stop()


def test_stopping_while_the_monitor_waits_to_reopen(conf, monkeypatch):
    monkeypatch.setattr(hotplug, 'REOPEN_DELAY', 3600)
    watcher, counter = _watcher(conf)
    watcher.start()
    _break(watcher._monitor)
    time.sleep(2 * hotplug._POLL_TIMEOUT)
    assert not watcher.monitoring
    started = time.monotonic()
    threads = list(watcher._threads)
    watcher.stop()
    assert time.monotonic() - started < 1.0
    assert not any(t.is_alive() for t in threads)
    assert counter.calls == []
