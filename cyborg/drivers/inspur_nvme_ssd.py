"""Inspur NVMe SSDs (vendor 0x1bd4, class 0x0108): type SSD, rc
``CUSTOM_SSD``, each controller passed through whole."""

from cyborg.drivers import base

VENDOR = '1bd4'
NVME = '0108'


class InspurNVMeSSDDriver(base.Driver):

    name = 'inspur_nvme_ssd_driver'

    def discover(self):
        devices = []
        for pf, _vfs in base.physical_functions(self.sysfs_root, _is_ssd):
            traits = ['CUSTOM_SSD_INSPUR',
                      base.custom_name('SSD_INSPUR', pf.device)]
            deployable = base.whole_function_deployable(self, pf,
                                                        'CUSTOM_SSD', traits)
            devices.append(base.pci_device(pf, 'SSD', [deployable]))
        return devices


def _is_ssd(function):
    return function.vendor == VENDOR and function.base_class == NVME
