"""Health of PCI functions from sysfs, shared by every PCI driver.

``PCIHealth`` makes a driver ``HealthReporting`` with one line in its class
bases.  For each device it reads, under ``<sysfs_root>/bus/pci/devices/
<controlpath address>``:

- the function itself: gone from the tree -> ``gone`` (hot removal, a card
  that fell off the bus and was removed by the kernel);
- its ``driver`` link: missing for two checks in a row -> ``gone``, reason
  "unbound" (one check is tolerated because libvirt unbinds and rebinds
  passed-through functions, which may be caught in between), once this
  agent has seen the function bound to a host driver at a check (a
  passthrough stub, vfio-pci or pci-stub, does not count).  A
  function never bound is as its host wants it: VFs made with
  ``sriov_drivers_autoprobe`` off, functions handed to vfio-pci only
  while an instance has them;
- its PCIe AER statistics (``aer_dev_fatal``, ``aer_dev_nonfatal``,
  ``aer_dev_correctable``; kernel ABI ``sysfs-bus-pci-devices-aer_stats``):
  one ``<error name> <count>`` line per error kind, then a
  ``TOTAL_ERR_FATAL`` / ``TOTAL_ERR_NONFATAL`` / ``TOTAL_ERR_COR`` line.
  An increase of the fatal total since the previous check is ``fatal``, of
  the non-fatal total ``transient``; correctable errors are ``transient``
  only when more than ``[agent]aer_correctable_burst`` arrive within one
  check.  The first value seen is a baseline, never an event, and a total
  that goes down (the kernel reset it) is a new baseline.  Functions
  without AER statistics (no AER capability, old kernels) skip this source.

Drivers add sources of their own by overriding ``more_health`` (NVML,
FPGA error registers); it is not called for a function that is gone.  A
check that raises for a device keeps what it read before the error and
adds a ``transient`` reading "health check failed" (``base.CHECK_FAILED``):
never an ``ok`` one, which would clear the device's fault.  Its traceback
is logged when the device's checks start failing, then, while they keep
failing, one line every ``FAILING_REMINDER`` seconds (the others at
DEBUG), and one INFO line when a check of it works again: a check runs
every second.
"""

import os
import time

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import states
from cyborg.drivers import base
from cyborg.objects import health

LOG = logging.getLogger(__name__)

# file name -> (counter name in readings and metrics, TOTAL_ line label)
AER_FILES = {
    'aer_dev_fatal': ('aer_fatal', 'TOTAL_ERR_FATAL'),
    'aer_dev_nonfatal': ('aer_nonfatal', 'TOTAL_ERR_NONFATAL'),
    'aer_dev_correctable': ('aer_correctable', 'TOTAL_ERR_COR'),
}

# Consecutive checks without a driver before the function counts as
# unbound (see the module docstring).
UNBOUND_CHECKS = 2
# Drivers that only hold a function for passthrough: one that leaves
# them is given back, not failing (see the module docstring).
PASSTHROUGH_STUBS = frozenset(('vfio-pci', 'pci-stub'))
# Seconds between the log lines that say a device's checks still fail
# (see the module docstring).
FAILING_REMINDER = 600


def parse_aer(text):
    """``{error name: count}`` from an ``aer_dev_*`` file's text; the
    name may contain spaces, the count is the line's last word."""
    counts = {}
    for line in text.splitlines():
        name, _, count = line.strip().rpartition(' ')
        if name and count.isdigit():
            counts[name] = int(count)
    return counts


def _read_bytes(path):
    try:
        with open(path, 'rb', buffering=0) as f:
            return f.read()
    except OSError:
        return None


def _increases(before, after):
    """'Name +n, ...' for the error kinds that grew."""
    return ', '.join(f'{name} +{count - before.get(name, 0)}'
                     for name, count in sorted(after.items())
                     if count > before.get(name, 0))


class CounterTracker:
    """The last value of cumulative counters, to tell an increase since
    the previous check from what was already there."""

    def __init__(self):
        self._last = {}

    def delta(self, key, value):
        """How much counter ``key`` grew since the previous call: 0 the
        first time (a baseline) and when it went down (a reset)."""
        previous = self._last.get(key)
        self._last[key] = value
        if previous is None or value < previous:
            return 0
        return value - previous


def reading(device, severity, source, reason='', code=None, counters=None,
            deployable=None, event=False):
    """A ``health.Reading`` of ``device`` (a ``DriverDevice``); ``event``
    for errors new since the last check (``new_errors``)."""
    return health.Reading(device=device.key(), severity=severity,
                          reason=reason, deployable=deployable,
                          source=source, code=code,
                          counters=dict(counters or {}), event=event)


def _driver_name(driver_link):
    """The name of the function's kernel driver, None when unbound."""
    try:
        return os.path.basename(os.readlink(driver_link))
    except OSError:
        return None


class PCIHealth(base.HealthReporting):
    """``check_health`` for drivers whose devices are PCI functions."""

    def _pci_health_state(self):
        # Created lazily: drivers' constructors stay as they are.
        state = self.__dict__.get('_pci_health')
        if state is None:
            state = self.__dict__['_pci_health'] = {
                'counters': CounterTracker(), 'unbound': {}, 'aer': {},
                'paths': {}, 'sparing': {}, 'bound': set(),
                'failing': {}}
        return state

    def check_health(self, devices):
        readings = []
        for device in devices:
            readings.extend(self._device_health(device))
        return readings

    def new_errors(self, device, key, count, correctable=False):
        """Errors a cumulative counter ``key`` of ``device`` gained since
        the previous check (the first value is a baseline, a lower one a
        reset).  Correctable ones count only in bursts: 0 unless more than
        ``[agent]aer_correctable_burst`` arrived."""
        new = self._pci_health_state()['counters'].delta(
            (device.key(),) + tuple(key), count)
        if correctable and new <= self.conf.agent.aer_correctable_burst:
            return 0
        return new

    def read_sparingly(self, key, seconds, read):
        """``read()``, run again only once ``seconds`` have passed since
        it last ran for ``key``; in between, what it returned then.  For a
        source whose every read costs the device work (an admin command to
        an SSD, a firmware check)."""
        remembered = self._pci_health_state()['sparing']
        now = time.monotonic()
        read_at, value = remembered.get(key, (None, None))
        if read_at is None or now - read_at >= seconds:
            value = read()
            remembered[key] = (now, value)
        return value

    def more_health(self, device, counters):
        """Readings of driver-specific sources for ``device``, whose
        function is present; may add to ``counters`` (shared by all the
        device's readings).  Returns a list, empty when nothing is
        wrong."""
        return []

    def function_path(self, address):
        """The function's directory (a link into the device tree)."""
        return os.path.join(self.sysfs_root, 'bus', 'pci', 'devices',
                            address)

    def _device_health(self, device):
        counters = {}
        found = []
        try:
            found.extend(self._pci_readings(device, counters))
            if not any(r.severity == states.GONE for r in found):
                found.extend(self.more_health(device, counters))
        except Exception as exc:
            # Maybe a bug of ours, maybe the device: either way this check
            # read nothing more of it.  Not an ok reading, which would
            # clear a fault it still has (and start its re-admission):
            # a transient one that says so (base.CHECK_FAILED), which the
            # agent sends beside what the device read before.  What was
            # read before the failure (an AER event) is kept.
            self._check_failed(device.key(), exc)
            found.append(reading(
                device, states.TRANSIENT, 'pci',
                f'health check failed ({type(exc).__name__}; see the '
                f'agent\'s log): the device is not watched',
                base.CHECK_FAILED))
        else:
            self._check_worked(device.key())
        for each in found:
            each.counters = {**counters, **each.counters}
        if not any(each.deployable is None for each in found):
            # Only partitions' findings (an FPGA port's error register, a
            # MIG instance's XID), or none: the device itself reads well.
            # Left out, the device would keep its last reading, a fault
            # that has cleared included, and never be re-admitted.
            found.append(reading(device, states.OK, 'pci',
                                 counters=counters))
        return found

    def _check_failed(self, key, error):
        """Log a failed check of device ``key`` (see the module
        docstring): its traceback when its checks start failing, then a
        reminder at most every ``FAILING_REMINDER`` seconds."""
        failing = self._pci_health_state()['failing']
        now = time.monotonic()
        state = failing.get(key)
        if state is None:
            failing[key] = {'since': now, 'reminded': now, 'failures': 1}
            LOG.exception('Health check of %s failed; until it works '
                          'again, a reminder every %d s', key,
                          FAILING_REMINDER)
            return
        state['failures'] += 1
        if now - state['reminded'] >= FAILING_REMINDER:
            state['reminded'] = now
            LOG.warning('Health check of %s still fails (%d checks in '
                        '%.0f s): %s: %s', key, state['failures'],
                        now - state['since'], type(error).__name__,
                        exception.first_line(error))
        else:
            LOG.debug('Health check of %s failed again: %s: %s', key,
                      type(error).__name__, error)

    def _check_worked(self, key):
        """Log the end of a device's failing checks, if they were."""
        state = self._pci_health_state()['failing'].pop(key, None)
        if state is not None:
            LOG.info('Health check of %s works again (after %d failed '
                     'checks in %.0f s)', key, state['failures'],
                     time.monotonic() - state['since'])

    def _paths(self, address):
        """The function's directory, driver link and AER files (joined
        once: a check runs every second)."""
        paths = self._pci_health_state()['paths']
        found = paths.get(address)
        if found is None:
            path = self.function_path(address)
            found = paths[address] = (
                path, os.path.join(path, 'driver'),
                [(os.path.join(path, name), kind, label)
                 for name, (kind, label) in AER_FILES.items()])
        return found

    def _pci_readings(self, device, counters):
        address = device.controlpath_id.cpid_info
        path, driver_link, aer_files = self._paths(address)
        if not os.path.exists(path):
            # Whatever comes back at this address is watched afresh.
            state = self._pci_health_state()
            state['bound'].discard(address)
            state['unbound'].pop(address, None)
            return [reading(device, states.GONE, 'pci',
                            f'PCI function {address} disappeared',
                            'pci:gone')]
        found = []
        if self._unbound(address, driver_link):
            found.append(reading(
                device, states.GONE, 'pci',
                f'PCI function {address} is unbound: no kernel driver',
                'pci:unbound'))
        found.extend(self._aer_readings(device, aer_files, counters))
        return found

    def _note_driver(self, address, driver_link):
        """Note the function's driver; True when it has one."""
        driver = _driver_name(driver_link)
        if driver is not None and driver not in PASSTHROUGH_STUBS:
            self._pci_health_state()['bound'].add(address)
        return driver is not None

    def _unbound(self, address, driver_link):
        """Whether the function's driver has unbound (see the module
        docstring): only a function seen bound to a host driver can."""
        state = self._pci_health_state()
        seen = state['unbound']
        if self._note_driver(address, driver_link):
            seen.pop(address, None)
            return False
        if address not in state['bound']:
            return False
        seen[address] = seen.get(address, 0) + 1
        return seen[address] >= UNBOUND_CHECKS

    def _aer_readings(self, device, aer_files, counters):
        last = self._pci_health_state()['aer']
        key = device.key()
        found = []
        for path, kind, total_label in aer_files:
            raw = _read_bytes(path)
            previous = last.get((key, kind))
            if raw is None:
                last.pop((key, kind), None)
                continue
            if previous is not None and previous[0] == raw:
                # Unchanged since the last check (the common case): no
                # parsing.  The gauge is set all the same: the agent
                # removes a vanished device's series, and a device back
                # at its address with the same counts must show them.
                counters[kind] = previous[2]
                metrics.AGENT_AER_ERRORS.labels(key, kind).set(previous[2])
                continue
            counts = parse_aer(raw.decode('ascii', 'replace'))
            total = counts.pop(total_label, sum(counts.values()))
            last[(key, kind)] = (raw, counts, total)
            counters[kind] = total
            metrics.AGENT_AER_ERRORS.labels(key, kind).set(total)
            # The first value is a baseline, a lower one a reset.
            new = 0 if previous is None else total - previous[2]
            severity = self._aer_severity(kind, max(new, 0))
            if severity != states.OK:
                found.append(reading(
                    device, severity, 'aer',
                    f'PCIe AER {kind[4:]} errors: '
                    f'{_increases(previous[1], counts) or kind}',
                    f'aer:{kind[4:]}', event=True))
        return found

    def _aer_severity(self, kind, new):
        if not new:
            return states.OK
        if kind == 'aer_fatal':
            return states.FATAL
        if kind == 'aer_nonfatal':
            return states.TRANSIENT
        if new > self.conf.agent.aer_correctable_burst:
            return states.TRANSIENT
        return states.OK
