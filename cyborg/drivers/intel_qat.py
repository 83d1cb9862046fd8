"""Intel QuickAssist (QAT) endpoints (vendor 0x8086, PFs of the known QAT
generations).  Instances get VFs: a PF is offered as one provider with rc
``CUSTOM_QAT`` whose inventory is its VF count and whose attach handles are
its VFs.  A PF without VFs enabled serves the host's own crypto and is not
offered.

Traits: ``CUSTOM_QAT``, ``CUSTOM_QAT_<GENERATION>`` and one per service the
endpoint is configured for, where its kernel driver says (in-tree driver,
4xxx and later; kernel ABI ``sysfs-driver-qat``)::

    <PF>/qat/cfg_services            the services, ';'-separated, in any
                                     order: sym, asym, dc, dcc (dc with
                                     chaining), decomp (qat_6xxx)

``CUSTOM_QAT_SYM``, ``CUSTOM_QAT_ASYM``, ``CUSTOM_QAT_DC`` (also for
``dcc``, which compresses too), ``CUSTOM_QAT_DCC``, ``CUSTOM_QAT_DECOMP``:
so a compression profile can require ``CUSTOM_QAT_DC`` and never land on a
crypto-only endpoint.  An endpoint without the file (older generations,
Intel's out-of-tree driver) gets no service trait.

Health: PCI, and the PF's error counters and state (kernel ABI
``sysfs-driver-qat_ras`` and ``sysfs-driver-qat``)::

    <PF>/qat_ras/errors_fatal        errors the endpoint cannot contain: it
                                     needs a reset (an increase -> fatal)
    <PF>/qat_ras/errors_nonfatal     errors confined to the requests in
                                     flight (an increase -> transient)
    <PF>/qat_ras/errors_correctable  corrected by the hardware: transient
                                     only above [agent]aer_correctable_burst
                                     in one check, as PCIe's are
    <PF>/qat/state                   "down": the endpoint serves nothing
                                     (-> fatal while it lasts)

The in-tree driver has these since Linux 6.7 for 4xxx and later
endpoints; Intel's out-of-tree driver names the counters ``ras_fatal``,
``ras_uncorrectable`` and ``ras_correctable`` in the PF's directory.
Older endpoints have none: PCI health only.

And the firmware's heartbeat (in-tree driver, Linux 6.6+, debugfs;
``debugfs-driver-qat``)::

    /sys/kernel/debug/qat_<class>_<PF>/heartbeat/status
                                     reading it has the kernel check the
                                     firmware's heartbeat counters now
    .../heartbeat/queries_failed     checks that found the firmware not
                                     answering (an increase -> fatal)

Each read of ``status`` is a check of the firmware, and the kernel refuses
one sooner than its heartbeat timer (500 ms by default) after the last,
answering -1 without checking: ``status`` is read at most every
HEARTBEAT_INTERVAL seconds, and only a failure the kernel counted is a
fault.  Where debugfs is not mounted or the agent may not read it, the
heartbeat is not watched.
"""

import os

from oslo_log import log as logging

from cyborg.common import states
from cyborg.drivers import base, pci_health, sysfs

LOG = logging.getLogger(__name__)

VENDOR = '8086'
# PF device id -> generation: DH895xCC, C62x, C3xxx, 4xxx, 401xx, 420xx.
PF_MODELS = {'0435': 'DH895XCC', '37c8': 'C62X', '19e2': 'C3XXX',
             '4940': '4XXX', '4942': '401XX', '4944': '402XX',
             '4946': '420XX'}
# Seconds between two heartbeat checks of an endpoint's firmware.
HEARTBEAT_INTERVAL = 30.0
# debugfs, as the kernel mounts it, under the sysfs root.
DEBUGFS = os.path.join('kernel', 'debug')


class IntelQATDriver(base.Driver, pci_health.PCIHealth):

    name = 'intel_qat_driver'

    def discover(self):
        devices = []
        for pf, vfs in base.physical_functions(self.sysfs_root, _is_qat):
            if not vfs:
                LOG.info('QAT %s has no VFs enabled: not offered.',
                         pf.address)
                continue
            model = PF_MODELS[pf.device]
            traits = ['CUSTOM_QAT', base.custom_name('QAT', model)]
            traits += service_traits(pf.path)
            deployable = base.vf_pool_deployable(self, pf, vfs, 'CUSTOM_QAT',
                                                 traits)
            devices.append(base.pci_device(pf, 'QAT', [deployable],
                                           model=model))
        return devices

    # -- health ------------------------------------------------------------

    def more_health(self, device, counters):
        path = self.function_path(device.controlpath_id.cpid_info)
        readings = []
        for kind, names, severity, correctable in RAS_COUNTERS:
            count = _first_int(path, names)
            if count is None:
                continue
            counters[f'qat_errors_{kind}'] = count
            new = self.new_errors(device, ('qat', kind), count,
                                  correctable=correctable)
            if new:
                readings.append(pci_health.reading(
                    device, severity, 'qat',
                    f'{new} new {kind} errors', f'qat:errors_{kind}',
                    event=True))
        if sysfs.read_text(os.path.join(path, 'qat', 'state')) == 'down':
            readings.append(pci_health.reading(
                device, states.FATAL, 'qat',
                'QAT endpoint is down: it serves no requests', 'qat:down'))
        readings.extend(self._heartbeat(device, counters))
        return readings

    def _heartbeat(self, device, counters):
        address = device.controlpath_id.cpid_info
        failed = self.read_sparingly(
            ('qat_heartbeat', address), HEARTBEAT_INTERVAL,
            lambda: self._heartbeat_failures(address))
        if failed is None:
            return []
        counters['qat_heartbeat_failed'] = failed
        if not self.new_errors(device, ('qat', 'heartbeat'), failed):
            return []
        return [pci_health.reading(
            device, states.FATAL, 'qat', 'QAT endpoint\'s firmware does not '
            'answer its heartbeat: it hangs', 'qat:heartbeat', event=True)]

    def _heartbeat_failures(self, address):
        """Have the kernel check the endpoint's heartbeat now and return
        how many of its checks failed so far; None where it shows none."""
        debugfs = os.path.join(self.sysfs_root, DEBUGFS)
        for name in sysfs.listdir(debugfs):
            if name.startswith('qat_') and name.endswith('_' + address):
                path = os.path.join(debugfs, name, 'heartbeat')
                if sysfs.read_int(os.path.join(path, 'status')) is None:
                    return None
                return sysfs.read_int(os.path.join(path, 'queries_failed'))
        return None


# The PF's error counters: (kind, file names, in-tree first, severity of
# an increase, whether it counts only in bursts as corrected errors do).
RAS_COUNTERS = (
    ('fatal', ('qat_ras/errors_fatal', 'ras_fatal'), states.FATAL, False),
    ('nonfatal', ('qat_ras/errors_nonfatal', 'ras_uncorrectable'),
     states.TRANSIENT, False),
    ('correctable', ('qat_ras/errors_correctable', 'ras_correctable'),
     states.TRANSIENT, True),
)


def service_traits(pf_path):
    """The traits of the services the endpoint at ``pf_path`` is configured
    for (``qat/cfg_services``); [] where it does not say."""
    text = sysfs.read_text(os.path.join(pf_path, 'qat', 'cfg_services'))
    services = {s.strip().lower() for s in (text or '').split(';')}
    services.discard('')
    if 'dcc' in services:
        # dc chaining: compression with hashing (or ciphering) first.
        services.add('dc')
    return sorted(base.custom_name('QAT', s) for s in services)


def _first_int(path, names):
    for name in names:
        value = sysfs.read_int(os.path.join(path, name))
        if value is not None:
            return value
    return None


def _is_qat(function):
    return function.vendor == VENDOR and function.device in PF_MODELS
