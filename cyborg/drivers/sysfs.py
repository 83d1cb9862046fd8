"""Reading PCI devices from sysfs: the one place drivers look at hardware.

Everything is read under a root (``[agent]sysfs_root``, ``/sys`` in
production, a fake tree in tests) from the same files the kernel exposes:

    <root>/bus/pci/devices/<address>      -> ../../../devices/.../<address>
        vendor, device, class, subsystem_vendor, subsystem_device
        driver -> .../drivers/<name>      (absent when unbound)
        numa_node                         (-1 when unknown)
        iommu_group -> .../iommu_groups/<n>
        sriov_totalvfs, sriov_numvfs, virtfn<N> -> ../<vf>, physfn -> ../<pf>
        mdev_supported_types/<type>/{name,available_instances,device_api,
                                     description}
        <mdev uuid>/mdev_type -> ../mdev_supported_types/<type>
        net/<interface>

We never parse ``lspci`` output: sysfs is stable, complete and testable.
"""

import dataclasses
import os

from cyborg.objects import inventory



@dataclasses.dataclass
class MdevType:
    type_id: str                 # e.g. nvidia-35
    name: str                    # e.g. GRID M60-2Q
    available_instances: int
    device_api: str              # e.g. vfio-pci
    description: str = ''


@dataclasses.dataclass
class PCIFunction:
    address: str                 # dddd:bb:dd.f
    vendor: str                  # 4 lower-case hex digits, no 0x
    device: str
    class_code: str              # 6 hex digits, e.g. 030000
    path: str                    # resolved directory in the tree
    subsystem_vendor: str = None
    subsystem_device: str = None
    driver: str = None
    numa_node: int = None
    iommu_group: str = None
    sriov_totalvfs: int = 0
    sriov_numvfs: int = 0
    virtfns: list = dataclasses.field(default_factory=list)
    physfn: str = None
    mdev_types: dict = dataclasses.field(default_factory=dict)
    mdevs: dict = dataclasses.field(default_factory=dict)   # uuid -> type
    net_interfaces: list = dataclasses.field(default_factory=list)

    @property
    def base_class(self):
        """The 4-digit class/subclass, e.g. ``0300`` for VGA."""
        return self.class_code[:4]

    @property
    def is_vf(self):
        return self.physfn is not None

    def descriptive(self):
        """Attributes every driver records on a deployable."""
        return {'vendor_id': self.vendor, 'product_id': self.device,
                'numa_node': self.numa_node,
                'iommu_group': self.iommu_group}


def read_text(path, default=None):
    """The file's text without surrounding white space, nor the NUL some
    kernel files end with (QAT's debugfs ones); ``default`` when it cannot
    be read, or is not UTF-8 text (one garbled attribute of one function
    must not stop every driver's discovery)."""
    try:
        with open(path, encoding='utf-8') as f:
            return f.read().strip('\x00 \t\n')
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return default
    except OSError:
        # Some attributes (e.g. config of a device being removed) fail
        # with EIO/ENODEV; that is "unknown", not a crash.
        return default
    except UnicodeDecodeError:
        # A value that is not text is as unknown as one that cannot be
        # read.
        return default


def read_int(path, default=None, base=10):
    text = read_text(path)
    if text is None or text == '':
        return default
    try:
        return int(text, base)
    except ValueError:
        return default


def _hex(path):
    text = read_text(path)
    if not text:
        return None
    return text.lower().removeprefix('0x')


def hwmon_dirs(path):
    """The hwmon directories of the device directory ``path``
    (``<path>/hwmon/hwmon<N>``), in order."""
    top = os.path.join(path, 'hwmon')
    return [os.path.join(top, name) for name in listdir(top)]


def hwmon_temperature(path, labels):
    """Degrees C of the device directory ``path`` from its hwmon: the
    sensor with the first of ``labels`` that reads (``temp<N>_label``,
    ``temp<N>_input`` in millidegrees); None when none does."""
    for hwmon in hwmon_dirs(path):
        inputs = {}
        for name in listdir(hwmon):
            if name.startswith('temp') and name.endswith('_label'):
                inputs[read_text(os.path.join(hwmon, name))] = os.path.join(
                    hwmon, name[:-len('_label')] + '_input')
        for label in labels:
            value = read_int(inputs[label]) if label in inputs else None
            if value is not None:
                return value / 1000.0
    return None


def _link_name(path):
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


class Sysfs:
    """A sysfs tree rooted at ``root``."""

    def __init__(self, root):
        self.root = root

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    @property
    def pci_devices_dir(self):
        return self.path('bus', 'pci', 'devices')

    def pci_addresses(self):
        try:
            names = os.listdir(self.pci_devices_dir)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if inventory.PCI_ADDRESS.fullmatch(n))

    def pci_functions(self):
        """Every PCI function, sorted by address; functions that vanish
        while being read (hot removal) are left out."""
        functions = []
        for address in self.pci_addresses():
            function = self.pci_function(address)
            if function is not None:
                functions.append(function)
        return functions

    def pci_function(self, address):
        path = os.path.realpath(os.path.join(self.pci_devices_dir, address))
        vendor = _hex(os.path.join(path, 'vendor'))
        device = _hex(os.path.join(path, 'device'))
        class_code = _hex(os.path.join(path, 'class'))
        if not (vendor and device and class_code):
            return None
        numa = read_int(os.path.join(path, 'numa_node'))
        return PCIFunction(
            address=address, vendor=vendor, device=device,
            class_code=class_code.rjust(6, '0'), path=path,
            subsystem_vendor=_hex(os.path.join(path, 'subsystem_vendor')),
            subsystem_device=_hex(os.path.join(path, 'subsystem_device')),
            driver=_link_name(os.path.join(path, 'driver')),
            numa_node=None if numa is None or numa < 0 else numa,
            iommu_group=_link_name(os.path.join(path, 'iommu_group')),
            sriov_totalvfs=read_int(os.path.join(path, 'sriov_totalvfs'), 0),
            sriov_numvfs=read_int(os.path.join(path, 'sriov_numvfs'), 0),
            virtfns=self._virtfns(path),
            physfn=_link_name(os.path.join(path, 'physfn')),
            mdev_types=self._mdev_types(path),
            mdevs=self._mdevs(path),
            net_interfaces=listdir(os.path.join(path, 'net')))

    @staticmethod
    def _virtfns(path):
        found = []
        for name in listdir(path):
            if name.startswith('virtfn') and name[6:].isdigit():
                target = _link_name(os.path.join(path, name))
                if target:
                    found.append((int(name[6:]), target))
        return [address for _, address in sorted(found)]

    @staticmethod
    def _mdev_types(path):
        types_dir = os.path.join(path, 'mdev_supported_types')
        types = {}
        for type_id in listdir(types_dir):
            d = os.path.join(types_dir, type_id)
            types[type_id] = MdevType(
                type_id=type_id,
                name=read_text(os.path.join(d, 'name'), type_id),
                available_instances=read_int(
                    os.path.join(d, 'available_instances'), 0),
                device_api=read_text(os.path.join(d, 'device_api'), ''),
                description=read_text(os.path.join(d, 'description'), ''))
        return types

    @staticmethod
    def _mdevs(path):
        mdevs = {}
        for name in listdir(path):
            if inventory.MDEV_UUID.fullmatch(name):
                mdev_type = _link_name(os.path.join(path, name, 'mdev_type'))
                if mdev_type:
                    mdevs[name] = mdev_type
        return mdevs

    def find_files(self, top, names, max_depth=6):
        """``{name: [paths]}`` of files called one of ``names`` under
        ``top``, not following links (sysfs links form cycles)."""
        found = {name: [] for name in names}
        top_depth = top.rstrip(os.sep).count(os.sep)
        for dirpath, dirnames, filenames in os.walk(top):
            if dirpath.count(os.sep) - top_depth >= max_depth:
                dirnames[:] = []
            for name in filenames:
                if name in found:
                    found[name].append(os.path.join(dirpath, name))
        for paths in found.values():
            paths.sort()
        return found

    # -- mdev control files (written by cyborg.agent.privileged) -------

    def mdev_create_path(self, parent_address, mdev_type):
        return os.path.join(self.pci_devices_dir, parent_address,
                            'mdev_supported_types', mdev_type, 'create')

    def mdev_remove_path(self, mdev_uuid):
        return self.path('bus', 'mdev', 'devices', mdev_uuid, 'remove')


def listdir(path):
    """The sorted entries of directory ``path``; [] when there is none
    (or it cannot be read)."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def functions_by_address(functions):
    return {f.address: f for f in functions}


# PCI class/subclass names (pci.ids), for std_board_info's "controller".
CLASS_NAMES = {
    '0108': 'Non-Volatile memory controller',
    '0200': 'Ethernet controller',
    '0207': 'Infiniband controller',
    '0300': 'VGA compatible controller',
    '0302': '3D controller',
    '0380': 'Display controller',
    '0b40': 'Co-processor',
    '1200': 'Processing accelerators',
}
