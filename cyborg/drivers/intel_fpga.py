"""DFL FPGA cards, those the kernel's dfl-pci driver binds: Intel's
(vendor 0x8086: PACs Arria 10, D5005, N3000, and the OFS cards N6000,
N6001...) and Silicom's (vendor 0x1c2c: PAC N5010, N5011), whose FPGA is
Intel's under the same DFL framework.

The PF holds the FPGA management engine, whose partial-reconfiguration
region has a ``compat_id`` (the region id); ports (on the PF, or on each VF
when SR-IOV is on) hold the loaded accelerator function's ``afu_id``.  With
VFs, each VF is a deployable of its own (each has its own port and
function), else the PF is.  The vendor and model traits name the card's
vendor (``CUSTOM_FPGA_INTEL``, ``CUSTOM_FPGA_SILICOM_PAC_N5010``); region
and function ids, DFL ids whatever the vendor, are traits
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
while it is on vfio-pci or unbound (``fpga.LastSeen``), but for the
function of a PF passed through whole: an instance holding the PF holds
the management engine too, and can load a function of its own (partial
reconfiguration), so that card's function is unknown until dfl-pci reads
it again.  A VF's instance cannot (the engine stays on the host's PF).
What was last seen on a function is used in the boot it was seen in
only: a reboot resets the region to the flash's default.  A card whose
VFs all show no function (on vfio-pci from the start) proves the image
it was programmed with by its region ids, its VFs and the boot id, read
on the PF (``IntelFPGADriver.fingerprint``).
"""

import os

from cyborg.drivers import base, fpga, fpga_health, sysfs
from cyborg.objects import inventory

# The PCI vendors of the DFL cards dfl-pci binds, as their traits name
# them (CUSTOM_FPGA_<vendor>, CUSTOM_FPGA_<vendor>_<model>).
VENDORS = {'8086': 'INTEL', '1c2c': 'SILICOM'}
VENDOR = '8086'
SILICOM = '1c2c'
# (vendor, PF device id) -> model.
PF_MODELS = {(VENDOR, '09c4'): 'PAC_A10', (VENDOR, '0b2b'): 'PAC_D5005',
             (VENDOR, '0b30'): 'PAC_N3000', (VENDOR, 'bcc0'): 'FPGA',
             (SILICOM, '1000'): 'PAC_N5010', (SILICOM, '1001'): 'PAC_N5011'}
# The PF ids (vendor, device) the kernel's dfl-pci driver binds (its
# cci_pcie_id_tbl): Intel's PF_INT_5_X, PF_INT_6_X, PF_DSC_1_X (PAC
# Arria 10), PAC N3000, PAC D5005, and the OFS cards' DFL id (N6000,
# N6001, C6100, D5005 with the OFS FIM, told apart by subsystem id);
# Silicom Denmark's PAC N5010 and N5011.  Their VFs (VF_INT_5_X 0xbcbf,
# VF_INT_6_X 0xbcc1, VF_DSC_1_X 0x09c5, D5005 VF 0x0b2c, DFL VF 0xbccf)
# are found through their PF's virtfn links.
DFL_PF_IDS = frozenset(
    {(VENDOR, d) for d in ('bcbd', 'bcc0', '09c4', '0b30', '0b2b', 'bcce')}
    | {(SILICOM, '1000'), (SILICOM, '1001')})
# (vendor, PF device id) -> the model as OpenStack Cyborg's Intel FPGA
# driver names it in its trait (CUSTOM_FPGA_INTEL_<name>), where that
# differs from ours.
CYBORG_MODELS = {(VENDOR, '09c4'): 'PAC_ARRIA10'}
# What the region tree shows of a function: the region id and the
# function ids.
DFL_NAMES = ('compat_id', 'afu_id')


class IntelFPGADriver(base.Driver, fpga.ToolProgrammable,
                      fpga_health.DFLHealth):

    name = 'intel_fpga_driver'

    def discover(self):
        devices = []
        addresses = []
        for pf, vfs in base.physical_functions(self.sysfs_root, _is_fpga):
            ids = (pf.vendor, pf.device)
            model = PF_MODELS.get(ids, pf.device)
            # Read once: the PF's region, and its function where it is
            # the card's only deployable.
            pf_ids = self._ids(pf, held_whole=not vfs)
            regions = pf_ids['compat_id']
            vendor = VENDORS[pf.vendor]
            models = [model, CYBORG_MODELS.get(ids)]
            deployables = [
                self._deployable(f, vendor, models, regions,
                                 (self._ids(f) if vfs else pf_ids)['afu_id'])
                for f in (vfs or [pf])]
            devices.append(base.pci_device(pf, 'FPGA', deployables,
                                           model=model))
            addresses += [pf.address] + [vf.address for vf in vfs]
        self._last_seen().keep(addresses)
        return self.with_bitstreams(devices)

    def _ids(self, function, held_whole=False):
        """``{'compat_id': [ids], 'afu_id': [ids]}`` of ``function``: read
        on its region tree, or last seen there (``fpga.LastSeen``); but no
        ``afu_id`` last seen for a PF that is its card's only deployable
        (``held_whole``): passed through, its instance may have loaded
        another function."""
        now = None
        if os.path.isdir(os.path.join(function.path, 'fpga_region')):
            now = {name: fpga.dfl_ids(function.path, name)
                   for name in DFL_NAMES}
        found = self._last_seen().read(
            function, now,
            fpga.identity_marks(function) + fpga.boot_marks()) or {}
        if now is None and held_whole:
            found = dict(found, afu_id=[])
        return {name: found.get(name, []) for name in DFL_NAMES}

    def _deployable(self, function, vendor, models, regions, functions):
        """``vendor``: the card's vendor as its traits name it;
        ``models``: its model names, each a trait (None: no such name);
        ``regions``, ``functions``: the region and function ids
        (``_ids``).  The region and function traits are the DFL ids'
        whatever the card's vendor."""
        traits = (['CUSTOM_FPGA_' + vendor]
                  + [base.custom_name('FPGA', vendor, m)
                     for m in models if m]
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
        """The function ids its deployables show; for a card with VFs of
        which none shows one (all on vfio-pci, where Nova wants them),
        the card's region, VFs and boot (``_card_fingerprint``)."""
        return (self.function_id_fingerprint(device)
                or self._card_fingerprint(device))

    def _card_fingerprint(self, device):
        """What holds the card's function while its VFs show none: the
        PF's region ids (read while dfl-pci holds it, and the management
        engine with it: no instance holding a VF can reprogram the
        card), its VFs and this boot's id, with the PF's identity marks;
        [] for a card without VFs (a PF passed through whole: its
        instance can reprogram it), whose region does not show, or when
        the boot id cannot be read."""
        pf = sysfs.Sysfs(self.sysfs_root).pci_function(
            device.controlpath_id.cpid_info)
        if pf is None or not pf.virtfns:
            return []
        regions = fpga.dfl_ids(pf.path, 'compat_id')
        boot = fpga.boot_marks()
        if not regions or fpga.UNKNOWN_BOOT in boot:
            return []
        return fpga.fingerprint_of(
            ['region=' + r for r in regions]
            + ['vf=' + a for a in sorted(pf.virtfns)] + boot,
            fpga.identity_marks(pf))

    def fpga_tool(self, controlpath_id):
        return 'fpgaconf', controlpath_id

    def card_functions(self, controlpath_id):
        """The PF and its VFs: each VF's port runs what the region
        programmed runs."""
        for pf, vfs in base.physical_functions(self.sysfs_root, _is_fpga):
            if pf.address == controlpath_id:
                return [pf.address] + [vf.address for vf in vfs]
        return [controlpath_id]


def _is_fpga(function):
    return (function.vendor, function.device) in DFL_PF_IDS or (
        function.vendor in VENDORS and
        os.path.isdir(os.path.join(function.path, 'fpga_region')))
