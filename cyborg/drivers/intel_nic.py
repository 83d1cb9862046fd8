"""Intel SR-IOV NICs (vendor 0x8086, Ethernet class 0x0200).

A PF is offered when it has VFs and is mapped to a physical network in
``[agent]physical_device_mappings`` (by its interface name or PCI
address): one provider with rc ``CUSTOM_NIC``, inventory = VF count,
traits ``CUSTOM_NIC``, ``CUSTOM_PHYSNET_<NAME>`` and the product, plus
the names OpenStack Cyborg's driver gives its VFs (``CUSTOM_VF``,
``CUSTOM_<NAME>``) so device profiles written for it keep matching; and one
PCI attach handle per VF carrying ``physical_network`` (Nova reads it to
plug the port).  Unmapped PFs are not offered: a VF on an unknown network
cannot be given to a port.

Health: PCI, and the link of the PF's network interfaces
(``<PF>/net/<interface>/operstate``): "down" (taken down, or no carrier)
or "lowerlayerdown" means its VFs carry no traffic, ``fatal`` while it
lasts; the VFs' instances are named in the health change notification.
"""

import os

from oslo_log import log as logging

from cyborg.common import states
from cyborg.drivers import base, pci_health, sysfs

LOG = logging.getLogger(__name__)

VENDOR = '8086'
ETHERNET = '0200'
# Operational states (RFC 2863, as the kernel reports them) in which the
# port passes no traffic.
LINK_DOWN = ('down', 'lowerlayerdown')


class IntelNICDriver(base.Driver, pci_health.PCIHealth):

    name = 'intel_nic_driver'

    def discover(self):
        mappings = _mappings(self.conf.agent.physical_device_mappings)
        devices = []
        for pf, vfs in base.physical_functions(self.sysfs_root, _is_nic):
            physnet = _physnet(pf, mappings)
            if not vfs or physnet is None:
                LOG.debug('NIC %s not offered (VFs: %d, physnet: %s).',
                          pf.address, len(vfs), physnet)
                continue
            traits = ['CUSTOM_NIC', base.custom_name('PHYSNET', physnet),
                      base.custom_name('NIC_INTEL', pf.device),
                      'CUSTOM_VF', base.custom_name(physnet)]
            deployable = base.vf_pool_deployable(
                self, pf, vfs, 'CUSTOM_NIC', traits,
                handle_extra={'physical_network': physnet},
                physical_network=physnet,
                interface=','.join(pf.net_interfaces) or None)
            devices.append(base.pci_device(pf, 'NIC', [deployable]))
        return devices

    def more_health(self, device, counters):
        net = os.path.join(
            self.function_path(device.controlpath_id.cpid_info), 'net')
        readings = []
        for interface in sysfs.listdir(net):
            state = sysfs.read_text(os.path.join(net, interface, 'operstate'))
            if state in LINK_DOWN:
                readings.append(pci_health.reading(
                    device, states.FATAL, 'nic',
                    f'{interface} link is {state}: its VFs carry no '
                    f'traffic', 'nic:link_down'))
        return readings


def _is_nic(function):
    return function.vendor == VENDOR and function.base_class == ETHERNET


def _mappings(option):
    """{interface or PCI address: physnet} of ``[agent]
    physical_device_mappings``: each entry split at its LAST colon (a PCI
    address has colons, a physnet name none); an entry without one is
    logged and left out."""
    mappings = {}
    for entry in option:
        key, colon, value = entry.strip().rpartition(':')
        if not colon or not key or not value:
            LOG.warning('Ignoring [agent]physical_device_mappings entry %r: '
                        'not <interface or PCI address>:<physnet>', entry)
            continue
        mappings[key] = value
    return mappings


def _physnet(pf, mappings):
    for key in [pf.address] + pf.net_interfaces:
        if key in mappings:
            return mappings[key]
    return None
