"""Intel FPGA cards (vendor 0x8086) under the DFL driver: PACs (Arria 10,
D5005, N3000).

The PF holds the FPGA management engine, whose partial-reconfiguration
region has a ``compat_id`` (the region id); ports (on the PF, or on each VF
when SR-IOV is on) hold the loaded accelerator function's ``afu_id``.  With
VFs, each VF is a deployable of its own (each has its own port and
function), else the PF is.  Region and function ids are traits
(``CUSTOM_FPGA_REGION_INTEL_<id>``, ``CUSTOM_FPGA_FUNCTION_ID_INTEL_<id>``)
so profiles can require them.  Programming uses OPAE's ``fpgaconf``.
"""

import os

from cyborg.drivers import base, fpga, fpga_health, sysfs
from cyborg.objects import inventory

VENDOR = '8086'
# PF device id -> model.
PF_MODELS = {'09c4': 'PAC_A10', '0b2b': 'PAC_D5005', '0b30': 'PAC_N3000',
             'bcc0': 'FPGA'}
# PF device id -> the model as OpenStack Cyborg's Intel FPGA driver names
# it in its trait (CUSTOM_FPGA_INTEL_<name>), where that differs from ours.
CYBORG_MODELS = {'09c4': 'PAC_ARRIA10'}


class IntelFPGADriver(base.Driver, fpga.ToolProgrammable,
                      fpga_health.DFLHealth):

    name = 'intel_fpga_driver'

    def discover(self):
        tree = sysfs.Sysfs(self.sysfs_root)
        devices = []
        for pf, vfs in base.physical_functions(self.sysfs_root, _is_fpga):
            model = PF_MODELS.get(pf.device, pf.device)
            regions = _ids(tree, pf, 'compat_id')
            models = [model, CYBORG_MODELS.get(pf.device)]
            deployables = [self._deployable(tree, f, models, regions)
                           for f in (vfs or [pf])]
            devices.append(base.pci_device(pf, 'FPGA', deployables,
                                           model=model))
        return self.with_bitstreams(devices)

    def _deployable(self, tree, function, models, regions):
        """``models``: the card's model names, each a trait (None: no
        such name)."""
        functions = _ids(tree, function, 'afu_id')
        traits = (['CUSTOM_FPGA_INTEL']
                  + [base.custom_name('FPGA_INTEL', m) for m in models if m]
                  + [base.custom_name('FPGA_REGION_INTEL', r)
                     for r in regions]
                  + [base.custom_name('FPGA_FUNCTION_ID_INTEL', f)
                     for f in functions])
        attributes = base.make_attributes(
            'FPGA', traits, region_id=','.join(regions) or None,
            function_id=','.join(functions) or None,
            **function.descriptive())
        return inventory.Deployable(
            name=base.deployable_name(self.host, function.address),
            num_accelerators=1, attributes=attributes,
            attach_handles=[base.pci_handle(function.address)],
            driver_name=self.name)

    def fpga_tool(self, controlpath_id):
        return 'fpgaconf', controlpath_id


def _is_fpga(function):
    return function.vendor == VENDOR and (
        function.device in PF_MODELS or
        os.path.isdir(os.path.join(function.path, 'fpga_region')))


def _ids(tree, function, file_name):
    """Ids in ``file_name`` files of the function's own FPGA regions, as
    Placement-safe lower-case hex without dashes."""
    top = os.path.join(function.path, 'fpga_region')
    paths = tree.find_files(top, [file_name])[file_name]
    ids = (sysfs.read_text(p, '') for p in paths)
    return sorted({i.replace('-', '').lower() for i in ids if i})
