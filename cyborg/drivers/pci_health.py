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

What the checks compare (the functions seen bound, AER counts, the
counters of ``new_errors`` and ``health_counters``) is kept on disk
(``HealthRecord``), so that an agent restarted compares with what the
last one saw, within one boot: errors counted while no agent watched are
reported, and a function whose driver unbound meanwhile is unbound.  What
is kept of a device that left the agent's inventory goes, in memory and
on disk, before the next check (``keep_health_state``).

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

import json
import os
import time

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import files
from cyborg.common import metrics
from cyborg.common import said
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
_AER_KINDS = frozenset(kind for kind, _ in AER_FILES.values())

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
    the previous check from what was already there.  ``moved`` says a
    value changed since it was last cleared (the driver's ``HealthRecord``
    is then written); ``restore`` takes the values an earlier agent left
    on disk."""

    def __init__(self):
        self._last = {}
        # Values an earlier agent last saw (HealthRecord), until this
        # one reads each counter.
        self._carried = {}
        self.moved = False

    def delta(self, key, value, across_restart=True):
        """How much counter ``key`` grew since the previous call: 0 the
        first time (a baseline) and when it went down (a reset).  The
        first call after the agent started compares with the value an
        earlier agent last saw, if any: errors counted while no agent
        watched are new errors.  Not with ``across_restart`` false (a
        counter of correctable errors, a fault only in bursts within one
        check): those that piled up over the hours the agent was down
        are no burst."""
        previous = self._last.get(key)
        if previous is None:
            previous = self._carried.pop(key, None)
            if not across_restart:
                previous = None
        if value != self._last.get(key):
            self._last[key] = value
            self.moved = True
        if previous is None or value < previous:
            return 0
        return value - previous

    def values(self):
        """``{key: last value}``, those carried from an earlier agent and
        not read again yet included (to be saved)."""
        return {**self._carried, **self._last}

    def keep(self, device_keys):
        """Drop the counters of devices whose keys are not in
        ``device_keys`` (a counter's key begins with its device's)."""
        for values in (self._last, self._carried):
            gone = [key for key in values if key[0] not in device_keys]
            for key in gone:
                del values[key]
            self.moved = self.moved or bool(gone)

    def restore(self, values):
        """Take ``{key: value}`` an earlier agent last saw."""
        self._carried.update(values)


# The kernel's id of the running boot: a record of another boot is not
# this one's (the kernel counts errors from zero, drivers bind afresh,
# the agent may start before them).
BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id'


def boot_id():
    """This boot's id, None when it cannot be read."""
    try:
        with open(BOOT_ID_FILE) as f:
            return f.read().strip() or None
    except OSError:
        return None


class HealthRecord:
    """What a driver's health checks compare, kept on disk so that a
    restarted agent compares with what the last one saw
    (``$state_path/health-<driver>-<host>.json``): the functions seen
    bound to a host driver, the last value of each error counter, and
    each function's AER counts.  Without it, an uncorrectable error
    counted while the agent was down became the new baseline, never
    reported, and a function whose driver unbound meanwhile read well
    (never seen bound) and was re-admitted with no driver.

    Writes are atomic (``files.write_json``: temporary file, fsync,
    rename), the state directory made if need be, as the agent's report
    cache's; made once per driver as the agent's checks start, it
    removes the temporary files an agent killed mid-write left.  A
    record that cannot be read, whatever the reason, or that another
    host or another boot wrote, is no record: the agent starts from
    fresh baselines, as it did before it kept any.  A write that fails
    is said once and tried again at the next check."""

    def __init__(self, path, host):
        self.path = path
        self.host = host
        self._problems = said.Problems(LOG)  # what was last wrong
        files.remove_leftovers(path)

    def load(self):
        """``(bound addresses, {counter key: value}, {(device key, AER
        kind): (counts, total)})`` of the record; empty ones when there
        is none to use."""
        empty = set(), {}, {}
        try:
            with open(self.path) as f:
                record = json.load(f)
            if not isinstance(record, dict):
                raise ValueError('not a JSON object')
            if record.get('host') != self.host:
                raise ValueError(f'the record of host '
                                 f'{str(record.get("host"))[:80]!r}')
            if record.get('boot_id') != boot_id():
                LOG.info('Health record %s is of an earlier boot: health '
                         'counters start from fresh baselines.', self.path)
                return empty
            found = _parsed(record)
        except FileNotFoundError:
            return empty
        except Exception as exc:
            # Whatever the reason: the checks must go on.
            self._say(f'{type(exc).__name__}: {str(exc)[:200]}',
                      'Ignoring unreadable health record %s (%s): health '
                      'counters start from fresh baselines.')
            return empty
        return found

    def save(self, bound, counters, aer):
        """Write the record; False when it could not be (said once)."""
        record = {
            'host': self.host, 'boot_id': boot_id(),
            'bound': sorted(bound),
            # Keys of names and whole counts only: what ``load`` takes
            # back (a counter keyed otherwise starts from a baseline).
            'counters': [[list(key), value]
                         for key, value in sorted(counters.items(),
                                                  key=repr)
                         if all(isinstance(k, str) for k in key)
                         and _count(value)],
            'aer': [[key, kind, counts, total] for (key, kind), (
                counts, total) in sorted(aer.items())]}
        try:
            files.write_json(self.path, record)
        except OSError as exc:
            # Its strerror: the message names a temporary file, another
            # at every try.
            self._say(exc.strerror or str(exc), 'Cannot write the health '
                      'record %s (%s): a restarted agent would not see the '
                      'errors counted while it was down; trying again at '
                      'the next check.')
            return False
        if self._problems.solved() is not None:
            LOG.info('Health record %s written again.', self.path)
        return True

    def _say(self, problem, message):
        self._problems.say(problem, message, self.path, problem)


def _parsed(record):
    """The content of a health record (see ``HealthRecord.load``), or
    ValueError."""
    bound = record['bound']
    if not all(isinstance(a, str) for a in bound):
        raise ValueError('bad bound list')
    counters = {}
    for key, value in record['counters']:
        if not (isinstance(key, list) and key and
                all(isinstance(k, str) for k in key) and _count(value)):
            raise ValueError(f'bad counter {str(key)[:80]}')
        counters[tuple(key)] = value
    aer = {}
    for key, kind, counts, total in record['aer']:
        if not (isinstance(key, str) and kind in _AER_KINDS and
                isinstance(counts, dict) and _count(total) and
                all(isinstance(n, str) and _count(c)
                    for n, c in counts.items())):
            raise ValueError(f'bad AER counts of {str(key)[:80]}')
        aer[(key, kind)] = (counts, total)
    return set(bound), counters, aer


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool)


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
        # Created lazily: drivers' constructors stay as they are.  What
        # the checks compare starts from what the last agent saw
        # (``HealthRecord``).
        state = self.__dict__.get('_pci_health')
        if state is None:
            record = HealthRecord(os.path.join(
                self.conf.state_path,
                f'health-{self.name or type(self).__name__}-{self.host}'
                f'.json'), self.host)
            bound, counters, aer = record.load()
            state = self.__dict__['_pci_health'] = {
                'counters': CounterTracker(), 'unbound': {},
                # (device key, kind) -> (raw text, counts, total); raw
                # None: as the last agent saw them.
                'aer': {k: (None,) + v for k, v in aer.items()},
                'paths': {}, 'sparing': {}, 'bound': bound,
                'failing': {}, 'record': record, 'moved': False,
                # The keys of the devices kept (keep_health_state) and
                # of the one being checked (whose read_sparingly keys).
                'kept': None, 'checking': None}
            state['counters'].restore(counters)
        return state

    def health_counters(self):
        """The ``CounterTracker`` of this driver's checks, kept in its
        health record: for a source of the driver's that compares
        counters of its own (NVML's uncorrectable ECC count)."""
        return self._pci_health_state()['counters']

    def keep_health_state(self, devices):
        """Drop what the checks keep of devices not among ``devices``
        (every device of the driver the agent watches now: its health
        monitor calls this before each check, on the driver's thread),
        in memory and in the health record: a device that left the
        inventory is watched afresh if it comes back, as one gone from
        the bus is.  Kept, each device that ever came stayed, on disk
        too.  A set of the devices' keys when the same devices are
        watched as before."""
        state = self._pci_health_state()
        keys = frozenset(d.key() for d in devices)
        if keys == state['kept']:
            return
        state['kept'] = keys
        addresses = {d.controlpath_id.cpid_info for d in devices}
        state['counters'].keep(keys)
        before = len(state['aer']), len(state['bound'])
        state['aer'] = {key: value for key, value in state['aer'].items()
                        if key[0] in keys}
        state['bound'] &= addresses
        if (len(state['aer']), len(state['bound'])) != before:
            state['moved'] = True
        for name, kept in (('paths', addresses), ('unbound', addresses),
                           ('failing', keys)):
            state[name] = {key: value for key, value in state[name].items()
                           if key in kept}
        state['sparing'] = {
            key: value for key, value in state['sparing'].items()
            if value[2] is None or value[2] in keys}

    def check_health(self, devices):
        readings = []
        for device in devices:
            readings.extend(self._device_health(device))
        self._save_health_record()
        return readings

    def _save_health_record(self):
        """Write what the checks compare, if it moved (errors counted, a
        function seen bound or gone): rarely, not at every check."""
        state = self._pci_health_state()
        counters = state['counters']
        if not (state['moved'] or counters.moved):
            return
        aer = {key: (counts, total)
               for key, (_raw, counts, total) in state['aer'].items()}
        if state['record'].save(state['bound'], counters.values(), aer):
            state['moved'] = counters.moved = False

    def new_errors(self, device, key, count, correctable=False):
        """Errors a cumulative counter ``key`` of ``device`` gained since
        the previous check (the first value is a baseline, a lower one a
        reset; after the agent restarts, the value the last agent saw).
        Correctable ones count only in bursts: 0 unless more than
        ``[agent]aer_correctable_burst`` arrived."""
        new = self._pci_health_state()['counters'].delta(
            (device.key(),) + tuple(key), count,
            across_restart=not correctable)
        if correctable and new <= self.conf.agent.aer_correctable_burst:
            return 0
        return new

    def read_sparingly(self, key, seconds, read):
        """``read()``, run again only once ``seconds`` have passed since
        it last ran for ``key``; in between, what it returned then.  For a
        source whose every read costs the device work (an admin command to
        an SSD, a firmware check)."""
        state = self._pci_health_state()
        remembered = state['sparing']
        now = time.monotonic()
        read_at, value, _device = remembered.get(key, (None, None, None))
        if read_at is None or now - read_at >= seconds:
            value = read()
            # With the device it was read for, if a check of one reads it
            # (what keep_health_state drops with the device).
            remembered[key] = (now, value, state['checking'])
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
        state = self._pci_health_state()
        state['checking'] = device.key()
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
        finally:
            state['checking'] = None
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
            if address in state['bound']:
                state['bound'].discard(address)
                state['moved'] = True
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
            state = self._pci_health_state()
            if address not in state['bound']:
                state['bound'].add(address)
                state['moved'] = True
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
        state = self._pci_health_state()
        last = state['aer']
        key = device.key()
        found = []
        for path, kind, total_label in aer_files:
            raw = _read_bytes(path)
            previous = last.get((key, kind))
            if raw is None:
                if last.pop((key, kind), None) is not None:
                    state['moved'] = True
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
            if previous is None or (previous[1], previous[2]) != (
                    counts, total):
                state['moved'] = True
            counters[kind] = total
            metrics.AGENT_AER_ERRORS.labels(key, kind).set(total)
            # The first value is a baseline, a lower one a reset; after
            # the agent restarts, the last agent's counts are the
            # baseline (errors counted while it was down are new), but
            # for correctable ones (a burst is within one check).
            new = 0 if previous is None or (
                previous[0] is None and kind == 'aer_correctable') \
                else total - previous[2]
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
