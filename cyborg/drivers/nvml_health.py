"""NVIDIA GPU health and usage through NVML, in one long-lived session.

``NvmlWatcher`` keeps NVML initialised between checks (``nvmlInit`` once,
handles and one event set per GPU kept), so a check costs a handful of
NVML calls per GPU and never blocks: events are drained with a zero
timeout.  Its sources, each skipped for a GPU that answers
``NVML_ERROR_NOT_SUPPORTED``:

- XID events (``nvmlEventTypeXidCriticalError``), classified by
  ``cyborg.drivers.xid``; an application XID that names a MIG GPU
  instance concerns only that instance's deployable, any other XID the
  whole GPU.  Double bit ECC events are ``fatal``.  Each fatal XID's
  time is a gauge (``AGENT_GPU_LAST_FATAL_XID``), for alerts;
- the volatile uncorrected ECC count: an increase is ``fatal``; given
  the driver's ``PCIHealth.health_counters``, an increase while the
  agent was down too;
- retired pages pending (pre-Ampere): ``transient`` until a GPU reset;
- row remapping (Ampere and later): a failure is ``fatal``, a pending
  remap ``transient`` until a GPU reset.  XID 63, which the GPU raises
  as a remap (or page retirement) becomes pending, adds no reading of its
  own while a check reads that pending remap or retirement: one remap is
  one fault (``_one_fault_per_remap``), the XID still counted;
- PCIe replays (the link layer resending what the other end did not
  acknowledge): counted, and ``transient`` when more than the correctable
  burst (``[agent]aer_correctable_burst``) arrive between two checks, as
  correctable AER errors are.  A GPU passed through to a virtual machine
  shows no AER statistics inside it (seen on an H100 and an H200): there
  this is the one sign of a failing link;
- hardware slowdown: the clock event reasons (what nvidia-smi lists as
  ``clocks_event_reasons``) sampled at each check.  The GPU halving its
  own clocks for heat (``hw_thermal_slowdown``) or an external power
  brake (``hw_power_brake_slowdown``) is ``transient`` while it lasts:
  each onset is a fault, so a GPU that keeps starting to do it (failing
  cooling or power) leaves the schedule after ``[health]suspect_threshold``
  onsets within ``[health]suspect_window``, and one that stays slowed
  down is suspect until ``[health]max_suspect_time``, then out.  NVML
  may also show the generic ``hw_slowdown`` for a moment while the GPU
  changes performance state, so that one counts only when two checks in
  a row see it.  The software
  limits (``sw_power_cap``, ``sw_thermal_slowdown``) are a busy GPU
  working within its budget (an H200 running matrix products sits at its
  700 W cap): usage, not health;
- ``NVML_ERROR_GPU_IS_LOST`` from any call: ``fatal``, the GPU has fallen
  off the bus; its handle is dropped and looked up again next time;
- any other NVML error of a source (not "not supported"): a reading of
  its own, the other sources still read.  ``NVML_ERROR_RESET_REQUIRED``
  (what NVML answers after an uncontained ECC error, XID 95) is
  ``fatal``: the GPU needs a reset; others (``NVML_ERROR_UNKNOWN``...)
  are ``transient`` while they last.  Never an "all well".

Errors that mean the session itself is broken (driver unloaded or
reloaded, library mismatch) close it; the next check initialises NVML
again.  When NVML cannot start at all (no driver), NVML sources are
skipped and retried every ``RETRY_INIT`` seconds.

Usage (``usage``): utilization and memory in use, and where the GPU
answers them, its temperature, power draw and active clock event reasons.
"""

import collections
import threading
import time

from oslo_log import log as logging

from cyborg.common import metrics
from cyborg.common import states
from cyborg.drivers import xid
from cyborg.drivers.pci_health import CounterTracker, reading

LOG = logging.getLogger(__name__)

RETRY_INIT = 60.0
# Seconds before a failed registration of a GPU's events is tried again,
# doubled at each failure in a row up to RETRY_INIT.
EVENTS_RETRY = 1.0
# Events drained from one GPU per check: bounds a check's time when a
# workload floods XIDs; the rest are read at the next check.
MAX_EVENTS = 64
# gpuInstanceId / computeInstanceId when the event names no MIG instance.
NO_INSTANCE = 0xFFFFFFFF

_CODES = {
    'NOT_SUPPORTED': 3, 'NOT_FOUND': 6, 'TIMEOUT': 10, 'GPU_IS_LOST': 15,
    'UNINITIALIZED': 1, 'DRIVER_NOT_LOADED': 9, 'LIBRARY_NOT_FOUND': 12,
    'LIB_RM_VERSION_MISMATCH': 18, 'RESET_REQUIRED': 16,
    'FUNCTION_NOT_FOUND': 13, 'ARGUMENT_VERSION_MISMATCH': 25,
}
# Errors of the version 2 memory query that mean "ask version 1" (a
# library or driver older than the query).
_NO_MEMORY_V2 = ('FUNCTION_NOT_FOUND', 'ARGUMENT_VERSION_MISMATCH',
                 'NOT_SUPPORTED')
# What each health source reads, for the reason of an NVML error.
_SOURCE_NAMES = {
    '_events': 'XID events', '_ecc': 'uncorrected ECC count',
    '_retired_pages': 'retired pages', '_remapped_rows': 'remapped rows',
    '_pcie_replays': 'PCIe replay counter', '_slowdown': 'clock events',
}
# The XID a GPU raises as a row remap or page retirement becomes pending,
# and the conditions that report such a pending one until the GPU's reset.
_REMAP_XID = 'xid:63'
_PENDING_REMAP = ('ecc:row_remap_pending', 'ecc:retired_pages_pending')
# Errors after which the session is closed and opened again.
_SESSION_ERRORS = ('UNINITIALIZED', 'DRIVER_NOT_LOADED', 'LIBRARY_NOT_FOUND',
                   'LIB_RM_VERSION_MISMATCH')


# NVML's clock event reasons (nvml.h ``nvmlClocksEventReason*``, formerly
# ``...ThrottleReason*``) by the name nvidia-smi gives each in its XML
# (``clocks_event_reason_<name>``).
CLOCK_EVENTS = {
    'gpu_idle': 0x1,
    'applications_clocks_setting': 0x2,
    'sw_power_cap': 0x4,
    'hw_slowdown': 0x8,
    'sync_boost': 0x10,
    'sw_thermal_slowdown': 0x20,
    'hw_thermal_slowdown': 0x40,
    'hw_power_brake_slowdown': 0x80,
    'display_clocks_setting': 0x100,
}
# The hardware slowdowns that are a fault at once, most telling first;
# the generic one only when two checks in a row see it.
_HW_SLOWDOWNS = ('hw_thermal_slowdown', 'hw_power_brake_slowdown')
_HW_SLOWDOWN = 'hw_slowdown'
# The query's name from driver 535 on, then its older name.
_CLOCK_EVENTS_QUERIES = ('nvmlDeviceGetCurrentClocksEventReasons',
                         'nvmlDeviceGetCurrentClocksThrottleReasons')
_MILLIWATTS_PER_WATT = 1000.0


class _Unsupported(Exception):
    """A source NVML does not support on this GPU."""


class _Interrupted(Exception):
    """An NVML error ``error`` while draining a GPU's events, after the
    events in ``found`` were drained (they are not in the event set
    any more: dropped with the error, they would never be reported)."""

    def __init__(self, error, found):
        super().__init__(error)
        self.error = error
        self.found = found


class _Gpu:

    def __init__(self, handle):
        self.handle = handle
        self.events = None           # the event set, None: no events
        self.registered = False      # events registered, or unsupported
        self.register_failures = 0   # failed registrations in a row
        self.register_at = 0.0       # when to try registering again
        self.hw_slowdown = False     # the last check saw hw_slowdown


class NvmlWatcher:
    """Health readings and usage of NVIDIA GPUs (see the module)."""

    def __init__(self, module, correctable_burst=10, counters=None):
        self._nvml = module
        # PCIe replays between two checks above which the link is faulty.
        self._correctable_burst = correctable_burst
        self._lock = threading.Lock()
        self._ready = False
        self._retry_at = 0.0
        self._gpus = {}              # PCI address -> _Gpu
        self._unknown = {}           # PCI address -> when to look again
        # The uncorrectable ECC count and PCIe replays last read: the
        # driver's (``PCIHealth.health_counters``), kept on disk so that
        # errors counted while the agent was down are reported.
        self._counters = counters if counters is not None else (
            CounterTracker())
        self._xids = collections.Counter()   # device key -> XIDs seen
        self._error = getattr(module, 'NVMLError', OSError)
        self._codes = {name: getattr(module, 'NVML_ERROR_' + name, value)
                       for name, value in _CODES.items()}
        # The version 2 memory query, None once it proved absent.
        self._memory_v2 = getattr(module, 'nvmlMemory_v2', None)
        self._clock_events_query = next(
            (name for name in _CLOCK_EVENTS_QUERIES
             if hasattr(module, name)), _CLOCK_EVENTS_QUERIES[0])

    # -- session -----------------------------------------------------------

    def _start(self):
        if self._ready:
            return True
        if self._nvml is None or time.monotonic() < self._retry_at:
            return False
        try:
            self._nvml.nvmlInit()
        except (self._error, OSError) as exc:
            LOG.info('NVML unavailable (%s): GPU health from sysfs only; '
                     'retrying in %ds.', exc, RETRY_INIT)
            self._retry_at = time.monotonic() + RETRY_INIT
            return False
        self._ready = True
        return True

    def close(self):
        """End the session (the next check starts a new one)."""
        with self._lock:
            self._close()

    def _close(self):
        if self._ready:
            for gpu in self._gpus.values():
                self._free_events(gpu)
            try:
                self._nvml.nvmlShutdown()
            except self._error as exc:
                LOG.debug('NVML shutdown failed: %s', exc)
        self._ready = False
        self._gpus.clear()
        self._unknown.clear()

    def _is(self, exc, *names):
        return getattr(exc, 'value', None) in {self._codes[n] for n in names}

    def _gpu(self, address):
        gpu = self._gpus.get(address)
        if gpu is not None:
            self._watch_events(address, gpu)
            return gpu
        if time.monotonic() < self._unknown.get(address, 0):
            return None
        try:
            handle = self._nvml.nvmlDeviceGetHandleByPciBusId(address)
        except self._error as exc:
            if not self._is(exc, 'NOT_FOUND', 'NOT_SUPPORTED'):
                raise
            # Not an NVML GPU now (e.g. bound to vfio-pci for passthrough).
            self._unknown[address] = time.monotonic() + RETRY_INIT
            return None
        gpu = self._gpus[address] = _Gpu(handle)
        self._watch_events(address, gpu)
        return gpu

    def _watch_events(self, address, gpu):
        """Register ``gpu``'s events unless that is done.  A failure
        (NVML_ERROR_UNKNOWN, say) is tried again at later checks, backing
        off, while the GPU's other sources are read: given up at once, the
        GPU's XIDs would go unseen until the agent restarts.  A GPU lost
        or a broken session is the caller's to handle."""
        if gpu.registered or time.monotonic() < gpu.register_at:
            return
        try:
            gpu.events = self._register_events(gpu.handle)
        except self._error as exc:
            if self._is(exc, 'GPU_IS_LOST', *_SESSION_ERRORS):
                raise
            delay = min(EVENTS_RETRY * 2 ** gpu.register_failures,
                        RETRY_INIT)
            gpu.register_failures += 1
            gpu.register_at = time.monotonic() + delay
            LOG.warning('NVML cannot register the events of GPU %s (%s): '
                        'its XIDs are not watched; retrying in %ds.',
                        address, exc, delay)
            return
        if gpu.register_failures:
            LOG.info('NVML registered the events of GPU %s after %d '
                     'failures.', address, gpu.register_failures)
        gpu.registered = True

    def _register_events(self, handle):
        nvml = self._nvml
        wanted = (nvml.nvmlEventTypeXidCriticalError |
                  nvml.nvmlEventTypeDoubleBitEccError)
        try:
            supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
        except self._error as exc:
            if not self._is(exc, 'NOT_SUPPORTED'):
                raise
            supported = nvml.nvmlEventTypeXidCriticalError
        if not wanted & supported:
            return None
        events = nvml.nvmlEventSetCreate()
        try:
            nvml.nvmlDeviceRegisterEvents(handle, wanted & supported, events)
        except self._error as exc:
            nvml.nvmlEventSetFree(events)
            if not self._is(exc, 'NOT_SUPPORTED'):
                raise
            return None
        return events

    def _free_events(self, gpu):
        if gpu.events is not None:
            try:
                self._nvml.nvmlEventSetFree(gpu.events)
            except self._error:
                pass
            gpu.events = None

    def _call(self, name, *args):
        try:
            return getattr(self._nvml, name)(*args)
        except self._error as exc:
            if self._is(exc, 'NOT_SUPPORTED'):
                raise _Unsupported(name) from exc
            raise

    def _guarded(self, device, action, default):
        """Run ``action(gpu)`` for ``device``'s GPU, turning NVML failures
        into readings (``default`` when there is nothing to say)."""
        with self._lock:
            if not self._start():
                return default
            address = device.controlpath_id.cpid_info
            try:
                gpu = self._gpu(address)
                return default if gpu is None else action(gpu)
            except self._error as exc:
                return self._failed(device, address, exc, default)

    def _failed(self, device, address, exc, default):
        if self._is(exc, 'GPU_IS_LOST'):
            gpu = self._gpus.pop(address, None)
            if gpu is not None:
                self._free_events(gpu)
            if isinstance(default, list):
                return [reading(device, states.FATAL, 'nvml',
                                'GPU has fallen off the bus',
                                'nvml:gpu_lost')]
            return default
        if self._is(exc, *_SESSION_ERRORS):
            LOG.warning('NVML session lost (%s); starting a new one.', exc)
            self._close()
            return default
        LOG.warning('NVML cannot read GPU %s: %s', address, exc)
        if isinstance(default, list):
            return [self._error_reading(device, exc, ['the GPU'])]
        return default

    def _error_reading(self, device, exc, what):
        """The reading of an NVML error ``exc`` (not "not supported", "GPU
        lost" or a broken session) answered to the queries of ``what``
        (names, for people): never read as "all well".  A GPU that needs a
        reset (an uncontained ECC error, XID 95, makes NVML answer
        RESET_REQUIRED to every query after it) is ``fatal``; any other
        error ``transient`` while it lasts (a condition: the GPU is
        suspect, and out once that has lasted [health]max_suspect_time)."""
        if self._is(exc, 'RESET_REQUIRED'):
            return reading(device, states.FATAL, 'nvml',
                           f'NVML answers "{exc}" to {", ".join(what)}: '
                           f'the GPU needs a reset', 'nvml:reset_required')
        return reading(device, states.TRANSIENT, 'nvml',
                       f'NVML cannot read {", ".join(what)}: {exc}',
                       'nvml:error')

    # -- health ------------------------------------------------------------

    def check(self, device, counters):
        """Readings of ``device`` (a GPU ``DriverDevice``) from NVML,
        adding its NVML counters to ``counters``; [] when NVML has nothing
        to say (all well, or not an NVML GPU).

        Each source is read on its own: an NVML error of one (other than
        "not supported", which skips it) is a reading of its own
        (``_error_reading``) and the others are still read, so that what
        they found (XIDs already drained from the event set) is kept.  A
        GPU lost or a broken session ends the check with what was read
        so far."""
        found = []

        def sources(gpu):
            errors = {}                  # NVML error code -> (error, what)
            for source in (self._events, self._ecc, self._retired_pages,
                           self._remapped_rows, self._pcie_replays,
                           self._slowdown):
                try:
                    found.extend(source(device, gpu, counters))
                except _Unsupported:
                    pass
                except _Interrupted as interrupted:
                    found.extend(interrupted.found)
                    self._source_failed(interrupted.error, source, errors)
                except self._error as exc:
                    self._source_failed(exc, source, errors)
            for exc, what in errors.values():
                LOG.warning('NVML cannot read the %s of GPU %s: %s',
                            ', '.join(what),
                            device.controlpath_id.cpid_info, exc)
                found.append(self._error_reading(device, exc, what))
            return []
        failed = self._guarded(device, sources, [])
        return _one_fault_per_remap(found) + failed

    def _source_failed(self, exc, source, errors):
        """Note NVML error ``exc`` of ``source`` in ``errors`` (one reading
        per error, naming every source that got it); a GPU lost or a
        broken session is raised on, for ``_guarded``."""
        if self._is(exc, 'GPU_IS_LOST', *_SESSION_ERRORS):
            raise exc
        what = _SOURCE_NAMES.get(source.__name__, source.__name__)
        errors.setdefault(getattr(exc, 'value', str(exc)),
                          (exc, []))[1].append(what)

    def _events(self, device, gpu, counters):
        if gpu.events is None:
            return []
        seen = collections.Counter()
        failure = None
        for _ in range(MAX_EVENTS):
            try:
                data = self._nvml.nvmlEventSetWait(gpu.events, 0)
            except self._error as exc:
                if not self._is(exc, 'TIMEOUT'):
                    failure = exc
                break
            event = self._event(device, data)
            if event is not None:
                seen[event] += 1
        counters['xid'] = self._xids[device.key()]
        found = []
        for (severity, code, reason, deployable), count in seen.items():
            if count > 1:
                reason += f' (x{count})'
            found.append(reading(device, severity, 'nvml', reason, code,
                                 deployable=deployable, event=True))
        if failure is not None:
            raise _Interrupted(failure, found)
        return found

    def _event(self, device, data):
        """``(severity, code, reason, deployable)`` of one NVML event."""
        nvml = self._nvml
        if data.eventType & nvml.nvmlEventTypeDoubleBitEccError:
            return (states.FATAL, 'ecc:double_bit',
                    'Double bit ECC error', None)
        if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
            return None
        number = int(data.eventData)
        severity, description = xid.classify(number)
        self._xids[device.key()] += 1
        metrics.AGENT_XID_EVENTS.labels(device.key(), str(number),
                                        severity).inc()
        if severity == states.FATAL:
            metrics.AGENT_GPU_LAST_FATAL_XID.labels(
                device.key(), str(number)).set(time.time())
        deployable = None
        instance = getattr(data, 'gpuInstanceId', NO_INSTANCE)
        if severity == states.APPLICATION and instance != NO_INSTANCE:
            compute = getattr(data, 'computeInstanceId', NO_INSTANCE)
            deployable = _mig_deployable(
                device, instance, 0 if compute == NO_INSTANCE else compute)
        return (severity, f'xid:{number}', f'XID {number}: {description}',
                deployable)

    def _ecc(self, device, gpu, counters):
        nvml = self._nvml
        count = self._call('nvmlDeviceGetTotalEccErrors', gpu.handle,
                           nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                           nvml.NVML_VOLATILE_ECC)
        counters['ecc_uncorrected'] = count
        new = self._counters.delta((device.key(), 'ecc_uncorrected'), count)
        if not new:
            return []
        return [reading(device, states.FATAL, 'nvml',
                        f'{new} new uncorrectable ECC errors',
                        'ecc:uncorrected', event=True)]

    def _retired_pages(self, device, gpu, counters):
        pending = self._call('nvmlDeviceGetRetiredPagesPendingStatus',
                             gpu.handle)
        if not pending:
            return []
        return [reading(device, states.TRANSIENT, 'nvml',
                        'Retired pages pending: the GPU needs a reset',
                        'ecc:retired_pages_pending')]

    def _remapped_rows(self, device, gpu, counters):
        correctable, uncorrectable, pending, failure = self._call(
            'nvmlDeviceGetRemappedRows', gpu.handle)
        counters['remapped_rows_correctable'] = correctable
        counters['remapped_rows_uncorrectable'] = uncorrectable
        if failure:
            return [reading(device, states.FATAL, 'nvml',
                            'Row remapping failed', 'ecc:row_remap_failure')]
        if pending:
            return [reading(device, states.TRANSIENT, 'nvml',
                            'Row remapping pending: the GPU needs a reset',
                            'ecc:row_remap_pending')]
        return []

    def _pcie_replays(self, device, gpu, counters):
        count = self._call('nvmlDeviceGetPcieReplayCounter', gpu.handle)
        counters['pcie_replays'] = count
        # Replays that piled up while the agent was down are no burst.
        new = self._counters.delta((device.key(), 'pcie_replays'), count,
                                   across_restart=False)
        if new <= self._correctable_burst:
            return []
        return [reading(device, states.TRANSIENT, 'nvml',
                        f'{new} PCIe replays since the last check: the link '
                        f'is losing data', 'pcie:replays', event=True)]

    def _slowdown(self, device, gpu, counters):
        active = self._clock_events(gpu)
        seen_before, gpu.hw_slowdown = gpu.hw_slowdown, (
            _HW_SLOWDOWN in active)
        faults = [name for name in _HW_SLOWDOWNS if name in active]
        if not faults and not (seen_before and gpu.hw_slowdown):
            return []
        names = faults or [_HW_SLOWDOWN]
        return [reading(device, states.TRANSIENT, 'nvml',
                        f"Hardware slowdown ({', '.join(names)}): the GPU "
                        f"cuts its clocks to protect itself from heat or a "
                        f"power fault", 'clocks:' + names[0])]

    def _clock_events(self, gpu):
        """The names of the clock event reasons active now."""
        mask = self._call(self._clock_events_query, gpu.handle)
        return [name for name, bit in CLOCK_EVENTS.items() if mask & bit]

    # -- usage -------------------------------------------------------------

    def usage(self, device):
        """``{'utilization': 0..1, 'memory_used_bytes': n}`` of the GPU,
        with ``temperature_celsius``, ``power_watts`` and ``clock_events``
        (the names of the active clock event reasons) where the GPU
        answers them; None when NVML cannot tell."""
        def read(gpu):
            used = self._memory_used(gpu)
            rates = self._call('nvmlDeviceGetUtilizationRates', gpu.handle)
            values = {'utilization': rates.gpu / 100.0,
                      'memory_used_bytes': int(used)}
            for key, query in (('temperature_celsius', self._temperature),
                               ('power_watts', self._power),
                               ('clock_events', self._clock_events)):
                try:
                    values[key] = query(gpu)
                except _Unsupported:
                    pass
            return values
        try:
            return self._guarded(device, read, None)
        except _Unsupported:
            return None

    def _temperature(self, gpu):
        return self._call('nvmlDeviceGetTemperature', gpu.handle,
                          self._nvml.NVML_TEMPERATURE_GPU)

    def _power(self, gpu):
        """Watts drawn (NVML answers milliwatts, averaged over about a
        second on recent GPUs: nvidia-smi's "Average Power Draw")."""
        milliwatts = self._call('nvmlDeviceGetPowerUsage', gpu.handle)
        return milliwatts / _MILLIWATTS_PER_WATT

    def _memory_used(self, gpu):
        """Bytes of the GPU's memory in use, as nvidia-smi's "Used": NVML's
        version 2 memory query, which counts the driver's own reservation
        apart.  Version 1 counts it as used (480 MiB of an idle H100): it
        is asked only where version 2 is missing (older library or
        driver)."""
        if self._memory_v2 is not None:
            try:
                return self._nvml.nvmlDeviceGetMemoryInfo(
                    gpu.handle, version=self._memory_v2).used
            except TypeError:
                pass            # a pynvml without the version argument
            except self._error as exc:
                if not self._is(exc, *_NO_MEMORY_V2):
                    raise
            LOG.info('NVML has no version 2 memory query: memory in use '
                     'includes the driver\'s reservation.')
            self._memory_v2 = None
        return self._call('nvmlDeviceGetMemoryInfo', gpu.handle).used


def _one_fault_per_remap(found):
    """``found`` (one check's readings of a GPU) without its XID 63
    reading when the check also reads a pending row remap or page
    retirement: the XID says that the remap became pending, and the
    condition reports it for as long as it is.  Both sent, one remap would
    be two transient faults in one check (a third soon after takes the
    GPU out); a further XID 63 while one is pending is the same condition
    still holding.  The XID stays counted (``_event``: the XID metrics and
    the ``xid`` counter).  Without a pending reading (the row remapper not
    answering) the XID is the one sign of the remap, and is kept."""
    if not any(r.code in _PENDING_REMAP for r in found):
        return found
    return [r for r in found if r.code != _REMAP_XID]


def mig_suffix(gpu_instance_id, compute_instance_id=0):
    """The deployable name's suffix of a MIG device: ``MIG<gpu
    instance>`` for a GPU instance's first compute instance (the only one
    unless it is split), ``MIG<gpu instance>.<compute instance>`` for the
    others.  Each compute instance is a MIG device of its own, one
    instance's worth; the first keeps the name it had before the GPU
    instance was split."""
    if not compute_instance_id:
        return 'MIG%d' % gpu_instance_id
    return 'MIG%d.%d' % (gpu_instance_id, compute_instance_id)


def _mig_deployable(device, instance, compute=0):
    """The name of ``device``'s deployable for MIG GPU instance
    ``instance``, compute instance ``compute`` (see ``mig_suffix``), None
    when it offers none."""
    suffix = '_' + mig_suffix(instance, compute)
    for deployable in device.deployables:
        if deployable.name.endswith(suffix):
            return deployable.name
    return None

