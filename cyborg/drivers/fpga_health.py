"""FPGA error registers in sysfs, on top of the PCI sources
(``pci_health``).

Intel DFL cards (``DFLHealth``; kernel ABI ``sysfs-platform-dfl-fme`` and
``sysfs-platform-dfl-port``): the FPGA management engine and the ports are
platform devices under the function's FPGA region::

    <function>/fpga_region/region<N>/dfl-fme.<M>/errors/
        catfatal_errors    catastrophic and fatal errors      -> fatal
        nonfatal_errors    non-fatal errors                   -> transient
        fme_errors, pcie0_errors, pcie1_errors                -> transient
    <function>/fpga_region/region<N>/dfl-port.<M>/errors/
        errors             port / accelerator function errors -> transient

Each is a hexadecimal register (``0x0`` when clean) that holds its bits
until cleared, so a non-zero value is a condition reported at every check,
and ``ok`` again once cleared.  ``inject_errors`` (a test aid) and
``first_error`` / ``next_error`` (details of the same bits) are not read.
Port errors of a VF concern the deployable that owns the VF, also when it
is the card's only one (a card with one port has one VF).

Xilinx Alveo cards under XRT (``XilinxHealth``): the management function
(xclmgmt) has one sub-device directory per IP, e.g. ``firewall.*`` and
``mig.*`` (memory controllers)::

    <mgmt function>/firewall.*/status   tripped AXI firewall (!= 0): the
                                        card needs a reset     -> fatal
    <mgmt function>/mig.*/ecc_ue_cnt    uncorrectable ECC, increase -> fatal
    <mgmt function>/mig.*/ecc_ce_cnt    correctable ECC: a burst above
                                        [agent]aer_correctable_burst in one
                                        check                  -> transient

Older XRT releases (or cards without these IPs) expose none of them; the
source is then skipped.
"""

import os

from cyborg.common import states
from cyborg.drivers import pci_health, sysfs

FME_REGISTERS = {
    'catfatal_errors': states.FATAL,
    'nonfatal_errors': states.TRANSIENT,
    'fme_errors': states.TRANSIENT,
    'pcie0_errors': states.TRANSIENT,
    'pcie1_errors': states.TRANSIENT,
}


def _register(path):
    """A register's value, None when it cannot be read."""
    text = sysfs.read_text(path)
    if not text:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def dfl_features(function_path):
    """``[(kind, feature directory)]`` with kind 'fme' or 'port', for the
    DFL features under a PCI function."""
    top = os.path.join(function_path, 'fpga_region')
    found = []
    for region in sysfs.listdir(top):
        region_path = os.path.join(top, region)
        for name in sysfs.listdir(region_path):
            if name.startswith('dfl-fme.'):
                found.append(('fme', os.path.join(region_path, name)))
            elif name.startswith('dfl-port.'):
                found.append(('port', os.path.join(region_path, name)))
    return found


class DFLHealth(pci_health.PCIHealth):
    """PCI health plus DFL FME and port error registers."""

    def more_health(self, device, counters):
        readings = []
        for address, deployable in self._dfl_functions(device):
            path = self.function_path(address)
            for kind, feature in dfl_features(path):
                errors = os.path.join(feature, 'errors')
                if kind == 'fme':
                    readings.extend(self._fme(device, errors))
                else:
                    readings.extend(self._port(device, errors, deployable))
        return readings

    @staticmethod
    def _dfl_functions(device):
        """``[(PCI address, deployable name or None)]``: the control path
        (the FME, maybe a port) and every other function a deployable is
        given (a VF, with its own port), however many deployables there
        are: a card with one port has one VF, the only deployable."""
        controlpath = device.controlpath_id.cpid_info
        functions = [(controlpath, None)]
        for deployable in device.deployables:
            for handle in deployable.attach_handles:
                info = handle.attach_info
                address = '{domain}:{bus}:{device}.{function}'.format(
                    **info)
                if address != controlpath:
                    functions.append((address, deployable.name))
        return functions

    def _fme(self, device, errors):
        readings = []
        for name, severity in FME_REGISTERS.items():
            value = _register(os.path.join(errors, name))
            if value:
                readings.append(pci_health.reading(
                    device, severity, 'fpga',
                    f'FPGA management engine {name} = {value:#x}',
                    f'fpga:fme_{name}'))
        return readings

    def _port(self, device, errors, deployable):
        value = _register(os.path.join(errors, 'errors'))
        if not value:
            return []
        return [pci_health.reading(
            device, states.TRANSIENT, 'fpga',
            f'FPGA port errors = {value:#x}', 'fpga:port_errors',
            deployable=deployable)]


class XilinxHealth(pci_health.PCIHealth):
    """PCI health plus XRT's firewall and memory controller ECC."""

    def more_health(self, device, counters):
        path = self.function_path(device.controlpath_id.cpid_info)
        readings = []
        for name in sysfs.listdir(path):
            sub = os.path.join(path, name)
            if name.startswith('firewall'):
                readings.extend(self._firewall(device, sub))
            elif name.startswith('mig'):
                readings.extend(self._ecc(device, name, sub, counters))
        return readings

    def _firewall(self, device, sub):
        status = sysfs.read_int(os.path.join(sub, 'status'))
        if not status:
            return []
        return [pci_health.reading(
            device, states.FATAL, 'fpga',
            f'AXI firewall tripped (status {status:#x}): the card needs a '
            'reset', 'fpga:firewall')]

    def _ecc(self, device, name, sub, counters):
        readings = []
        for file_name, severity in (('ecc_ue_cnt', states.FATAL),
                                    ('ecc_ce_cnt', states.TRANSIENT)):
            count = sysfs.read_int(os.path.join(sub, file_name))
            if count is None:
                continue
            kind = file_name[:6]
            counters[kind] = counters.get(kind, 0) + count
            new = self.new_errors(device, (name, file_name), count,
                                  correctable=severity == states.TRANSIENT)
            if new:
                what = ('uncorrectable' if severity == states.FATAL
                        else 'correctable')
                readings.append(pci_health.reading(
                    device, severity, 'fpga',
                    f'{new} new {what} ECC errors in memory controller '
                    f'{name}', f'fpga:{kind}', event=True))
        return readings
