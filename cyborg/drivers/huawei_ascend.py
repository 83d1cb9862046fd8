"""Huawei Ascend AI processors (vendor 0x19e5): device type AICHIP with rc
``CUSTOM_AICHIP`` and model traits, which Cyborg's driver leaves out (so
its Ascend cards could not be scheduled by trait)."""

from cyborg.drivers import base, pci_health

VENDOR = '19e5'
# Device id -> model (Ascend 310, 310P, 910, 910B).
MODELS = {'d100': '310', 'd500': '310P', 'd801': '910', 'd802': '910B'}


class HuaweiAscendDriver(base.WholeFunctionDriver, pci_health.PCIHealth):

    name = 'huawei_ascend_driver'
    device_type = 'AICHIP'
    resource_class = 'CUSTOM_AICHIP'

    def matches(self, function):
        return function.vendor == VENDOR and function.device in MODELS

    def traits(self, function):
        return ['CUSTOM_HUAWEI_ASCEND',
                base.custom_name('HUAWEI_ASCEND', MODELS[function.device])]

    def model(self, function):
        return 'Ascend ' + MODELS[function.device]

    def extra_attributes(self, function):
        return {'model': MODELS[function.device]}
