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
mdev) and the others are still made; the agent goes on.  Until the
conductor has answered, no report goes out: the conductor away (the
broker, no conductor yet, a timeout, its database away) is retried
with the report's back-off.  A conductor older than 1.9 (or
``[upgrade_levels]conductor`` capped below it) cannot tell: that is
logged once and the agent reports without recreating anything.  Only
an agent with a driver that makes mdevs (``base.Partitionable``) asks.

An unbind whose removal reaches the agent while it recreates is not
undone by it: a removal asked for after the conductor's answer is noted,
and that mdev is not made again.
"""

import os
import threading

from oslo_log import log as logging

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.drivers import base

LOG = logging.getLogger(__name__)


class Mdevs:
    """Creates and removes this host's mdevs, one at a time; recreates
    those of the Bound ARQs once, at start (``restore``)."""

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
        # mdev uuid -> why it could not be made again (for tests and logs).
        self.failed = {}

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

    # -- at start ----------------------------------------------------------

    def restore(self):
        """Recreate the missing mdevs of this host's Bound ARQs, once.

        Returns once each was made (or found, or failed: logged), or
        when there is nothing to ask (no driver making mdevs, a conductor
        too old to tell); raises when the conductor could not be asked
        (the reporter tries again after its back-off)."""
        if self.restored:
            return
        if not any(isinstance(driver, base.Partitionable)
                   for driver in self.drivers.values()):
            self.restored = True
            return
        conductor = self._conductor_api()
        if not conductor.can_list_bound_mdevs():
            rpc.skip_capped('conductor', 'bound_mdevs', '1.9',
                            conductor.version_cap, _NOT_RECREATED)
            self.restored = True
            return
        with self._lock:
            self._removed = set()
        try:
            mdevs = self._ask(conductor)
            if mdevs is not None:
                for mdev in mdevs:
                    self._restore_one(mdev)
                if mdevs:
                    LOG.info('Mdevs of the bound accelerator requests of %s '
                             'checked: %d, %d not made again.', self.host,
                             len(mdevs), len(self.failed))
            self.restored = True
        finally:
            with self._lock:
                self._removed = None

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
                return None
            said = agent_rpcapi.refusal(exc)
            if said is None or agent_rpcapi.raised(
                    exc, exception.ServiceUnavailable):
                raise
            LOG.warning('The conductor could not list the mdevs of the bound '
                        'accelerator requests of %s (%s): none is made '
                        'again.', self.host, said)
            return None

    def _restore_one(self, mdev):
        arq, mdev_uuid = mdev['arq_uuid'], mdev['mdev_uuid']
        address, mdev_type = mdev['pci_address'], mdev['mdev_type']
        with self._lock:
            if mdev_uuid in self._removed:
                LOG.info('Mdev %s of accelerator request %s was removed '
                         'meanwhile (an unbind); not made again.', mdev_uuid,
                         arq)
                return
            try:
                made = self._create(address, mdev_type, mdev_uuid)
            except Exception as exc:  # noqa: BLE001 - logged, the next one
                self.failed[mdev_uuid] = exception.first_line(exc)
                LOG.warning('Could not make mdev %s (type %s on %s) of '
                            'bound accelerator request %s again: %s; its '
                            'instance cannot start until it is made.',
                            mdev_uuid, mdev_type, address, arq,
                            self.failed[mdev_uuid])
                return
        if made:
            LOG.info('Made mdev %s of bound accelerator request %s again '
                     '(gone since the agent last ran: a reboot).', mdev_uuid,
                     arq)


_NOT_RECREATED = ('the mdevs of bound accelerator requests are not made '
                  'again at start (after a reboot, their instances cannot '
                  'start until each is made by hand, or the conductors are '
                  'upgraded and the agent restarted)')


def existing(sysfs_root, mdev_uuid):
    """``(parent PCI address, mdev type)`` of the mdev ``mdev_uuid`` (a
    checked uuid), as the kernel shows it; None when there is none."""
    from cyborg.agent import privileged
    link = os.path.join(sysfs_root, 'bus', 'mdev', 'devices', mdev_uuid)
    if not os.path.lexists(link):
        return None
    parent, mdev_type = privileged.mdev_where(link)
    return os.path.basename(parent), mdev_type
