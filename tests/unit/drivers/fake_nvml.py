"""A fake NVML (the ``pynvml`` API subset the NVIDIA driver uses), for
hosts without an NVIDIA GPU.  ``FakeNVML(gpus)`` with ``gpus`` keyed by
PCI address; each GPU: name, uuid, serial, memory_mb, and optionally
``mig`` = list of (gpu instance id, profile, memory_mb, uuid)."""

import types

NVML_DEVICE_MIG_ENABLE = 1
NVML_DEVICE_MIG_DISABLE = 0


class NVMLError(Exception):
    pass


class FakeNVML:

    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVMLError = NVMLError

    def __init__(self, gpus, init_fails=False):
        self.gpus = gpus
        self.init_fails = init_fails
        self.initialised = 0

    def nvmlInit(self):
        if self.init_fails:
            raise NVMLError('Driver Not Loaded')
        self.initialised += 1

    def nvmlShutdown(self):
        self.initialised -= 1

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        for address in self.gpus:
            if address.lower() == bus_id.lower()[-12:]:
                return ('gpu', address)
        raise NVMLError('Not Found')

    def _gpu(self, handle):
        return self.gpus[handle[1]]

    def _mig(self, handle):
        return self._gpu(handle)['mig'][handle[2]]

    def nvmlDeviceGetName(self, handle):
        if handle[0] == 'mig':
            return 'NVIDIA A100-PCIE-40GB MIG ' + self._mig(handle)[1]
        return self._gpu(handle)['name']

    def nvmlDeviceGetUUID(self, handle):
        if handle[0] == 'mig':
            return self._mig(handle)[3]
        return self._gpu(handle)['uuid']

    def nvmlDeviceGetSerial(self, handle):
        return self._gpu(handle)['serial'].encode()

    def nvmlDeviceGetMemoryInfo(self, handle):
        mb = (self._mig(handle)[2] if handle[0] == 'mig'
              else self._gpu(handle)['memory_mb'])
        return types.SimpleNamespace(total=mb * 1024 * 1024)

    def nvmlDeviceGetMigMode(self, handle):
        if 'mig' not in self._gpu(handle):
            raise NVMLError('Not Supported')
        return (NVML_DEVICE_MIG_ENABLE, NVML_DEVICE_MIG_ENABLE)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        if index >= len(self._gpu(handle)['mig']):
            raise NVMLError('Not Found')
        return ('mig', handle[1], index)

    def nvmlDeviceGetGpuInstanceId(self, handle):
        return self._mig(handle)[0]
