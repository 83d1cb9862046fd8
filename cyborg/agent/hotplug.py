"""Hotplug: udev events (subsystems pci and mdev) trigger a report at once.

A pyudev netlink monitor feeds events into a queue; a debounce thread
takes them and calls ``on_change`` once per burst: it waits
``[agent]hotplug_debounce`` seconds after the last event for more, but
never longer than ``MAX_DELAY`` after the first, so a device that appears
is reported within a second even while events keep coming (enabling 64
VFs makes hundreds of them).

A monitor that fails (``ENOBUFS`` when a burst of VF events overflows
the netlink socket's buffer), or that cannot be opened when the agent
starts, is opened again after a short back-off, and a report is asked
for at once: the events lost meanwhile are found by discovery rather
than waited for until the periodic report.

Tests put synthetic events into the same queue with ``inject()``, so the
debounce path they exercise is the production one.
"""

import dataclasses
import queue
import threading
import time

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

SUBSYSTEMS = ('pci', 'mdev')
# A device appearing, going, or changing driver (bind/unbind).
ACTIONS = ('add', 'remove', 'bind', 'unbind', 'change', 'move')
# Latest a burst's report is triggered after its first event, in seconds.
MAX_DELAY = 0.8
_POLL_TIMEOUT = 0.5
# Seconds before a failed udev monitor is opened again, doubled at each
# failure in a row up to MAX_REOPEN_DELAY.
REOPEN_DELAY = 1.0
MAX_REOPEN_DELAY = 60.0


@dataclasses.dataclass(frozen=True)
class Event:
    action: str
    subsystem: str
    sys_path: str


class HotplugWatcher:

    def __init__(self, conf, on_change):
        self.conf = conf
        self._on_change = on_change
        self._queue = queue.Queue()
        self._stopping = threading.Event()
        self._threads = []
        self._monitor = None
        self.monitoring = False      # True once the udev monitor is open
        self.bursts = 0              # on_change calls, for tests and logs

    def __str__(self):
        return 'hotplug watcher'

    # -- life cycle ----------------------------------------------------

    def start(self):
        self._stopping.clear()
        self._monitor = self._open_monitor()
        self._spawn(self._read_udev, 'cyborg-agent-udev')
        self._spawn(self._debounce, 'cyborg-agent-hotplug')

    def stop(self, timeout=5):
        self._stopping.set()
        self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []
        self._monitor = None
        self.monitoring = False

    def _spawn(self, target, name):
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- events ----------------------------------------------------------

    def inject(self, action, subsystem, sys_path):
        """Queue an event exactly as the udev monitor would."""
        self._queue.put(Event(action, subsystem, sys_path))

    def _open_monitor(self, quiet=False):
        try:
            import pyudev
            monitor = pyudev.Monitor.from_netlink(pyudev.Context())
            for subsystem in SUBSYSTEMS:
                monitor.filter_by(subsystem)
            monitor.start()
        except Exception as exc:
            # Without netlink (some containers) the periodic report still
            # runs; say so rather than fail the agent (once: it is tried
            # again and again).
            LOG.log(logging.DEBUG if quiet else logging.WARNING,
                    'Cannot watch udev (%s); devices are found by the '
                    'periodic report only until it can be.', exc)
            return None
        self.monitoring = True
        LOG.info('Watching udev subsystems %s', ', '.join(SUBSYSTEMS))
        return monitor

    def _read_udev(self):
        monitor = self._monitor
        delay = REOPEN_DELAY
        if monitor is None:             # it could not be opened at start
            monitor = self._reopen(None, delay)
            if monitor is None:
                return                  # stopping
        opened = time.monotonic()
        while not self._stopping.is_set():
            try:
                device = monitor.poll(timeout=_POLL_TIMEOUT)
            except Exception as exc:
                if time.monotonic() - opened > MAX_REOPEN_DELAY:
                    delay = REOPEN_DELAY    # it worked for a good while
                monitor = self._reopen(exc, delay)
                if monitor is None:
                    return              # stopping
                opened = time.monotonic()
                delay = min(delay * 2, MAX_REOPEN_DELAY)
                continue
            if device is not None and device.action in ACTIONS:
                self._queue.put(Event(device.action, device.subsystem,
                                      device.sys_path))

    def _reopen(self, exc, delay):
        """A new monitor in place of one that failed with ``exc`` (None:
        one that could not be opened at start), tried after ``delay``
        seconds and then, doubling, up to every
        MAX_REOPEN_DELAY until it opens; None when the watcher stops
        meanwhile."""
        self.monitoring = False
        if exc is not None:
            LOG.warning('udev monitor failed (%s); opening it again in '
                        '%.0f s.', exc, delay)
        tries = 0
        while not self._stopping.wait(delay):
            # Says why it cannot, the first time.
            monitor = self._open_monitor(quiet=tries > 0 or exc is None)
            tries += 1
            if monitor is not None:
                self._monitor = monitor
                # Events may have been lost (what ENOBUFS says): report.
                self._queue.put(Event('change', 'udev', 'monitor reopened'))
                return monitor
            delay = min(delay * 2, MAX_REOPEN_DELAY)
        return None

    def _debounce(self):
        while not self._stopping.is_set():
            event = self._queue.get()
            if event is None:
                continue
            events = [event]
            first = time.monotonic()
            debounce = self.conf.agent.hotplug_debounce
            while True:
                now = time.monotonic()
                wait = min(debounce, first + MAX_DELAY - now)
                if wait <= 0:
                    break
                try:
                    more = self._queue.get(timeout=wait)
                except queue.Empty:
                    break
                if more is None:
                    return
                events.append(more)
            self._fire(events)

    def _fire(self, events):
        LOG.info('%d udev event(s) (%s %s ...): reporting now', len(events),
                 events[0].action, events[0].sys_path)
        self.bursts += 1
        try:
            self._on_change()
        except Exception:
            LOG.exception('Hotplug report trigger failed')
