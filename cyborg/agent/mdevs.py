"""The host's mediated devices (vGPUs) as the agent makes them.

A bind makes the mdev of its MDEV attach handle through the agent
(``AgentManager.create_vgpu_mdev``), named by the handle's uuid, and an
unbind removes it (``remove_vgpu_mdev``); both go through ``Mdevs``,
which writes through the privileged helper (``cyborg.agent.privileged``).

Mdevs do not survive a reboot of the host, and nothing in the next
report tells the conductor they are gone: a time-sliced GPU's handles
are numbered per parent, so the same handles come back, while the
capacity the missing mdevs held is offered again to the GPU's other
types (a bind of another type then leaves no room for the vGPU a Bound
ARQ holds).  So, when the agent starts and before its first report
(``Reporter``'s ``before_first_report``), it asks the conductor for the
mdevs its Bound ARQs hold (``ConductorAPI.bound_mdevs``, conductor RPC
1.9) and makes those that are missing, through the same path as a bind
(an mdev that exists, of that type on that parent, is left as it is).
One that cannot be made is logged (WARNING, naming the ARQ and the
mdev) and the others are still made; the agent goes on.  Those that
failed are tried again (``retry``) before each later report, at least
every ``[DEFAULT]periodic_interval`` seconds (a report follows a udev
event, or a driver that finds its GPU again): at boot the GPU's driver
(nvidia, vfio) may bind the parent function, create its
``mdev_supported_types`` or enable its SR-IOV VFs only after the agent
started.  Each retry asks the conductor again, so that an ARQ unbound
meanwhile is not made again, and stops once none fails, or the
conductor no longer lists them; one made at last is logged (INFO), one
still failing is logged again (WARNING) only when its reason changes.
A conductor away during a retry is asked again before a report
``[DEFAULT]periodic_interval`` seconds later or more; the reports go out
meanwhile.  The metric ``cyborg_agent_bound_mdevs_not_made``
counts those not made yet, after each attempt.  Until the
conductor has answered, no report goes out: the conductor away (the
broker, no conductor yet, a timeout, its database away) is retried
with the report's back-off.  A conductor older than 1.9 (or
``[upgrade_levels]conductor`` capped below it) cannot tell: that is
logged once and the agent reports without recreating anything.  Only
an agent with a driver that makes mdevs (``base.Partitionable``) asks.

An unbind whose removal reaches the agent while it recreates is not
undone by it: a removal asked for after the conductor's answer is noted,
and that mdev is not made again; nor is one that failed, once removed.

nova-compute resumes the host's instances as it starts
(``resume_guests_state_on_host_boot``), on these mdevs: the
cyborg-agent process tells systemd it is ready (``Readiness``, a unit
of ``Type=notify``) only once they are made, so that a unit ordered
before nova-compute holds its start until then.  Not for ever: a
conductor that has not answered within ``[agent]ready_timeout`` seconds
(the control plane away at boot) lets nova-compute start without them,
with a WARNING, and they are made once it answers.  Nor by one that
cannot be made: READY follows the first attempt, whatever failed, and
the retries that follow only update the status systemd shows
(``systemctl status cyborg-agent``).
"""

import os
import threading
import time

from oslo_log import log as logging

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import rpc
from cyborg.common import systemd
from cyborg.drivers import base

LOG = logging.getLogger(__name__)


class Mdevs:
    """Creates and removes this host's mdevs, one at a time; recreates
    those of the Bound ARQs at start (``restore``), and those it could
    not then before each later report (``retry``)."""

    def __init__(self, conf, host, drivers, conductor_api=None):
        self.conf = conf
        self.host = host
        self.drivers = drivers or {}
        self._conductor = conductor_api
        # One create or removal at a time, the recreation's included.
        self._lock = threading.Lock()
        # While recreating: the mdevs removed since the conductor's answer.
        self._removed = None
        self.restored = False
        # What the recreation did: the conductor's list, the mdevs made
        # again, those that could not be (uuid -> why: for tests and
        # logs), or why the conductor did not list them.
        self.listed = []
        self.made = []
        self.failed = {}
        self.unlisted = None
        # mdev uuid -> the reasons it failed for that were logged as a
        # WARNING; the conductor's errors logged during retries.
        self._warned = {}
        self._unanswered = set()
        # No retry asks the conductor before this (monotonic): after one
        # it did not answer, a report interval later (a hung conductor
        # holds each ask for the RPC timeout, and the report after it).
        self._ask_after = 0.0

    # -- a bind's create and an unbind's removal ---------------------------

    def create(self, pci_address, asked_type, mdev_uuid):
        """Create the mdev; True when it was made, False when it exists
        already, of that type on that parent.  Conflict when one of that
        uuid exists otherwise; the helper's refusals (an unknown type or
        parent: NotFound; a bad name: Invalid) as they come."""
        with self._lock:
            return self._create(pci_address, asked_type, mdev_uuid)

    def _create(self, pci_address, asked_type, mdev_uuid):
        from cyborg.agent import privileged
        privileged.check_mdev(pci_address, asked_type, mdev_uuid)
        parent = self.parent(pci_address, asked_type)
        found = existing(self.conf.agent.sysfs_root, mdev_uuid)
        if found == (parent, asked_type):
            return False
        if found is not None:
            raise exception.Conflict(
                reason=f'mdev {mdev_uuid} exists already, of type '
                       f'{found[1]} on {found[0]}, not of type '
                       f'{asked_type} on {parent}')
        privileged.create_mdev(parent, asked_type, mdev_uuid)
        LOG.info('Created mdev %s of type %s on %s', mdev_uuid, asked_type,
                 parent)
        return True

    def remove(self, pci_address, mdev_uuid, asked_type=None):
        """Remove the mdev (see ``privileged.remove_mdev``); True when it
        existed.  Noted while recreating: it is not made again."""
        from cyborg.agent import privileged
        # The helper checks the names, and that the mdev is the parent's.
        parent = (self.parent(pci_address, asked_type)
                  if asked_type else pci_address)
        with self._lock:
            if self._removed is not None:
                self._removed.add(mdev_uuid)
            if self._forget(mdev_uuid):
                LOG.info('Mdev %s, not made again, is no longer tried: its '
                         'removal was asked (an unbind).', mdev_uuid)
                self._count()
            if privileged.remove_mdev(parent, mdev_uuid, asked_type):
                LOG.info('Removed mdev %s from %s', mdev_uuid, parent)
                return True
        return False

    def parent(self, pci_address, mdev_type):
        """The function an mdev of ``mdev_type`` for ``pci_address`` is
        made on (the driver's ``mdev_parent``)."""
        for driver in self.drivers.values():
            if isinstance(driver, base.Partitionable):
                return driver.mdev_parent(pci_address, mdev_type)
        return pci_address

    def makes_mdevs(self):
        """Whether a driver of the agent makes mdevs: only then are there
        any to make again."""
        return any(isinstance(driver, base.Partitionable)
                   for driver in self.drivers.values())

    # -- at start ----------------------------------------------------------

    def restore(self):
        """Recreate the missing mdevs of this host's Bound ARQs, once.

        Returns once each was made (or found, or failed: logged), or
        when there is nothing to ask (no driver making mdevs, a conductor
        too old to tell); raises when the conductor could not be asked
        (the reporter tries again after its back-off)."""
        if self.restored:
            return
        if not self.makes_mdevs():
            self.restored = True
            return
        conductor = self._conductor_api()
        if not conductor.can_list_bound_mdevs():
            rpc.skip_capped('conductor', 'bound_mdevs', '1.9',
                            conductor.version_cap, _NOT_RECREATED)
            self.unlisted = _TOO_OLD
            self.restored = True
            return
        with self._lock:
            self._removed = set()
        try:
            mdevs = self._ask(conductor)
            if mdevs is not None:
                self.listed = mdevs
                for mdev in mdevs:
                    self._restore_one(mdev)
                if mdevs:
                    LOG.info('Mdevs of the bound accelerator requests of %s '
                             'checked: %d, %d not made again%s.', self.host,
                             len(mdevs), len(self.failed),
                             _TRIED_AGAIN if self.failed else '')
            self.restored = True
        finally:
            with self._lock:
                self._removed = None
            self._count()

    def retry(self):
        """Try again to make those ``restore`` could not (``failed``),
        still held by Bound ARQs as the conductor lists them now; returns
        whether it asked.  Never raises: the conductor away, or one
        failing again, is logged and tried at the next call (the
        reporter's, before each report after the first); after a
        conductor that did not answer, not before
        ``[DEFAULT]periodic_interval`` seconds have passed."""
        if (not self.restored or not self.failed
                or time.monotonic() < self._ask_after):
            return False
        with self._lock:
            self._removed = set()
        try:
            try:
                mdevs = self._conductor_api().bound_mdevs(
                    cyborg_context.get_admin_context(), self.host)
            except Exception as exc:  # noqa: BLE001 - tried next report
                self._not_answered(exc)
                self._ask_after = (time.monotonic() +
                                   self.conf.periodic_interval)
                return True
            self._ask_after = 0.0
            self._unanswered.clear()
            listed = {mdev['mdev_uuid']: mdev for mdev in mdevs}
            for mdev_uuid in list(self.failed):
                mdev = listed.get(mdev_uuid)
                if mdev is not None:
                    self._restore_one(mdev)
                    continue
                with self._lock:
                    forgotten = self._forget(mdev_uuid)
                if forgotten:
                    LOG.info('Mdev %s, not made again, is no longer held by '
                             'a bound accelerator request of %s: no longer '
                             'tried.', mdev_uuid, self.host)
            return True
        finally:
            with self._lock:
                self._removed = None
            self._count()

    def _not_answered(self, exc):
        """The conductor did not list the mdevs for a retry: logged once
        per kind of error (INFO), until it answers."""
        kind = type(exc).__name__
        level = logging.DEBUG if kind in self._unanswered else logging.INFO
        self._unanswered.add(kind)
        LOG.log(level, 'Could not ask the conductor which of the %d mdev(s) '
                'of bound accelerator requests of %s not made again are '
                'still bound (%s); asking again before a report in %d s '
                'or more.',
                len(self.failed), self.host, exception.first_line(exc),
                self.conf.periodic_interval)

    def _forget(self, mdev_uuid):
        """No longer try ``mdev_uuid`` (under ``_lock``); whether it
        was being tried."""
        self._warned.pop(mdev_uuid, None)
        return self.failed.pop(mdev_uuid, None) is not None

    def _count(self):
        metrics.AGENT_BOUND_MDEVS_NOT_MADE.labels(self.host).set(
            len(self.failed))

    def _conductor_api(self):
        if self._conductor is None:
            # Imported here: the conductor's client is needed at start only.
            from cyborg.conductor import rpcapi as conductor_rpcapi
            self._conductor = conductor_rpcapi.ConductorAPI(
                self.conf, retry=rpc.BROKER_RETRIES, require_queue=True)
        return self._conductor

    def _ask(self, conductor):
        """The conductor's list; None when it cannot tell (too old, or it
        answered with an error of its own: logged); raises when it was
        not reached, did not answer, or is away (a 503)."""
        context = cyborg_context.get_admin_context()
        try:
            return conductor.bound_mdevs(context, self.host)
        except Exception as exc:
            if rpc.peer_too_old(exc):
                LOG.warning('The conductor does not serve conductor RPC 1.9 '
                            '(bound_mdevs): %s. This message is logged '
                            'once.', _NOT_RECREATED)
                self.unlisted = _TOO_OLD
                return None
            said = agent_rpcapi.refusal(exc)
            if said is None or agent_rpcapi.raised(
                    exc, exception.ServiceUnavailable):
                raise
            LOG.warning('The conductor could not list the mdevs of the bound '
                        'accelerator requests of %s (%s): none is made '
                        'again.', self.host, said)
            self.unlisted = f'the conductor could not list them ({said})'
            return None

    def _restore_one(self, mdev):
        arq, mdev_uuid = mdev['arq_uuid'], mdev['mdev_uuid']
        address, mdev_type = mdev['pci_address'], mdev['mdev_type']
        with self._lock:
            again = mdev_uuid in self.failed
            if mdev_uuid in self._removed:
                self._forget(mdev_uuid)
                LOG.info('Mdev %s of accelerator request %s was removed '
                         'meanwhile (an unbind); not made again.', mdev_uuid,
                         arq)
                return
            try:
                made = self._create(address, mdev_type, mdev_uuid)
            except Exception as exc:  # noqa: BLE001 - logged, the next one
                why = self.failed[mdev_uuid] = exception.first_line(exc)
                warned = self._warned.setdefault(mdev_uuid, set())
                if why in warned:
                    LOG.debug('Mdev %s of bound accelerator request %s still '
                              'cannot be made again: %s.', mdev_uuid, arq,
                              why)
                    return
                warned.add(why)
                LOG.warning('Could not make mdev %s (type %s on %s) of '
                            'bound accelerator request %s again: %s; its '
                            'instance cannot start until it is made%s.',
                            mdev_uuid, mdev_type, address, arq, why,
                            _TRIED_AGAIN)
                return
            self._forget(mdev_uuid)
        if made:
            self.made.append(mdev_uuid)
            LOG.info('Made mdev %s of bound accelerator request %s again '
                     '(gone since the agent last ran: a reboot)%s.',
                     mdev_uuid, arq,
                     ', at last, after failing' if again else '')
        elif again:
            LOG.info('Mdev %s of bound accelerator request %s, not made '
                     'again before, exists now (made by hand?): no longer '
                     'tried.', mdev_uuid, arq)

    def summary(self):
        """What ``restore`` did, in a line (the agent's status in
        systemd)."""
        if not self.makes_mdevs():
            return 'no enabled driver makes mdevs: none to make again'
        if self.unlisted is not None:
            return (f'mdevs of bound accelerator requests not made again: '
                    f'{self.unlisted}')
        failed = len(self.failed)
        return (f'mdevs of bound accelerator requests: {len(self.made)} '
                f'made again, {failed} failed, of '
                f'{len(self.listed)} listed'
                + ('; the failed ones are tried again before each report'
                   if failed else ''))


_NOT_RECREATED = ('the mdevs of bound accelerator requests are not made '
                  'again at start (after a reboot, their instances cannot '
                  'start until each is made by hand, or the conductors are '
                  'upgraded and the agent restarted)')


_TOO_OLD = 'the conductor is older than conductor RPC 1.9 (bound_mdevs)'


_TRIED_AGAIN = '; tried again before each inventory report'


class Readiness:
    """Tells systemd when the cyborg-agent process is ready
    (``cyborg.common.systemd``): once ``restore`` has returned, with
    its ``summary``; or ``[agent]ready_timeout`` seconds after ``start``
    when the conductor has not answered by then (a WARNING); at once
    where no enabled driver makes mdevs, or the option is 0.  Nothing
    at all where systemd does not listen.  Mdevs that failed do not
    hold READY: they are tried again later (``retry``), and only the
    status follows.

    A service of that process, started first (the RPC server's start
    waits for the broker, which the time-out must not): ``start`` says
    the agent waits, ``restore`` is the reporter's
    ``before_first_report`` and ``retry`` its ``before_report``, and
    ``stop``, last of the services, says ``STOPPING=1``."""

    def __init__(self, conf, mdevs):
        self.timeout = conf.agent.ready_timeout
        self.mdevs = mdevs
        # READY=1 once, then each status once, in the order they come;
        # nothing after STOPPING=1.
        self._lock = threading.Lock()
        self._listening = False
        self.said_ready = False
        # The status to say (the latest), the one systemd last heard.
        self._status = None
        self._told = None
        self._timer = None

    def start(self):
        self._listening = systemd.listening()
        if not self._listening:
            return
        if not self.mdevs.makes_mdevs():
            self._ready(self.mdevs.summary())
        elif self.timeout <= 0:
            self._ready(_READY_AT_ONCE)
        else:
            systemd.status(_WAITING,
                           extend_timeout=self.timeout + _EXTEND_MARGIN)
            self._timer = threading.Timer(self.timeout, self._time_up)
            self._timer.name = 'cyborg-agent-ready'
            self._timer.daemon = True
            self._timer.start()

    def restore(self):
        """``Mdevs.restore``, then ready; raises as it does (ready then
        after an attempt that works, or the time-out)."""
        self.mdevs.restore()
        self._ready(self.mdevs.summary())

    def retry(self):
        """``Mdevs.retry``, then the status systemd shows, when it
        asked: READY=1 is not said again (said after the first attempt,
        or still being said where systemd did not hear it)."""
        if self.mdevs.retry():
            self._ready(self.mdevs.summary())

    def _time_up(self):
        with self._lock:
            if self.said_ready or not self._listening:
                return
            LOG.warning('The conductor has not listed the mdevs of the '
                        'bound accelerator requests of %s within '
                        '[agent]ready_timeout (%g s): telling systemd the '
                        'agent is ready, and units waiting for it start '
                        '(nova-compute: an instance it resumes on an mdev '
                        'not made yet stays down until it is started '
                        'again). They are made once the conductor '
                        'answers.', self.mdevs.host, self.timeout)
            self._say_ready(_READY_LATE)

    def _ready(self, status):
        with self._lock:
            if self._listening:
                self._say_ready(status)

    def _say_ready(self, status):
        if self._timer is not None:
            self._timer.cancel()
        self._status = status
        if self.said_ready:
            if status != self._told:
                systemd.status(status)
                self._told = status
        elif systemd.ready(status):
            self.said_ready = True
            self._told = status
        else:
            # Not heard (a socket full or gone for a moment): said again
            # shortly, or systemd would give up on the start.
            self._timer = threading.Timer(_SAY_AGAIN, self._say_again)
            self._timer.name = 'cyborg-agent-ready'
            self._timer.daemon = True
            self._timer.start()

    def _say_again(self):
        with self._lock:
            if self._listening and not self.said_ready:
                self._say_ready(self._status)

    def stop(self):
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            if self._listening:
                self._listening = False
                systemd.stopping()

    def __str__(self):
        return 'systemd readiness'


_WAITING = 'waiting for the conductor to list bound mdevs'
_READY_AT_ONCE = ('ready at once ([agent]ready_timeout is 0): the mdevs of '
                  'bound accelerator requests are made once the conductor '
                  'answers')
_READY_LATE = ('ready without the mdevs of bound accelerator requests: the '
               'conductor has not answered; they are made once it does')
# Seconds before READY=1 is said again when systemd did not hear it.
_SAY_AGAIN = 1.0
# Seconds systemd is asked to wait beyond [agent]ready_timeout.
_EXTEND_MARGIN = 10


def existing(sysfs_root, mdev_uuid):
    """``(parent PCI address, mdev type)`` of the mdev ``mdev_uuid`` (a
    checked uuid), as the kernel shows it; None when there is none."""
    from cyborg.agent import privileged
    link = os.path.join(sysfs_root, 'bus', 'mdev', 'devices', mdev_uuid)
    if not os.path.lexists(link):
        return None
    parent, mdev_type = privileged.mdev_where(link)
    return os.path.basename(parent), mdev_type
