"""NVIDIA GPUs (vendor 0x10de, class 0x0300 / 0x0302).

What a GPU is offered as, decided per physical GPU (a PF):

- **VGPU**, one deployable per enabled mdev type, when the GPU hosts vGPUs:
  the types are ``[agent]enabled_vgpu_types`` it supports plus the types of
  mdevs that already exist on it.  Capacity = ``available_instances`` +
  existing mdevs of the type, counted on the PF, or on its VFs when SR-IOV
  is on (Ampere and later host one vGPU per VF).  Each instance is an
  ``MDEV`` attach handle on the function that parents it.  A free VF
  says 1 for every type the GPU can still host, however many of them it
  can host: with SR-IOV the free VFs offered are capped at the type's
  ``max_instance`` (its ``description``) minus the vGPUs already on the
  GPU's VFs (``vgpu_room``); the VFs holding one are always offered.
- **nothing** when SR-IOV VFs are enabled but no vGPU type is: a PF whose
  VFs are enabled cannot be passed through whole, and a VF is never a
  physical GPU of its own (Cyborg offered PF and VFs as separate GPUs).
- one deployable per **MIG instance** when NVML says MIG mode is on (rc
  ``CUSTOM_MIG_<PROFILE>``, no attach handle: Nova can only attach MIG
  slices through vGPU mdev types, which are offered as VGPU above).
- else the whole GPU as **PGPU** with a ``PCI`` attach handle.

GPUs in ``[agent]nvidia_excluded_devices`` (a display, a GPU the host uses)
are never offered.  With NVML (``nvidia-ml-py``) importable and a driver
loaded, memory size, serial, UUID and MIG state are added; without it the
driver reports from sysfs alone.  Except for a GPU NVML last said was in
MIG mode: sysfs cannot tell MIG mode, so while NVML cannot read that GPU
(NVML failing to start, a driver being reloaded) its MIG instances are
reported as last discovered, never the whole GPU under running instances.
(An agent started while NVML fails has nothing to go by, and reports from
sysfs.)  NVML reads each GPU apart, whole or not at all: an NVML error on
one GPU or one of its MIG devices (the GPU lost mid-read) is "NVML cannot
read" for that GPU alone, logged when it starts, changes and ends; a MIG
device destroyed while it is read is left out alone.

Health: the PCI sources of every PCI driver (``pci_health``) plus NVML's
(``nvml_health``: XIDs, ECC, row remapping, PCIe replays, GPU lost),
read in a session kept open between checks.  ``usage(devices)`` gives
utilization and memory in use for telemetry.  The NVML module is
``[agent]nvml_module`` (``pynvml``), or the one passed in.
"""

import copy
import importlib
import re

from oslo_log import log as logging

from cyborg.common import said
from cyborg.drivers import base, nvml_health, pci_health, sysfs
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

VENDOR = '10de'
GPU_CLASSES = ('0300', '0302')

# How many vGPUs of a type one GPU hosts, in the type's sysfs description
# ("num_heads=4, frl_config=60, framebuffer=2048M,
# max_resolution=5120x2880, max_instance=8").
_MAX_INSTANCE = re.compile(r'(?:^|[\s,])max_instance=(\d+)')


def max_instance(description):
    """The ``max_instance`` an mdev type's ``description`` names, None
    when it names none (an older driver, another vendor's type)."""
    found = _MAX_INSTANCE.search(description or '')
    return int(found.group(1)) if found else None


def vgpu_room(parents, mdev_type, mixes):
    """How many more vGPUs of ``mdev_type`` a GPU whose SR-IOV VFs are
    ``parents`` can host: the type's ``max_instance`` minus the vGPUs
    already on those VFs, of that type where the GPU ``mixes`` types (MIG
    mode: one vGPU per slice, slices of several sizes), of any type where
    it does not (time-sliced vGPUs all of one type, the documented way:
    one enabled type per GPU).  A GPU in mixed-size mode is counted as one
    that does not mix: offered less than it hosts, never more.  None when
    no VF's description of the type names a ``max_instance``."""
    limits = [max_instance(parent.mdev_types[mdev_type].description)
              for parent in parents if mdev_type in parent.mdev_types]
    limits = [limit for limit in limits if limit is not None]
    if not limits:
        return None
    created = sum(1 for parent in parents for each in parent.mdevs.values()
                  if each == mdev_type or not mixes)
    return max(0, min(limits) - created)


def _import_nvml(name):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        LOG.info('No NVML module %s (%s): GPUs are read from sysfs only.',
                 name, exc)
        return None


class NvidiaGPUDriver(base.Driver, base.Partitionable, pci_health.PCIHealth):

    name = 'nvidia_gpu_driver'

    def __init__(self, conf, host, nvml=None):
        super().__init__(conf, host)
        # Unit tests pass a fake NVML; else [agent]nvml_module (pynvml).
        self._nvml = (nvml if nvml is not None
                      else _import_nvml(conf.agent.nvml_module))
        # Its ECC and replay counts kept in the driver's health record:
        # errors counted while the agent was down are reported.
        self._watcher = nvml_health.NvmlWatcher(
            self._nvml, conf.agent.aer_correctable_burst,
            counters=self.health_counters())
        # {PCI address: the device last discovered} of the GPUs NVML last
        # said were in MIG mode: sysfs alone cannot tell MIG mode, and
        # would offer such a GPU whole while its instances run.  Seeded
        # from the agent's cache at start (``recall``), so an agent started
        # while NVML fails does not offer them whole either; a GPU gone
        # from sysfs is forgotten.
        self._mig_devices = {}
        # What was logged, kept from one discovery to the next so that a
        # lasting problem is logged when it starts, changes and ends, not
        # at every discovery: why NVML last could not read each GPU (by
        # PCI address), and the MIG GPUs reported as last discovered.
        self._nvml_unread = said.Problems(LOG)
        self._mig_kept = set()

    def recall(self, devices):
        for device in devices:
            if any('mig_uuid' in dep.attributes
                   for dep in device.deployables):
                self._mig_devices.setdefault(
                    device.controlpath_id.cpid_info, copy.deepcopy(device))

    def discover(self):
        functions = sysfs.Sysfs(self.sysfs_root).pci_functions()
        by_address = sysfs.functions_by_address(functions)
        excluded = {a.strip().lower() for a in
                    self.conf.agent.nvidia_excluded_devices}
        devices, present = [], set()
        with _Nvml(self._nvml, self._nvml_unread) as nvml:
            for function in functions:
                if (function.vendor != VENDOR or function.is_vf or
                        function.base_class not in GPU_CLASSES):
                    continue
                if function.address in excluded:
                    LOG.debug('GPU %s is excluded by configuration.',
                              function.address)
                    continue
                present.add(function.address)
                info = nvml.info(function.address)
                if info is None and function.address in self._mig_devices:
                    if function.address not in self._mig_kept:
                        self._mig_kept.add(function.address)
                        LOG.warning('NVML cannot read GPU %s, last seen in '
                                    'MIG mode: its MIG instances are '
                                    'reported as then until NVML reads it '
                                    'again.', function.address)
                    device = copy.deepcopy(
                        self._mig_devices[function.address])
                else:
                    if function.address in self._mig_kept:
                        self._mig_kept.discard(function.address)
                        LOG.info('GPU %s, last seen in MIG mode, is '
                                 'reported as NVML reads it again.',
                                 function.address)
                    device = self._device(function, by_address, info)
                if device.deployables:
                    devices.append(device)
        for address in set(self._mig_devices) - present:
            # Gone (or excluded): whatever comes back at that address is
            # read afresh.
            del self._mig_devices[address]
        for address in (set(self._nvml_unread) | self._mig_kept) - present:
            self._nvml_unread.solved(address)
            self._mig_kept.discard(address)
        return devices

    def mdev_parent(self, pci_address, mdev_type):
        # Handles already name the function (PF or VF) that parents them.
        return pci_address

    # -- health and usage ------------------------------------------------

    def more_health(self, device, counters):
        return self._watcher.check(device, counters)

    def usage(self, devices):
        """``{device key: {'utilization': 0..1, 'memory_used_bytes': n}}``
        for the GPUs NVML can read (others are left out)."""
        found = {}
        for device in devices:
            values = self._watcher.usage(device)
            if values is not None:
                found[device.key()] = values
        return found

    # -- one GPU -----------------------------------------------------------

    def _device(self, pf, by_address, info):
        extra = _nvml_attributes(info)
        mig_offered = False
        if pf.sriov_numvfs > 0:
            parents = [by_address[a] for a in pf.virtfns if a in by_address]
        else:
            parents = [pf]
        vgpu_types = self._vgpu_types(parents)
        if vgpu_types:
            # MIG-backed vGPUs of several types share a GPU in MIG mode
            # (one per slice); time-sliced ones are taken to be of one
            # type per GPU (``vgpu_room``).
            mixes = bool(info and info.get('mig_enabled'))
            deployables = [self._vgpu_deployable(pf, parents, t, extra,
                                                 mixes)
                           for t in vgpu_types]
        elif pf.sriov_numvfs > 0:
            LOG.info('GPU %s has %d SR-IOV VFs but no enabled vGPU type: '
                     'not offered.', pf.address, pf.sriov_numvfs)
            deployables = []
        elif info and info.get('mig_enabled'):
            mig_offered = True
            deployables = [self._mig_deployable(pf, mig)
                           for mig in info['migs']]
        else:
            deployables = [base.whole_function_deployable(
                self, pf, 'PGPU', self._traits(pf), **extra)]
        model = info.get('name') if info else None
        device = base.pci_device(pf, 'GPU', deployables, model=model)
        if mig_offered:
            self._mig_devices[pf.address] = copy.deepcopy(device)
        elif info is not None:
            # NVML read it, and it is not offered as MIG instances.
            self._mig_devices.pop(pf.address, None)
        return device

    def _vgpu_types(self, parents):
        supported = set()
        existing = set()
        for parent in parents:
            supported.update(parent.mdev_types)
            existing.update(parent.mdevs.values())
        enabled = supported & set(self.conf.agent.enabled_vgpu_types)
        return sorted(enabled | existing)

    @staticmethod
    def _traits(pf, *more):
        return [base.custom_name('NVIDIA', pf.device)] + list(more)

    def _vgpu_deployable(self, pf, parents, mdev_type, extra, mixes):
        handles = []
        type_name = None
        # With SR-IOV, the free VFs offered: at most what the GPU can
        # still host, the first ones in VF order (the same ones from one
        # discovery to the next).  A VF holding a vGPU of the type is
        # always offered: its handle may be bound to an instance.  A PF
        # counts its own room in available_instances.
        room = (vgpu_room(parents, mdev_type, mixes)
                if pf.sriov_numvfs > 0 else None)
        for parent in parents:
            supported = parent.mdev_types.get(mdev_type)
            available = supported.available_instances if supported else 0
            if supported:
                type_name = supported.name
            used = sum(1 for t in parent.mdevs.values() if t == mdev_type)
            if room is not None:
                available = min(available, room)
                room -= available
            # Numbered within the parent (whose address the handle also
            # carries): a change on one VF must not renumber, and so
            # replace, the handles of the VFs after it.
            for index in range(available + used):
                handles.append(base.pci_handle(
                    parent.address, 'MDEV', asked_type=mdev_type,
                    vgpu_mark='%s_%d' % (mdev_type, index)))
        attributes = base.make_attributes(
            'VGPU', self._traits(pf, base.custom_name(mdev_type),
                                 *_cyborg_vgpu_traits(pf, type_name)),
            vgpu_type=mdev_type, vgpu_type_name=type_name,
            **pf.descriptive(), **extra)
        return inventory.Deployable(
            name=base.deployable_name(self.host, pf.address, mdev_type),
            num_accelerators=len(handles), attributes=attributes,
            attach_handles=handles, driver_name=self.name)

    def _mig_deployable(self, pf, mig):
        attributes = base.make_attributes(
            base.custom_name('MIG', mig['profile']),
            self._traits(pf, base.custom_name('NVIDIA_MIG', mig['profile'])),
            mig_uuid=mig['uuid'], memory_mb=mig['memory_mb'],
            **pf.descriptive())
        return inventory.Deployable(
            name=base.deployable_name(self.host, pf.address,
                                      nvml_health.mig_suffix(
                                          mig['gpu_instance_id'],
                                          mig['compute_instance_id'])),
            num_accelerators=1, attributes=attributes, attach_handles=[],
            driver_name=self.name)


def _cyborg_vgpu_traits(pf, type_name):
    """OpenStack Cyborg's trait of a vGPU provider,
    ``CUSTOM_NVIDIA_<device id>_<type name>``, the type name being the
    second word of the type's sysfs ``name`` ("GRID T4-2B" -> ``T4_2B``),
    so device profiles written for Cyborg keep matching; none where the
    name has no second word (no ``name`` file: sysfs then reads the type
    id)."""
    words = (type_name or '').split()
    if len(words) < 2:
        return []
    return [base.custom_name('NVIDIA', pf.device, words[1])]


def _nvml_attributes(info):
    if not info:
        return {}
    return {'memory_mb': info.get('memory_mb'), 'serial': info.get('serial'),
            'gpu_uuid': info.get('uuid'),
            'mig_mode': 'enabled' if info.get('mig_enabled') else None}


class _Nvml:
    """An NVML session for one discovery; every NVML failure degrades to
    "no NVML information" for that GPU (or all), never to a failed
    discovery: sysfs alone still tells the truth about what is there.

    A GPU is read whole or not at all: an error on any of its calls, those
    on its MIG devices included (the GPU lost mid-read), is "NVML cannot
    read" that GPU alone, the others are read as usual.  Half a reading
    would be worse than none: a GPU in MIG mode whose MIG devices cannot
    be read would be offered with some or none of its instances, or whole
    under them.  Two answers cost less: a value the GPU (or its driver)
    does not have is left out alone, and a MIG device destroyed between
    two calls (``NVML_ERROR_NOT_FOUND``) is left out alone, as it is
    gone."""

    def __init__(self, module, unread=None):
        self._module = module
        self._ready = False
        # NVML reports every failure as NVMLError (library missing, no
        # driver, not supported, GPU lost...).
        self._errors = (getattr(module, 'NVMLError', OSError), OSError)
        # Why NVML could not read each GPU (``said.Problems`` by PCI
        # address), the driver's, kept from one discovery to the next: a
        # GPU NVML cannot read is logged when that starts, changes and
        # ends, not at every discovery.
        self._unread = said.Problems(LOG) if unread is None else unread

    def __enter__(self):
        if self._module is not None:
            try:
                self._module.nvmlInit()
                self._ready = True
            except self._errors as exc:
                LOG.debug('NVML unavailable (%s); sysfs only.', exc)
        return self

    def __exit__(self, *exc_info):
        if self._ready:
            try:
                self._module.nvmlShutdown()
            except self._errors as exc:
                LOG.debug('NVML shutdown failed: %s', exc)
            self._ready = False

    def info(self, address):
        """What NVML says of the GPU at ``address``, None when NVML cannot
        read it (or is not started)."""
        if not self._ready:
            return None
        try:
            found = self._read(address)
        except self._errors as exc:
            self._cannot_read(address, exc)
            return None
        why = self._unread.solved(address)
        if why is not None:
            LOG.info('NVML reads GPU %s again (it could not: %s).',
                     address, why)
        return found

    def _cannot_read(self, address, exc):
        why = '%s: %s' % (type(exc).__name__, exc)
        if not self._unread.say(
                why, 'NVML cannot read GPU %s (%s): until it can, the GPU '
                'is described from sysfs alone, or as last discovered if '
                'it was in MIG mode.  Logged again when that changes.',
                address, why, key=address):
            LOG.debug('NVML still cannot read GPU %s (%s).', address, why)

    def _read(self, address):
        nvml = self._module
        handle = nvml.nvmlDeviceGetHandleByPciBusId(address)
        reads = (
            ('name', lambda: _text(nvml.nvmlDeviceGetName(handle))),
            ('uuid', lambda: _text(nvml.nvmlDeviceGetUUID(handle))),
            ('serial', lambda: _text(nvml.nvmlDeviceGetSerial(handle))),
            ('memory_mb', lambda: nvml.nvmlDeviceGetMemoryInfo(
                handle).total // (1024 * 1024)))
        info = {}
        for key, read in reads:
            try:
                info[key] = read()
            except self._errors as exc:
                # One value a GPU does not have (a serial number without
                # an inforom) costs that value alone.
                if not _not_supported(nvml, exc):
                    raise
                info[key] = None
        info['mig_enabled'], info['migs'] = self._migs(handle, address)
        return info

    def _migs(self, handle, address):
        nvml = self._module
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except AttributeError:
            return False, []      # an NVML module older than MIG
        except self._errors as exc:
            # Not MIG capable: NVML_ERROR_NOT_SUPPORTED (a driver older
            # than MIG: NVML_ERROR_FUNCTION_NOT_FOUND).  Any other error
            # (the GPU lost) tells nothing of its MIG mode.
            if not _not_supported(nvml, exc):
                raise
            return False, []
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return False, []
        migs = []
        for index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            except self._errors as exc:
                if _not_found(nvml, exc):
                    continue      # an empty slot
                raise
            try:
                migs.append(self._mig(mig))
            except self._errors as exc:
                if not _not_found(nvml, exc):
                    raise
                # Destroyed since its handle was taken: gone, as the next
                # discovery will say (once, as it happens once).
                LOG.info('MIG device %d of GPU %s was destroyed while it '
                         'was read (%s): left out.', index, address, exc)
        migs.sort(key=lambda m: (m['gpu_instance_id'],
                                 m['compute_instance_id']))
        return True, migs

    def _mig(self, mig):
        nvml = self._module
        name = _text(nvml.nvmlDeviceGetName(mig))
        return {
            'gpu_instance_id': nvml.nvmlDeviceGetGpuInstanceId(mig),
            'compute_instance_id': self._compute_instance_id(mig),
            'uuid': _text(nvml.nvmlDeviceGetUUID(mig)),
            'profile': name.rsplit(' ', 1)[-1],
            'memory_mb': nvml.nvmlDeviceGetMemoryInfo(mig).total //
            (1024 * 1024)}

    def _compute_instance_id(self, mig):
        """The MIG device's compute instance within its GPU instance (0,
        the first, where NVML cannot say: a module or driver older than
        compute instances).  Any other error is the MIG device's: taken
        for 0, a second compute instance would be named as the first,
        and a host reporting one deployable twice is refused whole."""
        try:
            return self._module.nvmlDeviceGetComputeInstanceId(mig)
        except AttributeError:
            return 0
        except self._errors as exc:
            if not _not_supported(self._module, exc):
                raise
            return 0


def _not_supported(nvml, exc):
    """Whether ``exc`` says the GPU, or its driver, has no such thing."""
    return _is(nvml, exc, 'NVML_ERROR_NOT_SUPPORTED',
               'NVML_ERROR_FUNCTION_NOT_FOUND')


def _not_found(nvml, exc):
    return _is(nvml, exc, 'NVML_ERROR_NOT_FOUND')


def _is(nvml, exc, *names):
    value = getattr(exc, 'value', None)
    return any(value == getattr(nvml, name, object()) for name in names)


def _text(value):
    return value.decode() if isinstance(value, bytes) else value
