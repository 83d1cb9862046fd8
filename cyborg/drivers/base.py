"""The accelerator driver interface and its optional abilities.

A driver is one class, loaded through stevedore (see ``loader``), whose
``discover()`` returns the host's devices of its kind as
``cyborg.objects.inventory.DriverDevice`` objects.  Drivers only read
hardware (sysfs under ``[agent]sysfs_root``, NVML): they know nothing of
the conductor, the database or Placement.

Optional abilities are mix-ins rather than methods that raise
NotImplementedError, so the agent asks ``isinstance(driver,
Programmable)`` instead of calling and catching:

- ``Programmable``: FPGAs that take a bitstream;
- ``Partitionable``: devices split into mdevs (vGPU) or other partitions;
- ``HealthReporting``: devices that can say whether they are healthy;
- ``Preparable``: devices with a preparation step before first use.

Naming rules every driver follows (doc/source/contract.rst, "Placement"):

- a deployable, hence its Placement provider, is named ``<host>_<PCI
  address>``, plus ``_<suffix>`` for a partition of the device (a vGPU type,
  a MIG instance);
- its ``rc`` attribute is a standard resource class or ``CUSTOM_*``, its
  ``trait<N>`` attributes are ``CUSTOM_*`` traits in Placement's alphabet
  (or standard traits an operator names, ``pci_driver``'s allowlist);
  ``OWNER_CYBORG`` is added by the conductor, not by drivers.
"""

import abc
import dataclasses
import re

from oslo_log import log as logging

from cyborg.common import states
from cyborg.drivers import sysfs
from cyborg.objects import health
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

_NOT_IN_ALPHABET = re.compile(r'[^A-Z0-9_]')


def custom_name(*parts):
    """``CUSTOM_<PARTS>``: upper-cased, joined by '_', anything outside
    Placement's alphabet ([A-Z0-9_]) replaced by '_'.

    >>> custom_name('intel', 'pac-a10')
    'CUSTOM_INTEL_PAC_A10'
    """
    name = '_'.join(str(p) for p in parts if p not in (None, ''))
    name = _NOT_IN_ALPHABET.sub('_', name.upper())
    if not name.startswith('CUSTOM_'):
        name = 'CUSTOM_' + name
    return name


def deployable_name(host, address, suffix=None):
    """The deployable / provider name: ``<host>_<address>[_<suffix>]``."""
    name = f'{host}_{address}'
    if suffix:
        name += '_' + suffix
    return name


def make_attributes(rc, traits=(), **extra):
    """A deployable's attributes: ``rc``, ``trait0..N`` (sorted, unique,
    each a ``CUSTOM_`` name in Placement's alphabet or a standard trait,
    anything else made one by ``custom_name``) and descriptive ``extra``
    keys (values as strings)."""
    attributes = {'rc': rc}
    clean = sorted({t if _placement_trait(t) else custom_name(t)
                    for t in traits})
    for index, trait in enumerate(clean):
        attributes['trait%d' % index] = trait
    for key, value in extra.items():
        if value is not None:
            attributes[key] = str(value)
    return attributes


def _placement_trait(name):
    """Whether Placement takes trait ``name`` as it is: ``CUSTOM_`` and
    its alphabet, or a standard trait (os-traits, only loaded when a
    driver names one)."""
    if name.startswith('CUSTOM_'):
        return not _NOT_IN_ALPHABET.search(name)
    return name in inventory.standard_traits()


def pci_handle(address, attach_type='PCI', **extra):
    """An attach handle for a PCI function (``extra``: e.g.
    ``physical_network`` for NICs, ``asked_type``/``vgpu_mark`` for mdevs)."""
    info = inventory.pci_info(address)
    info.update({k: v for k, v in extra.items() if v is not None})
    return inventory.AttachHandle(attach_type=attach_type, attach_info=info)


class Driver(abc.ABC):
    """One kind of accelerator on one host.

    ``name`` is the driver's entry point name (``[agent]enabled_drivers``);
    it is recorded as each deployable's ``driver_name``, which is how the
    conductor routes programming and mdev requests back to the driver.
    """

    name = None

    def __init__(self, conf, host):
        self.conf = conf
        self.host = host

    @property
    def sysfs_root(self):
        return self.conf.agent.sysfs_root

    @abc.abstractmethod
    def discover(self):
        """The devices of this driver's kind on this host, right now.

        Returns a list of ``DriverDevice``; an empty list when there are
        none.  Raises only when the hardware cannot be read at all, in
        which case the agent keeps this driver's last acknowledged devices
        rather than reporting them gone.
        """

    def recall(self, devices):
        """Told once, before the agent's first discovery after it starts:
        ``devices``, this driver's devices as the conductor last
        acknowledged them (the agent's on-disk cache; empty on a first
        start).  For a driver that needs to remember what it cannot read
        again right now (NVIDIA: which GPUs were in MIG mode while NVML
        cannot say).  Nothing by default."""


class Programmable(abc.ABC):
    """A device that is programmed with a bitstream (FPGA)."""

    @abc.abstractmethod
    def program(self, controlpath_id, image_path, image_uuid):
        """Program the device at PCI address ``controlpath_id`` with the
        bitstream file ``image_path`` (Glance image ``image_uuid``).

        Returns once the device runs the new bitstream; raises
        ``cyborg.common.exception.CyborgException`` on failure.
        """


class Partitionable(abc.ABC):
    """A device split into mediated devices (vGPU) or other partitions."""

    @abc.abstractmethod
    def mdev_parent(self, pci_address, mdev_type):
        """The PCI address on which an mdev of ``mdev_type`` for device
        function ``pci_address`` is created (a VF for SR-IOV vGPU)."""


# The codes of readings that say a device's health check read nothing
# (the check raised, or it has not finished within [health]check_timeout):
# what the device read before is not taken for cleared, and the device is
# not taken for well either (such a reading is transient).
CHECK_FAILED = 'check:error'
CHECK_TIMEOUT = 'check:timeout'
CHECK_UNREAD = (CHECK_FAILED, CHECK_TIMEOUT)


class HealthReporting(abc.ABC):
    """A device that can say whether it works (see ``cyborg.objects.health``
    and ``cyborg.common.states`` for the vocabulary).

    The agent calls ``check_health`` every ``[health]check_interval``
    seconds, so it must be cheap (a few sysfs reads and NVML calls per
    device, no subprocess).  Drivers keep no health state beyond what is
    needed to tell a new event from an old one (the last counter values,
    the NVML event set): the conductor decides what readings mean.
    """

    @abc.abstractmethod
    def check_health(self, devices):
        """Readings for ``devices`` (this driver's ``DriverDevice`` objects
        as last discovered): a list of ``health.Reading``, at least one per
        device, with the worst thing seen since the previous call (an event)
        or still true now (a condition).  Never raises for one device: a
        device that cannot be read is a reading too, never an ok one
        (a check that failed for it: transient, code ``CHECK_FAILED``)."""

    def probe(self, device):
        """An active test of ``device`` before it is re-admitted; returns
        one ``health.Reading`` whose source is 'probe' (the verdict on the
        device), or a list: that verdict first, then its partitions'
        faults (``probe_verdicts``).  Drivers that can exercise the device
        override it.

        The default asks ``check_health`` once more.  The agent's health
        monitor does not call it: it answers the re-probe of a driver
        that keeps this default from its next periodic check, because a
        check of its own in between would move what the checks compare
        (counter baselines, drained XID events, the unbound count that
        tolerates one check) and halve the tolerances they give.  It is
        called where no periodic checks run (health watching off)."""
        return probe_verdicts(device, self.check_health([device]))


def probe_verdicts(device, found):
    """A re-probe's verdicts on ``device`` from ``found``, the readings of
    one check of it: the worst of the device's own readings (ok when there
    are none), then its partitions' faults, all with source 'probe'.  A
    partition's fault is that partition's, and is sent beside the verdict
    so that the device's good verdict does not re-admit it."""
    found = [r for r in found if r.device == device.key()]
    verdict = health.worst([r for r in found if r.deployable is None])
    if verdict is None:
        verdict = health.Reading(device=device.key(), severity=states.OK)
    partitions = [r for r in found if r.deployable is not None
                  and r.severity not in states.HARMLESS]
    return [dataclasses.replace(r, source='probe')
            for r in [verdict] + partitions]


def default_probe(driver):
    """Whether ``driver`` answers re-probes with ``HealthReporting.probe``
    (one more check), not an active test of its own."""
    method = getattr(driver, 'probe', None)
    return getattr(method, '__func__', None) is HealthReporting.probe


class Preparable(abc.ABC):
    """A device that needs a preparation step before it is offered (run
    when an operator enables a device that started as ``maintaining``,
    ``[conductor]new_device_status``)."""

    @abc.abstractmethod
    def prepare(self, device):
        """Make ``device`` (a ``DriverDevice``) ready for workloads; raise
        ``cyborg.common.exception.CyborgException`` when it cannot be."""


def pci_device(function, device_type, deployables, model=None,
               vendor_board_info=None):
    """A DriverDevice for a PCI function (``cyborg.drivers.sysfs``)."""
    return inventory.DriverDevice(
        type=device_type, vendor=function.vendor,
        model=model or function.device,
        controlpath_id=inventory.ControlPathID(function.address),
        std_board_info={
            'product_id': function.device,
            'controller': sysfs.CLASS_NAMES.get(function.base_class),
        },
        vendor_board_info=vendor_board_info or {},
        deployables=deployables)


def whole_function_deployable(driver, function, rc, traits, **extra):
    """A deployable for one whole PCI function, passed through as is."""
    attributes = make_attributes(rc, traits, **function.descriptive(),
                                 **extra)
    return inventory.Deployable(
        name=deployable_name(driver.host, function.address),
        num_accelerators=1, attributes=attributes,
        attach_handles=[pci_handle(function.address)],
        driver_name=driver.name)


def vf_pool_deployable(driver, pf, vfs, rc, traits, handle_extra=None,
                       **extra):
    """One deployable for a PF's VFs: one provider whose inventory is the
    VF count, one PCI attach handle per VF (not one provider per VF)."""
    attributes = make_attributes(rc, traits, **pf.descriptive(), **extra)
    handles = [pci_handle(vf.address, **(handle_extra or {})) for vf in vfs]
    return inventory.Deployable(
        name=deployable_name(driver.host, pf.address),
        num_accelerators=len(handles), attributes=attributes,
        attach_handles=handles, driver_name=driver.name)


def physical_functions(sysfs_root, match):
    """``[(pf, [its VFs])]`` for the PFs (never a VF) that ``match``."""
    functions = sysfs.Sysfs(sysfs_root).pci_functions()
    by_address = sysfs.functions_by_address(functions)
    return [(f, [by_address[a] for a in f.virtfns if a in by_address])
            for f in functions if not f.is_vf and match(f)]


class WholeFunctionDriver(Driver):
    """A driver whose devices are PCI functions (never VFs) each passed
    through whole: subclasses say which functions, and how to call them.

    A PF whose SR-IOV VFs are enabled (``virtfn`` links, or a non-zero
    ``sriov_numvfs``) is not offered: the VFs are parts of the same
    silicon, which an instance given the whole PF would share with
    whoever has them.  These drivers do not offer VFs either; an operator
    who wants them offers them with ``pci_driver``'s allowlist.
    """

    device_type = None
    resource_class = None
    # The PFs the last discovery left out for their VFs (logged once).
    _pfs_with_vfs = frozenset()

    @abc.abstractmethod
    def matches(self, function):
        """Whether this ``sysfs.PCIFunction`` is one of the driver's."""

    @abc.abstractmethod
    def traits(self, function):
        """The deployable's ``CUSTOM_*`` traits."""

    def model(self, function):
        return None

    def extra_attributes(self, function):
        return {}

    def discover(self):
        devices = []
        with_vfs = set()
        for pf, vfs in physical_functions(self.sysfs_root, self.matches):
            if vfs or pf.virtfns or pf.sriov_numvfs > 0:
                with_vfs.add(pf.address)
                continue
            deployable = whole_function_deployable(
                self, pf, self.resource_class, self.traits(pf),
                **self.extra_attributes(pf))
            devices.append(pci_device(pf, self.device_type, [deployable],
                                      model=self.model(pf)))
        for address in sorted(with_vfs - self._pfs_with_vfs):
            LOG.info('%s: %s has SR-IOV VFs enabled; it is not offered '
                     'whole while they are', self.name, address)
        self._pfs_with_vfs = with_vfs
        return devices
