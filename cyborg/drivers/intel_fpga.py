"""Intel FPGA cards (vendor 0x8086) under the DFL driver: PACs (Arria 10,
D5005, N3000) and the OFS cards (N6000, N6001...).

The PF holds the FPGA management engine, whose partial-reconfiguration
region has a ``compat_id`` (the region id); ports (on the PF, or on each VF
when SR-IOV is on) hold the loaded accelerator function's ``afu_id``.  With
VFs, each VF is a deployable of its own (each has its own port and
function), else the PF is.  Region and function ids are traits
(``CUSTOM_FPGA_REGION_INTEL_<id>``; the function as
``CUSTOM_FPGA_FUNCTION_ID_<ID>``, ``cyborg.objects.inventory.function_trait``,
the trait the conductor advertises for a function it programmed, and,
for the profiles written for it before, ``CUSTOM_FPGA_FUNCTION_ID_INTEL_<id>``)
so profiles can require them.  Programming uses OPAE's ``fpgaconf``.

The kernel shows the region tree (``fpga_region/``, hence ``compat_id``
and ``afu_id``) only while dfl-pci is bound to the function: a card or VF
passed through to an instance (vfio-pci), or unbound, shows none.  Cards
are therefore found by the PF ids dfl-pci binds (``DFL_PF_IDS``) as well
as by their region tree, and the ids last seen on each function stand
while it is on vfio-pci or unbound (``fpga.LastSeenIds``).
"""

import os

from cyborg.drivers import base, fpga, fpga_health
from cyborg.objects import inventory

VENDOR = '8086'
# PF device id -> model.
PF_MODELS = {'09c4': 'PAC_A10', '0b2b': 'PAC_D5005', '0b30': 'PAC_N3000',
             'bcc0': 'FPGA'}
# The Intel PF device ids the kernel's dfl-pci driver binds (its
# cci_pcie_id_tbl): PF_INT_5_X, PF_INT_6_X, PF_DSC_1_X (PAC Arria 10),
# PAC N3000, PAC D5005, and the OFS cards' DFL id (N6000, N6001, C6100,
# D5005 with the OFS FIM, told apart by subsystem id).  Their VFs
# (VF_INT_5_X 0xbcbf, VF_INT_6_X 0xbcc1, VF_DSC_1_X 0x09c5, D5005 VF
# 0x0b2c, DFL VF 0xbccf) are found through their PF's virtfn links.
DFL_PF_IDS = frozenset({'bcbd', 'bcc0', '09c4', '0b30', '0b2b', 'bcce'})
# PF device id -> the model as OpenStack Cyborg's Intel FPGA driver names
# it in its trait (CUSTOM_FPGA_INTEL_<name>), where that differs from ours.
CYBORG_MODELS = {'09c4': 'PAC_ARRIA10'}


class IntelFPGADriver(base.Driver, fpga.ToolProgrammable,
                      fpga_health.DFLHealth):

    name = 'intel_fpga_driver'

    def _last_seen(self):
        return self.__dict__.setdefault(
            '_last_seen_ids',
            fpga.LastSeenIds(self.conf, self.name, self.host))

    def discover(self):
        last_seen = self._last_seen()
        devices = []
        addresses = []
        for pf, vfs in base.physical_functions(self.sysfs_root, _is_fpga):
            model = PF_MODELS.get(pf.device, pf.device)
            regions = last_seen.ids(pf)['compat_id']
            models = [model, CYBORG_MODELS.get(pf.device)]
            deployables = [self._deployable(f, models, regions)
                           for f in (vfs or [pf])]
            devices.append(base.pci_device(pf, 'FPGA', deployables,
                                           model=model))
            addresses += [pf.address] + [vf.address for vf in vfs]
        last_seen.keep(addresses)
        return self.with_bitstreams(devices)

    def _deployable(self, function, models, regions):
        """``models``: the card's model names, each a trait (None: no
        such name)."""
        functions = self._last_seen().ids(function)['afu_id']
        traits = (['CUSTOM_FPGA_INTEL']
                  + [base.custom_name('FPGA_INTEL', m) for m in models if m]
                  + [base.custom_name('FPGA_REGION_INTEL', r)
                     for r in regions]
                  + [inventory.function_trait(f) for f in functions]
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

    def fingerprint(self, device):
        return self.function_id_fingerprint(device)

    def fpga_tool(self, controlpath_id):
        return 'fpgaconf', controlpath_id


def _is_fpga(function):
    return function.vendor == VENDOR and (
        function.device in DFL_PF_IDS or
        os.path.isdir(os.path.join(function.path, 'fpga_region')))
