"""Intel QuickAssist (QAT) endpoints (vendor 0x8086, PFs of the known QAT
generations).  Instances get VFs: a PF is offered as one provider with rc
``CUSTOM_QAT`` whose inventory is its VF count and whose attach handles are
its VFs.  A PF without VFs enabled serves the host's own crypto and is not
offered.

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
                    f'{new} new {kind} errors', f'qat:errors_{kind}'))
        if sysfs.read_text(os.path.join(path, 'qat', 'state')) == 'down':
            readings.append(pci_health.reading(
                device, states.FATAL, 'qat',
                'QAT endpoint is down: it serves no requests', 'qat:down'))
        return readings


# The PF's error counters: (kind, file names, in-tree first, severity of
# an increase, whether it counts only in bursts as corrected errors do).
RAS_COUNTERS = (
    ('fatal', ('qat_ras/errors_fatal', 'ras_fatal'), states.FATAL, False),
    ('nonfatal', ('qat_ras/errors_nonfatal', 'ras_uncorrectable'),
     states.TRANSIENT, False),
    ('correctable', ('qat_ras/errors_correctable', 'ras_correctable'),
     states.TRANSIENT, True),
)


def _first_int(path, names):
    for name in names:
        value = sysfs.read_int(os.path.join(path, name))
        if value is not None:
            return value
    return None


def _is_qat(function):
    return function.vendor == VENDOR and function.device in PF_MODELS
