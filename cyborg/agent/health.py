"""Watches the health of this host's devices and reports what it sees.

One daemon thread (``HealthMonitor``) runs, every ``[health]check_interval``
seconds, ``check_health(devices)`` of every driver that is
``base.HealthReporting``, over that driver's devices as the conductor last
acknowledged them (``Reporter.known_devices``).  Each driver's calls (its
check, its re-probes, its usage) run on a thread of their own, one call
per driver at a time (``_Call``): a call that never returns (NVML stuck
on a wedged GPU) holds that driver only.  A round waits for its checks at
most ``_ROUND_WAIT`` (or ``[health]check_interval`` if longer); a check
that takes longer is read at a later round, and one running for more than
``[health]check_timeout`` makes its devices read "timed out" (transient,
``base.CHECK_TIMEOUT``) until it returns; it is not started again
meanwhile.  The agent keeps no state machine: the conductor decides what
readings mean.  All it does is debounce, so a condition that holds (a
device that stays broken) costs no message per check:

- a change is sent AT ONCE (``ConductorAPI.report_health`` with ``'full':
  False``): a reading whose (severity, reason, code) no reading of the
  previous check of its (device, deployable) had (a condition that
  appears, changes or comes back after it cleared, a device reading well
  again), and every event that is not harmless (``Reading.event``: one
  more XID 79, new fatal AER errors).  A condition that holds is not sent
  again, whatever other counters of the device move meanwhile; a device
  whose driver's check failed keeps its previous readings for that round,
  and one whose check read nothing (``base.CHECK_UNREAD``: it raised for
  that device, or timed out) keeps the faults it read before beside that
  reading: a check that read nothing is not a clearing;
- a full report (every device's current reading, ``'full': True``) goes
  out right after start and every ``[health]report_interval`` seconds, the
  safety net for a lost change;
- a send that fails keeps its readings, in order, and is retried at the
  next check; failures are logged with back-off (1st, 2nd, 4th, 8th...),
  never raised.  At most ``MAX_PENDING_PER_KEY`` unsent readings are kept
  per (device, deployable), the least severe dropped first: the worst
  stays until the conductor takes it; none of a device that left the
  inventory (the conductor has no use for them).  Each reading queued
  gets a sequence number (``seq``, one more per reading queued by this
  monitor, whose ``sender`` id the reports carry): a send that timed out
  may still be delivered, after the conductor took its re-send or along
  with it, and the conductor applies a reading it applied already only
  once (``cyborg.conductor.health``);
- probes (``probe_health`` from the conductor) are answered from the
  driver's next check (``base.probe_verdicts``) when the driver keeps the
  default ``probe``, so that a re-probe moves none of what the checks
  compare; a driver's own ``probe`` (an active test) runs on its thread.
  Their verdicts (source 'probe') are always sent, at once.

Every ``[health]report_interval`` seconds it also samples ``usage(devices)``
of the drivers that have it (utilization 0..1, memory used in bytes and,
where the device tells, temperature, power and the reasons its clocks are
held down) into the Prometheus gauges and, when notifications are on, as one
``device.metrics`` notification per device (priority 'sample': telemetry,
broadcast, stored by nobody here).  A device its driver left out of the
sample (one it cannot read: a GPU lost, its driver unloaded) loses its
usage gauges, and a value left out loses its own, rather than show what
was last read for good; so do the devices of a driver whose call (its
usage, its check, a re-probe) has not returned within
``[health]check_timeout``, until a sample of them comes back.
"""

import collections
import functools
import threading
import time
import uuid

import oslo_messaging as messaging
from oslo_log import log as logging

from cyborg.agent import calls
from cyborg.agent import programming
from cyborg.agent import reporter as agent_reporter
from cyborg.common import context as cyborg_context
from cyborg.common import metrics
from cyborg.common import notify
from cyborg.common import rpc
from cyborg.common import states
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.drivers import base
from cyborg.objects import health

LOG = logging.getLogger(__name__)

# The usage values with one gauge each (labelled by device).
_USAGE_GAUGES = (('utilization', metrics.AGENT_UTILIZATION),
                 ('memory_used_bytes', metrics.AGENT_MEMORY_USED),
                 ('temperature_celsius', metrics.AGENT_TEMPERATURE),
                 ('power_watts', metrics.AGENT_POWER))
# Per-device series the drivers set during their checks, labelled also by
# what they saw (an XID number and its severity, an AER error kind).
_DRIVER_SERIES = (metrics.AGENT_XID_EVENTS, metrics.AGENT_GPU_LAST_FATAL_XID,
                  metrics.AGENT_AER_ERRORS)

# Unsent readings kept per (device, deployable) while the conductor is
# unreachable: enough to carry a burst of distinct events, bounded so an
# outage of days costs no memory.  Past it the least severe goes first
# (see ``HealthMonitor._queue``).
MAX_PENDING_PER_KEY = 16

# Seconds a check round waits at least for its drivers' checks (at most
# [health]check_timeout; [health]check_interval when longer): a check
# that takes longer is read at a later round, so a slow or hung driver
# delays the others' readings by this much at most, once.
_ROUND_WAIT = 1.0

# A health report waits at least this long for the conductor (it may sync
# Placement), at most [health]report_interval.
_MIN_SEND_TIMEOUT = 10

# Seconds stop() waits for the thread; a send blocked on a dead conductor
# is abandoned (daemon thread) rather than eat the graceful-stop budget.
_STOP_TIMEOUT = 1.0


def reading_key(reading):
    """What one reading is about: ``(device key, deployable name or
    None)``."""
    return reading.device, reading.deployable


def signature(reading):
    """What a reading says: severity, reason and code.  The counters are
    not part of it: they are the device's, shared by all its readings, and
    move under a condition that holds (a new event says so itself,
    ``Reading.event``)."""
    return reading.severity, reading.reason, reading.code


def news(reading, before):
    """Whether ``reading`` is to be sent as a change, ``before`` being the
    previous check's readings of its key: an event that is not harmless
    (unless it is one of those, kept while its card is programmed), or a
    signature none of them has."""
    if reading.event and not reading.harmless:
        return not any(r is reading for r in before)
    return signature(reading) not in {signature(r) for r in before}


def _check(driver, devices):
    """``driver.check_health(devices)``, run on the driver's thread; a
    driver that keeps what its checks compare per device
    (``PCIHealth.keep_health_state``) first drops that of its devices no
    longer among ``devices`` (all of the driver's that are watched)."""
    keep = getattr(driver, 'keep_health_state', None)
    if keep is not None:
        keep(devices)
    return driver.check_health(devices)


class _Call(calls.DriverCall):
    """One call into a driver (``kind``: 'check', 'probe' or 'usage'; see
    ``cyborg.agent.calls``).  The monitor keeps at most one per driver
    (``HealthMonitor._calls``)."""

    def __init__(self, driver_name, kind, function, devices):
        self.devices = list(devices)     # what it reads
        self.quiet = set()    # cards programmed while it ran (_held)
        self.key = None       # a probe's device key
        super().__init__(driver_name, kind, function)


class HealthMonitor:
    """Runs the drivers' health checks and reports readings, debounced.

    ``known_devices`` is a callable returning the devices to watch (the
    reporter's ``known_devices``).
    """

    def __init__(self, conf, host, drivers, known_devices,
                 conductor_api=None, in_progress=None):
        self.conf = conf
        # The cards being programmed (the reporter's, in an agent).
        self.programming = in_progress or programming.InProgress()
        self.host = host
        self.drivers = drivers
        self._known_devices = known_devices
        self._conductor = conductor_api or conductor_rpcapi.ConductorAPI(
            conf, timeout=max(_MIN_SEND_TIMEOUT,
                              conf.health.report_interval),
            retry=rpc.BROKER_RETRIES, require_queue=True)
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread = None
        self._probe_lock = threading.Lock()
        self._probes_requested = set()
        # probe_now's callers (RPC threads) one at a time.
        self._probe_now_lock = threading.Lock()
        self._log = agent_reporter.BackoffLog(LOG)
        # Owned by the monitor thread (or the caller of the *_once methods
        # when the thread is not running).
        self._current = {}       # key -> [Reading] of the last check
        self._pending = []       # Readings not yet sent, oldest first
        # The sequence numbers of the pending readings (by id: a reading
        # queued is held by _pending until it is sent or dropped), and
        # this monitor's id, which they are numbered under.
        self._seqs = {}
        self._seq = 0
        self._sender = uuid.uuid4().hex
        self._full_wanted = True
        self._watched = set()    # device keys that have metric labels
        self._clock_labels = {}  # device key -> clock event reasons labelled
        self._calls = {}         # driver name -> its _Call not settled
        self._late = {}          # driver name -> a check done after its round
        self._probes_due = {}    # device key -> when its probe was asked
        # For tests and logs.
        self.checks = 0
        self.reports_sent = 0
        self.last_report = None

    def __str__(self):
        return 'health monitor'

    # -- thread ------------------------------------------------------------

    def start(self):
        """Check and report on a background thread, a full report first."""
        if self._thread is not None:
            return
        self._stopping.clear()
        self._full_wanted = True
        self._thread = threading.Thread(target=self._run,
                                        name='cyborg-agent-health',
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout=_STOP_TIMEOUT):
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self):
        check_every = self.conf.health.check_interval
        full_every = self.conf.health.report_interval
        next_check = next_full = time.monotonic()
        while not self._stopping.is_set():
            self._wake.wait(max(0.0, min(next_check, next_full)
                                - time.monotonic()))
            if self._stopping.is_set():
                break
            self._wake.clear()
            now = time.monotonic()
            full = now >= next_full
            try:
                self.probe_once()
                if now >= next_check:
                    next_check = now + check_every
                    self.check_once()
                if full:
                    next_full = now + full_every
                    self._full_wanted = True
                    self.sample_usage()
                self.send_once()
            except Exception:
                # A bug here must not end health watching for good.
                LOG.exception('Health monitor round failed')

    # -- checks --------------------------------------------------------

    def check_once(self):
        """One check round over all health-reporting drivers, each on its
        own thread (see the module); changes are queued for
        ``send_once``, and the re-probes due are answered from it.
        Returns the readings of this round."""
        started = time.monotonic()
        quiet = self.programming.quiet()
        for call in [*self._calls.values(), *self._late.values()]:
            call.quiet |= quiet
        rounds = []
        for name, driver, devices in self._watched_drivers():
            if not isinstance(driver, base.HealthReporting):
                continue
            call = self._settled(name)
            late = self._late.pop(name, None)
            if late is not None:
                call = late
            elif call is None:
                call = self._calls[name] = _Call(
                    name, 'check', functools.partial(_check, driver, devices),
                    devices)
                call.quiet |= quiet
            rounds.append((name, devices, call))
        deadline = started + self._round_wait()
        for _name, _devices, call in rounds:
            call.wait(deadline)
        readings, checked, outcomes = [], set(), {}
        for name, devices, call in rounds:
            status, found = self._outcome(name, devices, call)
            if found is not None:
                found = self._held(self._carried(found), devices,
                                   call.quiet)
                readings.extend(found)
                # A late check read the devices known when it began.
                read = {d.key() for d in (
                    devices if status == 'stalled' else call.devices)}
                checked.update(d.key() for d in devices if d.key() in read)
            for device in devices:
                outcomes[device.key()] = (device, status, call, found)
        metrics.AGENT_HEALTH_CHECK_SECONDS.observe(time.monotonic() - started)
        self.checks += 1
        self._record(readings, checked)
        self._answer_probes(outcomes)
        return readings

    def _round_wait(self):
        health_conf = self.conf.health
        return min(health_conf.check_timeout,
                   max(health_conf.check_interval, _ROUND_WAIT))

    def _settled(self, name):
        """Driver ``name``'s call in flight, None when it has none: a call
        that returned is settled first (a late check kept for the next
        round, a late re-probe's verdicts queued, late usage dropped)."""
        call = self._calls.get(name)
        if call is None or not call.done():
            return call
        del self._calls[name]
        if call.kind == 'check':
            self._late[name] = call
        elif call.kind == 'probe':
            self._queue_verdicts(self._probe_outcome(call))
        return None

    def _outcome(self, name, devices, call):
        """``(status, readings)`` of driver ``name``'s ``call`` in this
        round: 'read' (the check's readings of ``devices``), 'failed'
        (the check raised: none), 'late' (still running, or another kind
        of call: none) or 'stalled' (running for longer than
        [health]check_timeout: a "timed out" reading per device)."""
        if not call.done():
            running = time.monotonic() - call.started
            if running < self.conf.health.check_timeout:
                return 'late', None
            self._log.failed(f'{name}.stalled', 'The %s call of driver %s '
                             'has not returned for %.0f s; its devices read '
                             '"timed out" until it does', call.kind, name,
                             running)
            return 'stalled', self._timed_out(name, devices, call)
        if self._calls.get(name) is call:
            del self._calls[name]
        self._log.succeeded(f'{name}.stalled', 'The call of driver %s '
                            'returned', name)
        if call.kind != 'check':
            if call.kind == 'probe':
                self._queue_verdicts(self._probe_outcome(call))
            return 'late', None
        if call.error is not None:
            self._log.failed(name, 'Health check of driver %s failed; '
                             'skipping it this round', name,
                             exc_info=call.error)
            return 'failed', None
        self._log.succeeded(name, 'Health check of driver %s works '
                            'again', name)
        keys = {d.key() for d in devices}
        return 'read', [r for r in call.value if r.device in keys]

    def _timed_out(self, name, devices, call):
        """The readings of ``devices`` while driver ``name``'s ``call``
        has not returned: transient (suspect, never taken for well), the
        same at every round so that it is sent once."""
        seconds = self.conf.health.check_timeout
        what = {'check': 'health check', 'probe': 're-probe',
                'usage': 'usage sampling'}[call.kind]
        return [health.Reading(
            device=d.key(), severity=states.TRANSIENT, source='agent',
            code=base.CHECK_TIMEOUT,
            reason=f'health check timed out: the {what} of driver {name} '
                   f'has not returned within {seconds:g} s (stuck in the '
                   f'driver or the hardware); the device is not watched')
            for d in devices]

    def _carried(self, found):
        """``found``, plus, for each device that has a reading saying its
        check read nothing (``base.CHECK_UNREAD``), the conditions it read
        before that are not harmless: such a check is no clearing, so a
        fault that still holds afterwards is not news (counted again),
        and the full report keeps re-stating it."""
        unread = {r.device for r in found if r.code in base.CHECK_UNREAD}
        if not unread:
            return found
        return found + [
            r for key, before in self._current.items() if key[0] in unread
            for r in before if not r.harmless and not r.event
            and r.code not in base.CHECK_UNREAD]

    def _held(self, found, devices, quiet):
        """``found`` with the readings of cards being programmed (or just
        programmed: ``InProgress.quiet``) replaced by their previous ones:
        what a check reads mid-write (errors a reset raised, a function
        briefly gone) is not the card's health.  The driver did read
        them, so its counters' baselines move past the write; a condition
        that outlasts it is read at the next check."""
        held = {d.key() for d in devices
                if d.controlpath_id.cpid_info in quiet}
        if not held:
            return found
        return ([r for r in found if r.device not in held] +
                [r for key, readings in self._current.items()
                 if key[0] in held for r in readings])

    def _watched_drivers(self):
        """``(name, driver, its known devices)`` for drivers with devices."""
        by_driver = collections.defaultdict(list)
        for device in self._known_devices():
            by_driver[agent_reporter.driver_of(device)].append(device)
        self._forget_vanished({d.key() for devices in by_driver.values()
                               for d in devices})
        return [(name, driver, by_driver[name])
                for name, driver in self.drivers.items()
                if by_driver.get(name)]

    def _record(self, readings, checked=()):
        """Queue what is news in a check's ``readings`` against the
        previous check's.  ``checked``: the devices whose driver's check
        ran; the others keep their previous readings (a check that failed
        read nothing, which is not the end of their conditions).  A key
        with no reading now (a partition reads nothing while well) has
        cleared: what it reads next is news."""
        previous = self._current
        current = {key: found for key, found in previous.items()
                   if key[0] not in checked}
        fresh = collections.defaultdict(list)
        for reading in readings:
            fresh[reading_key(reading)].append(reading)
        for key, found in fresh.items():
            before = previous.get(key, ())
            for reading in found:
                metrics.AGENT_HEALTH_READINGS.labels(reading.severity).inc()
                if news(reading, before):
                    self._queue(reading)
        current.update(fresh)
        self._current = current
        self._set_healthy_gauges(readings)

    def _queue(self, reading):
        """Queue ``reading`` for sending.  Past ``MAX_PENDING_PER_KEY``
        unsent readings of its key (the conductor unreachable), one is
        dropped: the least severe, the oldest of those, never the newest
        (what holds now).  Dropping the oldest whatever its severity let
        harmless readings (an application XID coming and going) push a
        fatal XID out, and the full report after the outage only
        re-states conditions: the conductor never heard of it."""
        key = reading_key(reading)
        self._pending.append(reading)
        self._seq += 1
        self._seqs[id(reading)] = self._seq
        same_key = [r for r in self._pending if reading_key(r) == key]
        if len(same_key) > MAX_PENDING_PER_KEY:
            order = states.SEVERITIES
            victim = min(same_key[:-1],
                         key=lambda r: order.index(r.severity))
            LOG.warning('Conductor unreachable: dropping an unsent health '
                        'reading of %s (%s %s).', reading.device,
                        victim.severity, victim.code or '')
            self._pending = [r for r in self._pending if r is not victim]
            self._seqs.pop(id(victim), None)

    def _queue_verdicts(self, verdicts):
        for verdict in verdicts:
            metrics.AGENT_HEALTH_READINGS.labels(verdict.severity).inc()
            self._queue(verdict)

    def _set_healthy_gauges(self, readings):
        healthy = {}
        for reading in readings:
            healthy[reading.device] = (healthy.get(reading.device, True)
                                       and reading.harmless)
        for device, good in healthy.items():
            metrics.AGENT_DEVICE_HEALTHY.labels(device).set(int(good))
            self._watched.add(device)

    def _forget_vanished(self, present):
        """Drop the state, the unsent readings and the metric labels of
        devices no longer known, so a device that comes back is reported
        afresh."""
        for device in self._watched - present:
            labels = [(gauge, (device,)) for gauge in
                      [metrics.AGENT_DEVICE_HEALTHY] +
                      [gauge for _, gauge in _USAGE_GAUGES]]
            labels += [(metrics.AGENT_CLOCK_EVENTS, (device, reason))
                       for reason in self._clock_labels.pop(device, ())]
            for gauge, values in labels:
                try:
                    gauge.remove(*values)
                except KeyError:
                    pass
            for family in _DRIVER_SERIES:
                metrics.remove_series(family, device=device)
        self._watched &= present
        self._current = {k: v for k, v in self._current.items()
                         if k[0] in present}
        if any(r.device not in present for r in self._pending):
            # Unsent readings of a device gone from the inventory the
            # conductor acknowledged: it has deleted the device, or keeps
            # it lost, which no reading moves (only the inventory ends
            # 'lost'); one that comes back is a new card, whose health
            # they are not.  Kept, they piled up, MAX_PENDING_PER_KEY
            # per device gone during an outage.
            self._pending = [r for r in self._pending
                             if r.device in present]
            kept = {id(r) for r in self._pending}
            self._seqs = {i: seq for i, seq in self._seqs.items()
                          if i in kept}

    # -- probes --------------------------------------------------------

    def request_probe(self, device_keys):
        """Probe these devices soon, on the monitor thread (the conductor's
        ``probe_health`` cast lands here and returns at once)."""
        with self._probe_lock:
            self._probes_requested.update(device_keys)
        self._wake.set()

    def probe_once(self):
        """Handle the requested probes; each verdict is queued for sending
        whatever the last reading was.  A driver that keeps the default
        ``probe`` is answered from its next check (``check_once``); an
        active probe of a driver's own runs on the driver's thread, its
        verdicts queued once it returns.  Returns the verdicts queued
        now."""
        return self._probe_requested(patient=False)

    def probe_now(self, device_keys):
        """Probe at once and send the verdicts (and any unsent before
        them) at once, as a change: for an agent whose health watching is
        off, so that no monitor thread runs (and no periodic check moves
        what ``driver.probe`` reads).  The probe still runs on the
        driver's thread: past [health]check_timeout its verdict is "timed
        out".  True when the conductor took them."""
        with self._probe_now_lock:
            self.request_probe(device_keys)
            self._probe_requested(patient=True)
            return self._send(list(self._pending), full=False)

    def _probe_requested(self, patient):
        with self._probe_lock:
            keys, self._probes_requested = self._probes_requested, set()
        if not keys:
            return []
        known = {d.key(): d for d in self._known_devices()}
        verdicts = []
        for key in sorted(keys):
            device = known.get(key)
            found = self._probe_at_once(key, device)
            if found is not None:
                verdicts.extend(found)
                continue
            name = agent_reporter.driver_of(device)
            driver = self.drivers[name]
            if base.default_probe(driver) and not patient:
                self._probes_due.setdefault(key, time.monotonic())
                continue
            verdicts.extend(self._active_probe(key, device, name, driver,
                                               patient))
        self._queue_verdicts(verdicts)
        return verdicts

    def _active_probe(self, key, device, name, driver, patient):
        """``driver.probe(device)`` on the driver's thread: its verdicts
        when it returns within a round (``patient``: within
        [health]check_timeout, waiting first for a call in flight); else
        none now (queued when it returns) or, past check_timeout, "timed
        out"."""
        timeout = self.conf.health.check_timeout
        call = self._settled(name)
        if call is not None and patient:
            call.wait(call.started + timeout)
            call = self._settled(name)
        if call is not None:
            if time.monotonic() - call.started >= timeout:
                return base.probe_verdicts(
                    device, self._timed_out(name, [device], call))
            with self._probe_lock:      # busy: asked again next time
                self._probes_requested.add(key)
            return []
        call = self._calls[name] = _Call(
            name, 'probe', functools.partial(driver.probe, device),
            [device])
        call.key = key
        wait = timeout if patient else self._round_wait()
        if not call.wait(time.monotonic() + wait):
            if patient:
                return base.probe_verdicts(
                    device, self._timed_out(name, [device], call))
            return []
        del self._calls[name]
        return self._probe_outcome(call)

    def _probe_outcome(self, call):
        """The verdicts of a returned active probe ``call``."""
        key = call.key
        if call.error is not None:
            LOG.error('Probe of %s failed', key, exc_info=call.error)
            return [health.Reading(device=key, severity=states.FATAL,
                                   reason=f'probe failed: {call.error}',
                                   source='probe', code='probe:error')]
        verdicts = call.value
        if not isinstance(verdicts, list):
            verdicts = [verdicts]     # a driver's one verdict
        self._log_verdicts(key, verdicts)
        return verdicts

    @staticmethod
    def _log_verdicts(key, verdicts):
        for verdict in verdicts:
            LOG.info('Probe of %s%s: %s %s', key,
                     f' ({verdict.deployable})' if verdict.deployable
                     else '', verdict.severity, verdict.reason)

    def _answer_probes(self, outcomes):
        """Answer the re-probes due from this round's ``outcomes`` (device
        key -> (device, status, call, readings)): from a check begun after
        the probe was asked; "failed" for a check that raised; kept for a
        later round while the check is late."""
        verdicts = []
        for key, asked in sorted(self._probes_due.items()):
            device, status, call, found = outcomes.get(
                key, (None, None, None, None))
            at_once = self._probe_at_once(key, device)
            if at_once is not None:
                verdicts.extend(at_once)
            elif status == 'late' or (status in ('read', 'failed') and
                                      call.started < asked):
                continue
            elif status == 'failed':
                # Its traceback is logged with the check's failure.
                LOG.error('Probe of %s: the check failed: %s', key,
                          call.error)
                verdicts.append(health.Reading(
                    device=key, severity=states.FATAL,
                    reason=f'probe failed: {call.error}', source='probe',
                    code='probe:error'))
            else:
                found = base.probe_verdicts(device, found)
                self._log_verdicts(key, found)
                verdicts.extend(found)
            del self._probes_due[key]
        self._queue_verdicts(verdicts)

    def _probe_at_once(self, key, device):
        """The verdicts of a re-probe answered without the driver (none:
        the conductor's probe timeout decides), or None when the driver
        is to answer it."""
        if device is None:
            # A guess here (gone?) could be wrong while the first report
            # is still on its way.
            LOG.warning('Asked to probe %s, which this agent does not '
                        'know; no verdict sent.', key)
            return []
        busy = self.programming.seconds(device.controlpath_id.cpid_info)
        if busy is not None:
            # "Not yet" for the device and each of its deployables (a
            # programming takes those out): a verdict for whichever of
            # them the conductor is probing, no fault of the others.  A
            # conductor older than that would count the device's as a
            # fault of the device: its deployables' only.
            LOG.info('Probe of %s: being programmed (for %.0f s), not yet',
                     key, busy)
            names = [d.name for d in device.deployables]
            if self._conductor.reads_not_yet_as_verdict() or not names:
                names.insert(0, None)
            return [health.Reading(
                device=key, deployable=name, severity=states.TRANSIENT,
                source='probe', code=health.PROBE_NOT_YET,
                reason=f'being programmed (for {busy:.0f} s); re-probed '
                       f'when the conductor asks again')
                for name in names]
        name = agent_reporter.driver_of(device)
        driver = self.drivers.get(name)
        if not isinstance(driver, base.HealthReporting):
            LOG.warning('Asked to probe %s, whose driver %s cannot tell '
                        'health; no verdict sent.', key, name)
            return []
        return None

    # -- sending -------------------------------------------------------

    def send_once(self):
        """Send the queued changes, then a full report when one is due.

        A change is an event the conductor counts; a full report only
        re-states what holds.  So when both are due, the changes go first
        in a report of their own (once this monitor has reported at all:
        its first report says what holds, which is no news; the events
        and probe verdicts queued before it, numbered, are counted as
        a change report's by the conductor, ``conductor.health._restates``).
        Returns True when nothing was left to send or the conductor took
        it; False when it failed (everything is kept for the next try).
        """
        if self._full_wanted and self._pending and self.reports_sent:
            if not self._send(list(self._pending), full=False):
                return False
        if self._full_wanted:
            return self._send(self._full_readings(), full=True)
        return self._send(list(self._pending), full=False)

    def _send(self, readings, full):
        if not readings:
            return True
        report = {'full': full, 'sender': self._sender,
                  'readings': [self._wire(r) for r in readings]}
        try:
            reply = self._conductor.report_health(
                cyborg_context.get_admin_context(), self.host, report)
        except messaging.MessageUndeliverable:
            # It carries no message: "failed ()" said nothing.
            self._log.failed('conductor', 'Health report of %s not sent: '
                             'no conductor listens on the broker yet; '
                             'retrying at the next check', self.host)
            return False
        except Exception as exc:
            self._log.failed('conductor', 'Health report of %s failed (%s); '
                             'retrying at the next check', self.host, exc)
            return False
        if reply is None:
            # Not sent: [upgrade_levels]conductor caps below report_health
            # (logged once by the client).  Nothing to keep for later: the
            # first full report after the cap is lifted says what holds.
            self._unqueue()
            self._full_wanted = False
            return True
        self._log.succeeded('conductor', 'Health reports of %s reach the '
                            'conductor again', self.host)
        self._unqueue()
        if full:
            self._full_wanted = False
        self.reports_sent += 1
        self.last_report = report
        return True

    def _wire(self, reading):
        """``reading`` as a report carries it: with its sequence number
        while it is pending (a reading of a full report that was sent
        before has none: the conductor applies it as a re-statement)."""
        values = reading.to_dict()
        seq = self._seqs.get(id(reading))
        if seq is not None:
            values['seq'] = seq
        return values

    def _unqueue(self):
        self._pending = []
        self._seqs = {}

    def _full_readings(self):
        """Unsent readings (in order; only those of a first report, see
        ``send_once``), then the current readings of every key, those
        queued already left out."""
        queued = {id(r) for r in self._pending}
        return self._pending + [
            reading for readings in self._current.values()
            for reading in readings if id(reading) not in queued]

    # -- telemetry -----------------------------------------------------

    def sample_usage(self):
        """Usage of the devices of drivers with ``usage()``: into the
        gauges, and one ``device.metrics`` notification per device when
        notifications are on.  Returns ``{device key: usage}``."""
        started = time.monotonic()
        calls = []
        # The devices of drivers whose call in flight (a usage sample, a
        # check, a re-probe) has run past [health]check_timeout: hung.
        stalled = set()
        for name, driver, devices in self._watched_drivers():
            usage = getattr(driver, 'usage', None)
            if not callable(usage):
                continue
            busy = self._settled(name)
            if busy is not None:
                if self._overdue(busy):
                    stalled.update(d.key() for d in devices)
                LOG.debug('Driver %s is busy: no usage sample of it this '
                          'time', name)
                continue
            call = self._calls[name] = _Call(
                name, 'usage', functools.partial(usage, devices), devices)
            calls.append((name, call))
        sampled = {}
        # The devices of the calls that returned: those left out of what
        # they returned (or of a call that raised) could not be read.
        unread = set()
        deadline = started + self._round_wait()
        for name, call in calls:
            if not call.wait(deadline):
                # Dropped when it returns (_settled).
                if self._overdue(call):
                    stalled.update(d.key() for d in call.devices)
                continue
            del self._calls[name]
            unread.update(d.key() for d in call.devices)
            if call.error is not None:
                self._log.failed(f'{name}.usage', 'Usage sampling of driver '
                                 '%s failed', name, exc_info=call.error)
                continue
            for device, values in call.value.items():
                sampled[device] = dict(values, driver_name=name)
        for device in (unread | stalled) - set(sampled):
            self._clear_usage_gauges(device)
        for device, values in sampled.items():
            self._set_usage_gauges(device, values)
        if sampled and notify.enabled(self.conf, 'agent', self.host):
            context = cyborg_context.get_admin_context()
            for device, values in sorted(sampled.items()):
                notify.send(self.conf, context, notify.DEVICE_METRICS,
                            dict(values, host=self.host, device=device),
                            priority=notify.SAMPLE, process='agent',
                            host=self.host)
        return sampled

    def _overdue(self, call):
        """Whether ``call``, not returned, has run past
        [health]check_timeout: its driver is taken for hung, and the usage
        series of its devices are cleared (``_clear_usage_gauges``) until
        a sample of them comes back."""
        return (not call.done() and time.monotonic() - call.started
                >= self.conf.health.check_timeout)

    def _set_usage_gauges(self, device, values):
        """Set ``device``'s usage series from ``values``; those of the
        values it has not (a query the GPU stopped answering) are
        removed, not left at what was last read."""
        for key, gauge in _USAGE_GAUGES:
            if values.get(key) is not None:
                gauge.labels(device).set(values[key])
                self._watched.add(device)
            else:
                _remove(gauge, device)
        active = values.get('clock_events')
        if active is None:
            self._clear_clock_events(device)
            return
        # A reason once seen keeps its series, at 0 when it clears.
        labelled = self._clock_labels.setdefault(device, set())
        labelled.update(active)
        for reason in labelled:
            metrics.AGENT_CLOCK_EVENTS.labels(device, reason).set(
                int(reason in active))
        self._watched.add(device)

    def _clear_usage_gauges(self, device):
        """Remove ``device``'s usage and clock event series: its driver
        sampled it and could not read it (a GPU lost, its driver unloaded,
        handed to vfio-pci), failed, or has a call (usage, check, re-probe)
        running past [health]check_timeout (NVML stuck).  Left at their
        last values, a GPU nobody reads any more would show its last
        temperature and a hardware slowdown for good
        (CyborgGPUHardwareSlowdown firing for ever); absent, they say
        nothing is known."""
        for _, gauge in _USAGE_GAUGES:
            _remove(gauge, device)
        self._clear_clock_events(device)

    def _clear_clock_events(self, device):
        for reason in self._clock_labels.pop(device, ()):
            _remove(metrics.AGENT_CLOCK_EVENTS, device, reason)


def _remove(gauge, *labels):
    """Remove a series of ``gauge``, if it has one with ``labels``."""
    try:
        gauge.remove(*labels)
    except KeyError:
        pass
