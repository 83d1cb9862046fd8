"""Any PCI function, offered by allowlist: ``[agent]passthrough_whitelist``
entries in Nova's ``[pci]device_spec`` JSON format.

Matching keys (as in Nova): ``vendor_id``, ``product_id`` (hex or ``*``),
``address`` (a glob string ``[[[domain]:]bus]:][slot][.[function]]`` or a
dict of ``domain``/``bus``/``slot``/``function`` regular expressions) and
``devname`` (a network interface name).  Every other key is a tag; these
tags are ours: ``resource_class`` (default ``CUSTOM_PCI``), ``traits``
(a string of comma-separated names, default
``CUSTOM_PCI_<VENDOR>_<PRODUCT>``), ``device_type`` (default from the PCI
class: network NIC, display GPU, NVMe SSD, co-processor QAT; a processing
accelerator (class 12) GPU from AMD (Instinct), FPGA from Xilinx, else
AICHIP)
and ``physical_network`` (a string, put on the attach handle, as for NICs;
empty is none).
As in Nova, a standard resource class or trait (os-resource-classes,
os-traits: ``PGPU``, ``HW_GPU_API_VULKAN``) and a ``CUSTOM_`` name are kept
as they are; any other name is upper-cased, its characters outside
Placement's alphabet replaced by ``_``, and prefixed ``CUSTOM_``.  A PF
whose VFs are enabled is left to its VFs.  An entry that cannot be parsed,
or whose tags are of the wrong type or make no name Placement takes,
stops the agent at start with the entry in the message rather than
failing every discovery or silently offering nothing.
"""

import fnmatch
import json
import re

from cyborg.drivers import amd_gpu, base, pci_health, xilinx_fpga
from cyborg.objects import inventory

_WIDTHS = {'domain': 4, 'bus': 2, 'slot': 2, 'function': 1}
_MATCH_KEYS = {'vendor_id', 'product_id', 'address', 'devname'}
DEVICE_TYPES = ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD')


# Processing accelerators (class 12) whose vendor says what they are.
_ACCELERATOR_TYPES = {amd_gpu.VENDOR: 'GPU', xilinx_fpga.VENDOR: 'FPGA'}


def _type_for_class(base_class, vendor):
    if base_class.startswith('12'):
        return _ACCELERATOR_TYPES.get(vendor, 'AICHIP')
    if base_class.startswith('02'):
        return 'NIC'
    if base_class.startswith('03'):
        return 'GPU'
    if base_class == '0108':
        return 'SSD'
    if base_class == '0b40':
        return 'QAT'
    return 'AICHIP'


def _address_parts(function_address):
    domain, bus, rest = function_address.split(':')
    slot, function = rest.split('.')
    return {'domain': domain, 'bus': bus, 'slot': slot, 'function': function}


def _pad(value, field):
    if '*' in value:
        return value.lower()
    return '%0*x' % (_WIDTHS[field], int(value, 16))


class DeviceSpec:
    """One allowlist entry."""

    def __init__(self, text):
        try:
            spec = json.loads(text)
            if not isinstance(spec, dict):
                raise ValueError('not a JSON object')
            self.vendor_id = _pad(spec.get('vendor_id', '*'), 'domain')
            self.product_id = _pad(spec.get('product_id', '*'), 'domain')
            self.devname = spec.get('devname')
            self._address = self._parse_address(spec.get('address', '*'))
            self.tags = {k: v for k, v in spec.items()
                         if k not in _MATCH_KEYS}
            self.device_type = self.tags.get('device_type')
            if (self.device_type is not None and
                    self.device_type not in DEVICE_TYPES):
                allowed = ', '.join(DEVICE_TYPES)
                raise ValueError(f'device_type must be one of {allowed}')
            self.resource_class = _placement_name(
                'resource_class', self.tags.get('resource_class',
                                                'CUSTOM_PCI'),
                inventory.standard_resource_classes())
            self.traits = self._parse_traits(self.tags.get('traits'))
            self.physical_network = self.tags.get('physical_network')
            if (self.physical_network is not None and
                    not isinstance(self.physical_network, str)):
                raise ValueError('physical_network must be a string')
            # An empty one is none (as entries that worked before wrote).
            self.physical_network = (self.physical_network or '').strip() \
                or None
        except (ValueError, TypeError, AttributeError, re.error) as exc:
            raise ValueError('Invalid [agent]passthrough_whitelist entry '
                             f'{text}: {exc}') from exc

    @staticmethod
    def _parse_traits(traits):
        """The traits tag's names, normalised; [] when it names none."""
        if traits is None:
            return []
        if not isinstance(traits, str):
            raise ValueError('traits must be a string of comma-separated '
                             f'trait names, not {traits!r}')
        standard = None
        found = []
        for name in traits.split(','):
            name = name.strip()
            if name:
                if standard is None:
                    standard = inventory.standard_traits()
                found.append(_placement_name('traits', name, standard))
        return found

    @staticmethod
    def _parse_address(address):
        if isinstance(address, dict):
            return {field: re.compile(address.get(field, '.*'))
                    for field in _WIDTHS}
        dbs, _, function = address.partition('.')
        parts = dbs.split(':')
        if len(parts) > 3:
            raise ValueError(f'bad address {address!r}')
        parts = ['*'] * (3 - len(parts)) + parts
        values = dict(zip(('domain', 'bus', 'slot'), parts))
        values['function'] = function or '*'
        return {field: _pad(value or '*', field)
                for field, value in values.items()}

    def _address_matches(self, address):
        parts = _address_parts(address)
        for field, pattern in self._address.items():
            if isinstance(pattern, str):
                if not fnmatch.fnmatchcase(parts[field], pattern):
                    return False
            elif not pattern.fullmatch(parts[field]):
                return False
        return True

    def matches(self, function):
        return (fnmatch.fnmatchcase(function.vendor, self.vendor_id) and
                fnmatch.fnmatchcase(function.device, self.product_id) and
                (self.devname is None or
                 self.devname in function.net_interfaces) and
                self._address_matches(function.address))


def _placement_name(tag, name, standard):
    """``name`` as Placement is to be given it: a standard name (one of
    ``standard``) as it is, else ``base.custom_name(name)``; ValueError
    when ``name`` is not a string or makes no name Placement takes."""
    if not isinstance(name, str):
        raise ValueError(f'{tag} must be a string, not {name!r}')
    name = name.strip()
    if name in standard:
        return name
    custom = base.custom_name(name)
    if not inventory.CUSTOM_NAME.fullmatch(custom):
        raise ValueError(
            f'{tag} {name!r} makes {custom!r}, which is not CUSTOM_ '
            f'followed by 1 to 248 upper case letters, digits or '
            f'underscores')
    return custom


class PCIDriver(base.Driver, pci_health.PCIHealth):

    name = 'pci_driver'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.specs = [DeviceSpec(text)
                      for text in conf.agent.passthrough_whitelist]

    def discover(self):
        devices = []
        for pf, vfs in base.physical_functions(self.sysfs_root,
                                               lambda f: True):
            for function in vfs or [pf]:
                spec = self._spec_for(function)
                if spec is not None:
                    devices.append(self._device(function, spec))
        return devices

    def _spec_for(self, function):
        for spec in self.specs:
            if spec.matches(function):
                return spec
        return None

    def _device(self, function, spec):
        traits = spec.traits or [base.custom_name('PCI', function.vendor,
                                                  function.device)]
        physnet = spec.physical_network
        deployable = base.whole_function_deployable(
            self, function, spec.resource_class, traits,
            physical_network=physnet)
        if physnet:
            deployable.attach_handles = [base.pci_handle(
                function.address, physical_network=physnet)]
        device_type = spec.device_type or _type_for_class(
            function.base_class, function.vendor)
        return base.pci_device(function, device_type, [deployable])
