"""Intel QuickAssist (QAT) endpoints (vendor 0x8086, PFs of the known QAT
generations).  Instances get VFs: a PF is offered as one provider with rc
``CUSTOM_QAT`` whose inventory is its VF count and whose attach handles are
its VFs.  A PF without VFs enabled serves the host's own crypto and is not
offered."""

from oslo_log import log as logging

from cyborg.drivers import base, pci_health

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


def _is_qat(function):
    return function.vendor == VENDOR and function.device in PF_MODELS
