"""Xilinx Alveo FPGA cards (vendor 0x10ee, processing accelerator class).

An Alveo card shows two functions on one slot: the management function
(xclmgmt, the lower function number: the device's control path) and the
user function (xocl), which is what an instance gets.  One deployable per
card, rc FPGA, programmed with XRT's ``xbutil program`` on the user
function.

What proves which image a card runs (``fingerprint``): the uuid of the
xclbin loaded, which xocl shows in the user function's ``xclbinuuid``
(one per line, empty when none is loaded; absent while xocl is not bound,
e.g. the user function passed through to an instance), together with both
functions' PCI ids and the card's serial number (``serial_num`` of the
XMC or, on Versal cards, ``hwmon_sdm`` sub-device, where readable).  A
user function passed through (vfio-pci) or unbound shows nothing, and
nothing read before it was stands for it (unlike an Intel DFL card's
``fpga.LastSeen``): an instance holding the user function can load
xclbins of its own, through xclmgmt's mailbox on the host, so the card
runs no known image until xocl reads it again.
"""

import os

from cyborg.drivers import base, fpga, fpga_health, sysfs
from cyborg.objects import inventory

VENDOR = '10ee'
ACCELERATOR_CLASS = '1200'


class XilinxFPGADriver(base.Driver, fpga.ToolProgrammable,
                       fpga_health.XilinxHealth):

    name = 'xilinx_fpga_driver'

    def discover(self):
        devices = []
        for mgmt, user in self._cards():
            traits = ['CUSTOM_FPGA_XILINX',
                      base.custom_name('FPGA_XILINX', mgmt.device),
                      base.custom_name('FPGA_PRODUCT_ID', mgmt.device)]
            attributes = base.make_attributes('FPGA', traits,
                                              **mgmt.descriptive())
            deployable = inventory.Deployable(
                name=base.deployable_name(self.host, mgmt.address),
                num_accelerators=1, attributes=attributes,
                attach_handles=[base.pci_handle(user.address)],
                driver_name=self.name)
            devices.append(base.pci_device(mgmt, 'FPGA', [deployable]))
        return self.with_bitstreams(devices)

    def _cards(self):
        """``[(management function, user function)]`` per slot."""
        slots = {}
        for function in sysfs.Sysfs(self.sysfs_root).pci_functions():
            if (function.vendor == VENDOR and not function.is_vf and
                    function.base_class == ACCELERATOR_CLASS):
                slots.setdefault(function.address[:-2], []).append(function)
        cards = []
        for functions in slots.values():
            functions.sort(key=lambda f: f.address)
            cards.append((functions[0], functions[-1]))
        return sorted(cards, key=lambda card: card[0].address)

    def fingerprint(self, device):
        card = [(m, u) for m, u in self._cards()
                if m.address == device.controlpath_id.cpid_info]
        if not card:
            return []
        mgmt, user = card[0]
        # The uuids of the xclbins the card runs, as xocl shows them in
        # the user function's xclbinuuid: none when none is loaded or
        # nothing shows which (xocl not bound).
        proofs = ['xclbin=' + uuid.lower() for uuid in sysfs.read_text(
            os.path.join(user.path, 'xclbinuuid'), '').split()]
        return fpga.fingerprint_of(proofs, _identity(mgmt, user))

    def fpga_tool(self, controlpath_id):
        user = {m.address: u for m, u in self._cards()}[controlpath_id]
        return 'xbutil', user.address


def _identity(mgmt, user):
    """Which card the functions ``mgmt`` and ``user`` are: both's PCI ids
    and the serial number, where readable."""
    return (fpga.identity_marks(mgmt) + fpga.identity_marks(user)
            + ['serial=' + serial for serial in
               _serial_numbers(mgmt) or _serial_numbers(user)])


def _serial_numbers(function):
    """The card's serial number(s) as the XRT sub-devices of ``function``
    show them (``xmc.<m|u>.<N>/serial_num``, ``hwmon_sdm.<...>/serial_num``
    on Versal cards); [] when none reads."""
    found = set()
    for name in sysfs.listdir(function.path):
        if name.startswith(('xmc.', 'hwmon_sdm.')):
            serial = sysfs.read_text(
                os.path.join(function.path, name, 'serial_num'))
            if serial:
                found.add(serial)
    return sorted(found)
