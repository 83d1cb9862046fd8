"""Huawei Ascend AI processors (vendor 0x19e5): device type AICHIP with rc
``CUSTOM_AICHIP`` and model traits, which Cyborg's driver leaves out (so
its Ascend cards could not be scheduled by trait)."""

from cyborg.drivers import base

VENDOR = '19e5'
# Device id -> model (Ascend 310, 310P, 910, 910B).
MODELS = {'d100': '310', 'd500': '310P', 'd801': '910', 'd802': '910B'}
RESOURCE_CLASS = 'CUSTOM_AICHIP'


class HuaweiAscendDriver(base.Driver):

    name = 'huawei_ascend_driver'

    def discover(self):
        devices = []
        for pf, _vfs in base.physical_functions(self.sysfs_root, _is_ascend):
            model = MODELS[pf.device]
            traits = ['CUSTOM_HUAWEI_ASCEND',
                      base.custom_name('HUAWEI_ASCEND', model)]
            deployable = base.whole_function_deployable(
                self, pf, RESOURCE_CLASS, traits, model=model)
            devices.append(base.pci_device(pf, 'AICHIP', [deployable],
                                           model='Ascend ' + model))
        return devices


def _is_ascend(function):
    return function.vendor == VENDOR and function.device in MODELS
