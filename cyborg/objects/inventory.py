"""What drivers discover and agents report: plain, JSON-able data classes.

A host's inventory is a list of ``DriverDevice``; each has one control path
id (its PCI address), its deployables (the units Placement schedules: one
resource provider each), their attributes (``rc``, ``trait*`` and
descriptive ones) and attach handles (what an instance gets).

These classes hold no database or RPC logic: drivers build them, the agent
diffs and sends them, the conductor plans against them.
"""

import dataclasses
import hashlib
import functools
import json
import re
import uuid as uuidlib

# Namespace of the deterministic row uuids (see cyborg.db.models).
_ROW_NAMESPACE = uuidlib.UUID('2f2b38b4-6a8f-4c1f-9d0e-6d7c1f1a9c8b')


def row_uuid(*parts):
    """A stable uuid for a row identified by ``parts`` (host, address...)."""
    return str(uuidlib.uuid5(_ROW_NAMESPACE, '\x1f'.join(parts)))


def provider_uuid(provider_name):
    """The Placement provider uuid Cyborg uses for a provider name."""
    return str(uuidlib.uuid3(uuidlib.NAMESPACE_DNS, provider_name))


# A PCI function's address as sysfs names it, the agent's calls take it
# and binds hand it to Nova: dddd:bb:dd.f, lower case hex (fullmatch).
PCI_ADDRESS = re.compile(r'[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]')
# An mdev's uuid as sysfs names it: lower case, dashed (fullmatch).
MDEV_UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                       r'[0-9a-f]{12}')

# The longest name Placement accepts for a provider: a deployable's name,
# which names its provider, may be no longer.
PROVIDER_NAME_LENGTH = 200


def pci_address(info):
    """'dddd:bb:dd.f' from a {domain, bus, device, function} dict."""
    return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                            info['function'])


def pci_info(address):
    """{domain, bus, device, function} from 'dddd:bb:dd.f'."""
    domain, bus, rest = address.split(':')
    device, function = rest.split('.')
    return {'domain': domain, 'bus': bus, 'device': device,
            'function': function}


@dataclasses.dataclass
class AttachHandle:
    attach_type: str                     # PCI | MDEV | TEST_PCI
    attach_info: dict                    # PCI: domain/bus/device/function

    def key(self):
        return self.attach_type + ':' + json.dumps(self.attach_info,
                                                   sort_keys=True)


# The attribute naming a deployable's resource class, and the prefix of
# those naming its traits (Placement's inventory and traits of its
# provider: cyborg.placement.provider_tree).
RC_ATTRIBUTE = 'rc'
# The attach info key numbering a function's vGPU slots (mdev handles):
# one function may host several vGPUs of a type.
VGPU_MARK = 'vgpu_mark'
# The attach info key naming a NIC function's Neutron physical network,
# which Nova matches against the network of the port it serves; Neutron
# holds at most PHYSICAL_NETWORK_LENGTH characters of one.
PHYSICAL_NETWORK = 'physical_network'
PHYSICAL_NETWORK_LENGTH = 64
TRAIT_ATTRIBUTE_PREFIX = 'trait'

# A custom resource class or trait as Placement accepts it (its names are
# at most 255 characters).
# What Placement takes as a custom resource class or trait.
CUSTOM_NAME = re.compile(r'CUSTOM_[A-Z0-9_]{1,248}')


# The prefix of the trait naming an FPGA function id (``function_trait``).
FUNCTION_TRAIT_PREFIX = 'CUSTOM_FPGA_FUNCTION_ID_'
# A function id that is a UUID: 32 hex digits, with the usual dashes
# (8-4-4-4-12, as Glance images' ``accel:function_id`` usually are) or
# without any (as the DFL driver's ``afu_id`` files show them).
_UUID_SHAPED = re.compile(r'[0-9a-fA-F]{8}(-?)[0-9a-fA-F]{4}\1[0-9a-fA-F]{4}'
                          r'\1[0-9a-fA-F]{4}\1[0-9a-fA-F]{12}')
_NOT_IN_TRAIT = re.compile(r'[^A-Z0-9_]')
# The longest trait Placement takes.
MAX_TRAIT_LENGTH = 255


def function_trait(function_id):
    """The Placement trait naming FPGA function id ``function_id``: what
    the agent's drivers report for a function they read on a card and
    what the conductor advertises for one it programmed, so one function
    has one trait however its id is spelt.

    ``CUSTOM_FPGA_FUNCTION_ID_`` then the id upper-cased with each
    character outside Placement's alphabet ([A-Z0-9_]) replaced by '_',
    a UUID-shaped id (32 hex digits, dashed 8-4-4-4-12 or not dashed at
    all, surrounding white space ignored) first written in its dashed
    form: the name the conductor has always given a Glance image's
    dashed function id.

    >>> function_trait('d8424dc4-a4a3-c413-f89e-433683f9040b')
    'CUSTOM_FPGA_FUNCTION_ID_D8424DC4_A4A3_C413_F89E_433683F9040B'
    >>> function_trait('d8424dc4a4a3c413f89e433683f9040b')
    'CUSTOM_FPGA_FUNCTION_ID_D8424DC4_A4A3_C413_F89E_433683F9040B'
    >>> function_trait('crypto-1')
    'CUSTOM_FPGA_FUNCTION_ID_CRYPTO_1'
    """
    text = str(function_id).strip()
    if _UUID_SHAPED.fullmatch(text):
        digits = text.replace('-', '')
        text = '-'.join((digits[:8], digits[8:12], digits[12:16],
                         digits[16:20], digits[20:]))
    return FUNCTION_TRAIT_PREFIX + _NOT_IN_TRAIT.sub('_', text.upper())


def function_trait_problem(function_id):
    """Why FPGA function id ``function_id`` cannot be advertised (its
    ``function_trait`` longer than Placement takes), or None.  Checked
    before a profile asking for it is stored and before a card is
    programmed with it: the card would carry a trait no Placement sync of
    its host could write."""
    trait = function_trait(function_id)
    if len(trait) <= MAX_TRAIT_LENGTH:
        return None
    shown = str(function_id)
    return (f'FPGA function id {shown[:40]!r}... ({len(shown)} characters) '
            f'is too long to name a Placement trait: it makes a trait of '
            f'{len(trait)} characters, Placement takes at most '
            f'{MAX_TRAIT_LENGTH}')


def attribute_problem(key, value):
    """Why Placement would refuse attribute ``key`` = ``value`` of a
    deployable (its ``rc`` must be a resource class, its ``trait*`` a
    trait: standard, or CUSTOM_ and upper case letters, digits and
    underscores), or None.  Checked before it is stored: one Placement
    refuses fails every later sync of the deployable's host.  ``value``
    may be anything a report carries (a number, null, a list)."""
    if key == RC_ATTRIBUTE:
        what, standard = 'a resource class', standard_resource_classes()
    elif key.startswith(TRAIT_ATTRIBUTE_PREFIX):
        what, standard = 'a trait', standard_traits()
    else:
        return None
    if not isinstance(value, str):
        return (f'attribute {key} names {what} for Placement: {value!r} '
                f'is not a string')
    if value in standard or CUSTOM_NAME.fullmatch(value):
        return None
    return (f'attribute {key} names {what} for Placement: {value!r} is '
            f'neither a standard one nor CUSTOM_ followed by 1 to 248 '
            f'upper case letters, digits or underscores')


# Loaded when first asked (by the API, and by the agent only for the
# standard names an operator gives pci_driver).
@functools.cache
def standard_resource_classes():
    import os_resource_classes
    return frozenset(os_resource_classes.STANDARDS)


@functools.cache
def standard_traits():
    import os_traits
    return frozenset(os_traits.get_traits())


@dataclasses.dataclass
class Deployable:
    name: str                            # also the Placement provider name
    num_accelerators: int
    attributes: dict                     # str -> str; 'rc', 'trait0'...
    attach_handles: list = dataclasses.field(default_factory=list)
    driver_name: str = None
    bitstream_id: str = None

    @property
    def resource_class(self):
        return self.attributes.get(RC_ATTRIBUTE)

    @property
    def traits(self):
        return sorted(v for k, v in self.attributes.items()
                      if k.startswith(TRAIT_ATTRIBUTE_PREFIX))


@dataclasses.dataclass
class ControlPathID:
    cpid_info: str                       # PCI address dddd:bb:dd.f
    cpid_type: str = 'PCI'


@dataclasses.dataclass
class DriverDevice:
    type: str                            # GPU FPGA AICHIP QAT NIC SSD
    vendor: str
    model: str
    controlpath_id: ControlPathID
    std_board_info: dict = dataclasses.field(default_factory=dict)
    vendor_board_info: dict = dataclasses.field(default_factory=dict)
    deployables: list = dataclasses.field(default_factory=list)

    def key(self):
        """The device's identity on its host."""
        return '%s:%s' % (self.controlpath_id.cpid_type,
                          self.controlpath_id.cpid_info)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values, unknown=None):
        """The device of ``to_dict()``'s output.  Fields this version does
        not know (a newer agent's) are left out and, when ``unknown`` is a
        set, added to it as dotted names (``deployables.numa``)."""
        values = _known(cls, values, '', unknown)
        values['controlpath_id'] = ControlPathID(**_known(
            ControlPathID, values['controlpath_id'], 'controlpath_id.',
            unknown))
        deployables = []
        for dep in values.get('deployables', []):
            dep = _known(Deployable, dep, 'deployables.', unknown)
            dep['attach_handles'] = [
                AttachHandle(**_known(AttachHandle, ah,
                                      'deployables.attach_handles.',
                                      unknown))
                for ah in dep.get('attach_handles', [])]
            deployables.append(Deployable(**dep))
        values['deployables'] = deployables
        return cls(**values)


def _known(cls, values, prefix, unknown):
    """``values`` (a dict) without the keys ``cls`` has no field for,
    which go into ``unknown`` (a set, or None) prefixed by ``prefix``."""
    fields = {f.name for f in dataclasses.fields(cls)}
    extra = [k for k in values if k not in fields]
    if extra and unknown is not None:
        unknown.update(prefix + str(k) for k in extra)
    return {k: v for k, v in values.items() if k in fields}


def device_digest(device):
    """sha256 of one device's canonical JSON."""
    data = json.dumps(device.to_dict(), sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(data.encode()).hexdigest()


def inventory_digest(devices):
    """sha256 over a host's devices, independent of their order."""
    h = hashlib.sha256()
    for key, digest in sorted((d.key(), device_digest(d)) for d in devices):
        h.update(key.encode() + b'\0' + digest.encode() + b'\n')
    return h.hexdigest()
