"""Discovers the host's devices through the drivers and reports them.

Report format (interface 4, ``ConductorAPI.report_inventory``)::

    {'digest': inventory_digest(all current devices),
     'base_digest': digest the conductor last acknowledged, or None,
     'full': bool,        # True: 'devices' is the whole inventory
     'devices': [DriverDevice.to_dict(), ...],  # full: all; else changed
     'removed': [DriverDevice.key(), ...],      # not full: gone devices
     'resource_provider_name': ...}   # [agent] setting, else the FQDN

The host name reported is ``[DEFAULT]host`` (Nova's compute service host):
the conductor names devices by it.  It finds the compute node provider by
``resource_provider_name`` ([agent]resource_provider_name, else this
host's FQDN; doc/source/contract.rst, "Placement"), falling back to the
host name.

The reply is ``{'digest': ..., 'need_full': bool}``; ``need_full`` makes the
reporter send a full snapshot at once.  Only an acknowledged report moves
the on-disk cache forward, so nothing is lost when the conductor is down,
and a reply lost on the way back costs one full report, never a wrong
picture.

Each driver discovers on a thread of its own (``cyborg.agent.calls``); a
report waits ``[agent]discovery_timeout`` seconds at most for them.  A
driver that takes longer (a call into its hardware hangs) keeps its last
acknowledged devices, as a driver that fails does (it raised, or returned
what is not a list of devices a report can carry), and is not asked
again until that discovery returns: a hung driver costs the report that
started it the timeout once, not every report, and no other driver's
devices.  A driver failing or hung is logged with a back-off (the 1st,
2nd, 4th... report in a row), and once more when it works again.  One
discovery runs at a time: the reporter's, or the agent's RPC thread's
looking for a device just plugged in (``AgentManager._find_device``).

Before the first report, the agent recreates the mdevs of its Bound ARQs
(``cyborg.agent.mdevs``: gone after a reboot), on the reporter's thread:
no report offers their capacity as free.  Until the conductor has told
which they are, no report goes out; its failures are retried as a
report's are (below).  Those it could not make (the GPU's driver not
ready yet at boot) are tried again before each later report
(``before_report``), which goes out whatever became of them.

When: once at start, every ``[DEFAULT]periodic_interval`` seconds, at once
when ``request_report()`` (hotplug) or ``request_full_report()`` (the
conductor) is called, and after a failed attempt again after a back-off
(1 s, doubling up to ``[DEFAULT]periodic_interval``), which no such
request cuts short: a udev event storm must not turn a failing report
into one attempt a second.  All reports run on one thread, one at a
time.

A delta the conductor refuses as malformed (``Invalid``) may be refused
for its base, the on-disk record: the record is forgotten and the next
attempt is a full report, rather than the same delta refused for ever.

The report client tries the broker ``rpc.BROKER_RETRIES`` more times, not for
ever: with RabbitMQ away a report fails within seconds, is logged
(``Inventory report of <host> failed``) and retried with the back-off,
discovering afresh each time.

An agent started before any conductor: RabbitMQ drops a message sent to a
topic no queue is bound to yet, and the call would wait out the whole RPC
timeout (60 s) for a reply that never comes.  The reports are therefore
sent with the mandatory flag (``require_queue``): the broker refuses such
a message at once, and the reporter tries again every
``_NO_CONDUCTOR_RETRY`` seconds, so the host registers within seconds of
the first conductor's start.
"""

import collections
import functools
import socket
import threading
import time

import oslo_messaging as messaging
from oslo_log import log as logging

from cyborg.agent import cache as agent_cache
from cyborg.agent import calls
from cyborg.agent import programming
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import rpc
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

# First retry delay after a failed report; doubles up to periodic_interval.
_RETRY_DELAY = 1.0
# Longest retry delay while no conductor listens yet: the broker refuses
# such a report at once (nothing reaches a conductor, nothing waits), so
# trying often costs one message each time.
_NO_CONDUCTOR_RETRY = 1.0
# The agent's reports (inventory and health) try the broker
# rpc.BROKER_RETRIES more times before they fail (1, 2 then 4 s apart
# with oslo.messaging's defaults: about 7 s in all): with its default
# (for ever) a report sent while RabbitMQ is away blocks inside its
# reconnect loop, and neither the agent's back-off nor its log line ever
# runs.  (Before the agent first reached the broker, its RPC server waits
# for it, and nothing reports yet.)


class BackoffLog:
    """Logs the 1st, 2nd, 4th, 8th... failure of one thing in a row, and
    its recovery: a broken driver or an absent conductor must not flood
    the log at every check, report or udev event."""

    def __init__(self, log):
        self._log = log
        self._failures = collections.Counter()

    def failed(self, what, message, *args, exc_info=False):
        self._failures[what] += 1
        log_failure(self._log, self._failures[what], message, *args,
                    exc_info=exc_info)

    def succeeded(self, what, message, *args):
        count = self._failures.pop(what, 0)
        if count:
            self._log.info(message + ' (after %d failure(s))', *args, count)


def _discover(driver, recall, acked_devices):
    """One driver's discovery, told first (``recall``, the first of this
    agent's life) what the conductor acknowledged of it."""
    if recall:
        driver.recall(acked_devices)
    return driver.discover()


def build_report(devices, acked_digest, acked_devices, full):
    """The report for ``devices`` given what the conductor acknowledged.

    A pure function: a delta against ``acked_devices`` unless ``full`` or
    nothing was acknowledged yet.
    """
    digest = inventory.inventory_digest(devices)
    if full or acked_digest is None or acked_devices is None:
        return {'digest': digest, 'base_digest': acked_digest, 'full': True,
                'devices': [d.to_dict() for d in devices], 'removed': []}
    before = {d.key(): inventory.device_digest(d) for d in acked_devices}
    changed = [d.to_dict() for d in devices
               if before.get(d.key()) != inventory.device_digest(d)]
    current = {d.key() for d in devices}
    removed = sorted(key for key in before if key not in current)
    return {'digest': digest, 'base_digest': acked_digest, 'full': False,
            'devices': changed, 'removed': removed}


class Reporter:
    """Keeps the conductor's picture of this host equal to the hardware."""

    def __init__(self, conf, host, drivers, conductor_api=None,
                 report_cache=None, before_first_report=None,
                 before_report=None):
        self.conf = conf
        self.host = host
        self.drivers = drivers
        # Run on the reporter's thread before its first report, until it
        # returns (raising: tried again with the report's back-off): the
        # agent recreating the mdevs of its Bound ARQs
        # (``cyborg.agent.mdevs``), whose capacity no report may offer
        # as free.
        self._before_first_report = before_first_report
        # Run on that thread before each later report: the agent making
        # those mdevs it could not make then (``Mdevs.retry``).  What it
        # raises is logged; the report goes on.
        self._before_report = before_report
        # The cards being programmed: the agent's endpoints and its health
        # monitor share this one (``cmd.agent.build_services``).
        self.programming = programming.InProgress()
        self._conductor = conductor_api or conductor_rpcapi.ConductorAPI(
            conf, retry=rpc.BROKER_RETRIES, require_queue=True)
        self._cache = report_cache or agent_cache.ReportCache(
            agent_cache.default_path(conf, host), host)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._full_requested = False
        self._thread = None
        # The devices of the last acknowledged report (None: none yet this
        # life; the on-disk cache stands in, see known_devices()).
        self._known = None
        self._known_lock = threading.Lock()
        # Guards the discovery bookkeeping below (and its log), which the
        # reporter's thread and the RPC thread looking for a new device
        # share; not ``_lock``, which is held across the report's RPC.
        self._discovery_lock = threading.Lock()
        # Whether the drivers were told what was acknowledged before this
        # agent started (Driver.recall), before its first discovery.
        self._recalled = False
        # driver name -> its discovery (calls.DriverCall) not taken yet:
        # one that outlived a report's wait is not started again.
        self._discovering = {}
        # Drivers failing, or hung, report after report.
        self._driver_log = BackoffLog(LOG)
        # For tests and logs: reports acknowledged by the conductor.
        self.reports_acknowledged = 0
        self.last_report = None
        self.last_report_started = None     # time.monotonic()

    def __str__(self):
        return 'inventory reporter'

    # -- discovery ---------------------------------------------------------

    def known_devices(self):
        """The devices the conductor knows for this host: those of the last
        acknowledged report, else (before the first acknowledgement of this
        life) those of the on-disk cache; an empty list when neither exists.

        What the health monitor watches and the manager looks devices up
        in: cheap (no discovery), safe from any thread (the list is replaced
        whole, never changed in place).
        """
        known = self._known
        if known is None:
            _digest, acked = self._cache.load()
            with self._known_lock:
                # The reporter may have been acknowledged meanwhile: its
                # devices are newer than the file's.
                if self._known is None:
                    self._known = acked or []
                known = self._known
        return known

    def discover(self, acked_devices=None):
        """All devices of all drivers.  A driver that fails keeps its last
        acknowledged devices (``acked_devices``): a transient read error
        must not make the conductor delete (and Placement lose) working
        hardware."""
        with metrics.AGENT_DISCOVERY_SECONDS.time():
            return self._discover(acked_devices)

    def _discover(self, acked_devices):
        devices = self._drivers_discover(acked_devices)
        return self._held(devices, acked_devices or ())

    def _held(self, devices, acked_devices):
        """``devices`` with each card being programmed as last
        acknowledged: mid-write it may be off the bus or read half-written
        (its deployables, its image); the report that follows the
        programming carries what it became."""
        busy = {d.key(): d for d in acked_devices
                if self.programming.seconds(d.controlpath_id.cpid_info)
                is not None}
        if not busy:
            return devices
        LOG.info('Reporting %s as last reported while being programmed.',
                 ', '.join(sorted(busy)))
        return ([busy.pop(d.key(), d) for d in devices] +
                list(busy.values()))

    def _drivers_discover(self, acked_devices):
        devices = []
        seen = {}
        for name, found in self._discoveries(acked_devices):
            for device, claimed in found:
                taken = sorted(claimed & seen.keys())
                if taken:
                    first = seen[taken[0]]
                    LOG.error('Device %s is claimed by drivers %s and %s '
                              '(%s); reporting it once, for %s.',
                              device.key(), first, name, ', '.join(taken),
                              first)
                    continue
                seen.update(dict.fromkeys(claimed, name))
                for deployable in device.deployables:
                    deployable.driver_name = deployable.driver_name or name
                devices.append(device)
        return devices

    def _discoveries(self, acked_devices):
        """[(driver name, [(device, its claims)])] in the drivers' order:
        what each found, or, where it failed, returned what a report
        cannot carry, or is still discovering after
        ``[agent]discovery_timeout``, its last acknowledged devices.

        One at a time: the RPC thread looking for a device just plugged
        in (``AgentManager._find_device``) may ask while the reporter's
        thread discovers, and both would start, take and drop the same
        drivers' calls."""
        with self._discovery_lock:
            return list(self._each_discovery(acked_devices))

    def _each_discovery(self, acked_devices):
        recall, self._recalled = not self._recalled, True
        acked = {name: [] for name in self.drivers}
        for device in acked_devices or ():
            acked.setdefault(driver_of(device), []).append(device)
        started = set()
        for name, driver in self.drivers.items():
            late = self._discovering.get(name)
            # One that returned after its report's wait: asked afresh.
            if late is None or late.done():
                started.add(name)
                self._discovering[name] = calls.DriverCall(
                    name, 'discover', functools.partial(
                        _discover, driver, recall, acked[name]))
        deadline = time.monotonic() + self.conf.agent.discovery_timeout
        for name in self.drivers:
            call = self._discovering[name]
            # One still running from an earlier report is not waited for
            # again: it has had its time.
            if not call.wait(deadline if name in started else 0):
                self._driver_log.failed(
                    name, 'Driver %s has been discovering devices for %.0f '
                    's; keeping its last reported ones', name,
                    time.monotonic() - call.started)
                yield name, self._kept(name, acked[name])
                continue
            del self._discovering[name]
            error = call.error
            if error is None:
                try:
                    found = _checked(name, call.value)
                except Exception as exc:
                    error = exc
            if error is not None:
                self._driver_log.failed(
                    name, 'Driver %s failed to discover devices (%s); '
                    'keeping its last reported ones', name,
                    exception.first_line(error), exc_info=error)
                yield name, self._kept(name, acked[name])
                continue
            self._driver_log.succeeded(name, 'Driver %s discovers devices '
                                       'again', name)
            yield name, found

    def _kept(self, name, acked):
        """A failing driver's last acknowledged devices, checked as its
        own output is; none when even they cannot be reported."""
        try:
            return _checked(name, acked)
        except Exception as exc:
            LOG.error('The last reported devices of driver %s cannot be '
                      'reported again (%s); reporting none for it.', name,
                      exception.first_line(exc))
            return []

    # -- reporting ---------------------------------------------------------

    def report_now(self, full=False):
        """Discover and report once, synchronously; returns the reply.

        Raises when the conductor cannot be reached (the cache is left as
        it was, so the next attempt carries this change too).
        """
        with self._lock:
            acked_digest, acked_devices = self._cache.load()
            # What a failing driver, or a card being programmed, keeps:
            # the record's, else (deleted, unreadable, or cleared for a
            # full report) what the conductor acknowledged in this life.
            devices = self.discover(acked_devices if acked_devices
                                    is not None else self._known)
            report = build_report(devices, acked_digest, acked_devices, full)
            started = time.monotonic()
            reply = self._send(report)
            if reply.get('need_full') and not report['full']:
                LOG.info('Conductor asked for a full inventory of %s.',
                         self.host)
                report = build_report(devices, acked_digest, acked_devices,
                                      True)
                reply = self._send(report)
            self._remember(reply, report, devices)
            metrics.AGENT_REPORT_SECONDS.observe(time.monotonic() - started)
            return reply

    @functools.cached_property
    def resource_provider_name(self):
        """The compute node provider's name the conductor looks up first.

        Worked out once: getfqdn() may ask DNS, which must not slow down
        (or, with DNS down, stall) every report."""
        return self.conf.agent.resource_provider_name or socket.getfqdn()

    def _send(self, report):
        report['resource_provider_name'] = self.resource_provider_name
        context = cyborg_context.get_admin_context()
        # An unchanged report (the periodic heartbeat) is DEBUG; one that
        # carries something is the one line an operator looks for.
        changed = (report['full'] or report['devices'] or report['removed'])
        LOG.log(logging.INFO if changed else logging.DEBUG,
                'Reporting the inventory of %s: %s, %d device(s) sent, %d '
                'removed', self.host, 'full' if report['full'] else 'delta',
                len(report['devices']), len(report['removed']))
        self.last_report_started = time.monotonic()
        try:
            reply = self._conductor.report_inventory(context, self.host,
                                                     report)
        except Exception as exc:
            if not report['full'] and agent_rpcapi.raised(
                    exc, exception.Invalid):
                self._refused(exc)
            raise
        self.last_report = report
        return reply

    def _refused(self, error):
        """The conductor refused a delta as malformed.  Its base (the
        record's digest) may be what it refuses: sent again from the same
        record, the same delta would be refused for ever.  The next
        attempt is a full report, from what the drivers find."""
        LOG.warning('Conductor refused the inventory delta of %s (%s); '
                    'forgetting the record of what it acknowledged, the '
                    'next report is a full one.', self.host,
                    agent_rpcapi.refusal(error))
        self._cache.clear()
        self._full_requested = True

    def _remember(self, reply, report, devices):
        if reply.get('need_full'):
            # A full report is never refused; if it was, start over.
            self._cache.clear()
            return
        if reply.get('digest') == report['digest']:
            # What the conductor knows now, whatever becomes of the file.
            with self._known_lock:
                self._known = devices
            self.reports_acknowledged += 1
            if report['base_digest'] != report['digest'] or report['full']:
                self._save(report['digest'], devices)
        else:
            LOG.warning('Conductor stored digest %s for %s, not the %s '
                        'reported; sending a full report next.',
                        reply.get('digest'), self.host, report['digest'])
            self._cache.clear()
            self.request_full_report()

    def _save(self, digest, devices):
        """Record an acknowledged report.  A record that cannot be written
        (disk full, read-only) costs the next report: it is based on the
        old record, which the conductor refuses, asking for a full one."""
        try:
            self._cache.save(digest, devices)
        except OSError as exc:
            LOG.warning('Cannot record the inventory of %s the conductor '
                        'acknowledged in %s (%s); the next report repeats '
                        'it in full.', self.host, self._cache.path, exc)

    # -- triggers ------------------------------------------------------

    def request_report(self):
        """Report as soon as possible (hotplug)."""
        self._wake.set()

    def request_full_report(self):
        """Send the whole inventory as soon as possible (conductor's ask)."""
        self._full_requested = True
        self._wake.set()

    # -- thread ----------------------------------------------------------

    def start(self):
        """Report now and then periodically, on a background thread."""
        if self._thread is not None:
            return
        self._stopping.clear()
        self._wake.set()
        self._thread = threading.Thread(target=self._run,
                                        name='cyborg-agent-reporter',
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout=0):
        """Ask the thread to end and return, without waiting for it
        (``timeout``: wait that long, for tests).  A report may be blocked
        on the conductor or the broker: waiting for it would eat the
        agent's grace time, which the RPC server, stopped after the
        reporter, needs to finish its calls (an mdev being made, a device
        being prepared).  Nothing is lost: the thread is a daemon, the
        record is replaced atomically (the old one or the new one, never
        half of one), and a report cut short is sent again at the next
        start."""
        self._stopping.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and timeout:
            thread.join(timeout)

    def _run(self):
        interval = self.conf.periodic_interval
        retry = _RETRY_DELAY
        delay = interval
        failures = 0
        while not self._stopping.is_set():
            if failures:
                # The back-off of a failed attempt runs out whatever asks
                # for a report meanwhile (udev events, the conductor):
                # what was asked is sent by the next attempt anyway.
                self._stopping.wait(delay)
            else:
                self._wake.wait(delay)
            if self._stopping.is_set():
                break
            self._wake.clear()
            full, self._full_requested = self._full_requested, False
            try:
                if self._before_first_report is not None:
                    self._before_first_report()
                    self._before_first_report = None
                else:
                    self._run_before_report()
                self.report_now(full=full)
            except messaging.MessageUndeliverable:
                failures += 1
                log_failure(LOG, failures, 'No conductor listens on the '
                            'broker yet; reporting the inventory of %s '
                            'again in %.0f s.', self.host,
                            _NO_CONDUCTOR_RETRY)
                self._full_requested = self._full_requested or full
                delay = _NO_CONDUCTOR_RETRY
                continue
            except Exception as exc:
                failures += 1
                what = ('Inventory report' if self._before_first_report is
                        None else 'Recreating the mdevs of the bound '
                                  'accelerator requests')
                log_failure(LOG, failures, '%s of %s failed (%s); retrying '
                            'in %.0f s.', what, self.host, exc, retry)
                self._full_requested = self._full_requested or full
                delay = retry
                retry = min(retry * 2, interval)
                continue
            if failures:
                LOG.info('Inventory of %s reported after %d failed '
                         'attempt(s).', self.host, failures)
            failures = 0
            delay = interval
            retry = _RETRY_DELAY

    def _run_before_report(self):
        if self._before_report is None:
            return
        try:
            self._before_report()
        except Exception:
            LOG.exception('Before the inventory report of %s: %s failed; '
                          'reporting anyway.', self.host,
                          getattr(self._before_report, '__qualname__',
                                  self._before_report))


def log_failure(log, count, message, *args, exc_info=False):
    """WARNING for the 1st, 2nd, 4th, 8th... failure in a row (with
    ``exc_info`` then), DEBUG for the others: an agent waiting for its
    conductor, or a driver failing at every report, must not flood the
    log."""
    if count & (count - 1) == 0:
        log.warning(message + ' (failure %d in a row)', *args, count,
                    exc_info=exc_info)
    else:
        log.debug(message + ' (failure %d in a row)', *args, count)


def _checked(driver_name, found):
    """What a driver's ``discover()`` returned, as [(device, its
    claims)]; raises when it is not a list of devices a report can carry
    (None, something else than a ``DriverDevice``, a PCI attach handle
    without its address parts, a value that is not JSON): one driver's
    bug must not fail every driver's report."""
    if not isinstance(found, (list, tuple)):
        raise TypeError(f'discover() returned {type(found).__name__}, not '
                        f'a list of devices')
    checked = []
    for device in found:
        if not isinstance(device, inventory.DriverDevice):
            raise TypeError(f'discover() returned a {type(device).__name__} '
                            f'among its devices')
        _distinct_deployables(driver_name, device)
        # What the report computes of it, and sends.
        inventory.device_digest(device)
        checked.append((device, claims(device)))
    return checked


def _distinct_deployables(driver_name, device):
    """Keep the first of deployables a driver named alike in one device:
    the conductor refuses a report naming a deployable twice, and with it
    everything else the host had to say, at every period."""
    names, kept = set(), []
    for deployable in device.deployables:
        if deployable.name in names:
            LOG.error('Driver %s reports deployable %s of %s twice; '
                      'reporting the first.', driver_name, deployable.name,
                      device.key())
            continue
        names.add(deployable.name)
        kept.append(deployable)
    device.deployables[:] = kept


def claims(device):
    """What reporting ``device`` takes for itself on the host: its key, the
    PCI functions it or its handles are (a VF pool's VFs), and its
    deployables' names (each is a Placement provider).  Two drivers may
    find the same hardware in different shapes (a NIC's VF pool, and the
    generic PCI driver's VFs one by one); what the first claimed is not
    reported again, or the same function would be offered twice."""
    found = {device.key()}
    if device.controlpath_id.cpid_type == 'PCI':
        found.add('PCI function ' + device.controlpath_id.cpid_info)
    for deployable in device.deployables:
        found.add('deployable ' + deployable.name)
        for handle in deployable.attach_handles:
            if handle.attach_type == 'PCI':
                found.add('PCI function ' +
                          inventory.pci_address(handle.attach_info))
    return found


def driver_of(device):
    """The name of the driver that found ``device`` (recorded on its
    deployables), or None when that is not one name."""
    names = {d.driver_name for d in device.deployables}
    return names.pop() if len(names) == 1 else None
