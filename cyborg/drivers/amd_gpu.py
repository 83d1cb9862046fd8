"""AMD GPUs (vendor 0x1002) of class 0x0300 VGA, 0x0380 display (how
Instinct MI100 to MI250X present) or 0x1200 processing accelerator (how
Instinct MI300X, MI300A, MI325X and MI350 present, e.g. 1002:74a1).
AMD's other devices, such as its XDNA NPUs, are vendor 0x1022: never
matched.  Cyborg has no AMD driver.

A GPU without SR-IOV VFs is offered whole as PGPU.  With VFs enabled
(MxGPU), the PF stays with the host and its VFs are offered as one VGPU
provider with one PCI attach handle per VF.  Other functions of the card
(HDMI audio, class 0x0403) are not GPUs.

Health and usage: PCI, and amdgpu's RAS error counts, bad memory pages,
utilization, memory, temperature and power (``amdgpu_health``).
"""

from cyborg.drivers import amdgpu_health, base

VENDOR = '1002'
GPU_CLASSES = ('0300', '0380', '1200')


class AMDGPUDriver(base.Driver, amdgpu_health.AMDGPUHealth):

    name = 'amd_gpu_driver'

    def discover(self):
        devices = []
        for pf, vfs in base.physical_functions(self.sysfs_root, _is_gpu):
            traits = [base.custom_name('AMD', pf.device)]
            if vfs:
                deployable = base.vf_pool_deployable(self, pf, vfs, 'VGPU',
                                                     traits)
            else:
                deployable = base.whole_function_deployable(self, pf, 'PGPU',
                                                            traits)
            devices.append(base.pci_device(pf, 'GPU', [deployable]))
        return devices


def _is_gpu(function):
    return function.vendor == VENDOR and function.base_class in GPU_CLASSES
