"""Inspur NVMe SSDs (vendor 0x1bd4, class 0x0108): type SSD, rc
``CUSTOM_SSD``, each controller passed through whole."""

from cyborg.drivers import base, pci_health

VENDOR = '1bd4'
NVME = '0108'


class InspurNVMeSSDDriver(base.WholeFunctionDriver, pci_health.PCIHealth):

    name = 'inspur_nvme_ssd_driver'
    device_type = 'SSD'
    resource_class = 'CUSTOM_SSD'

    def matches(self, function):
        return function.vendor == VENDOR and function.base_class == NVME

    def traits(self, function):
        return ['CUSTOM_SSD_INSPUR',
                base.custom_name('SSD_INSPUR', function.device)]
