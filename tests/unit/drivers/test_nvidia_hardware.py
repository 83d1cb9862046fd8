"""NVIDIA GPUs as they were read on real hardware, replayed.

Each GPU below was passed through to a virtual machine and read there by
the NVIDIA driver itself and by ``nvidia-smi -q -x`` beside it (driver
580.159.04): the sysfs side is the scenario of the same name
(``tests/fixtures/sysfs.py``), the NVML side is ``GPUS[scenario]``, in
the fake NVML's format, and ``data/<gpu>-nvidia-smi.xml`` is what
``nvidia-smi`` said (``test_nvidia_check.py``).  What NVML answered that
the fake must repeat, on both:

- MIG mode (0, 0): MIG-capable, MIG off; no MIG devices;
- retired pages: ``NVML_ERROR_NOT_SUPPORTED`` (Hopper remaps rows
  instead); remapped rows (0, 0, 0, 0); volatile uncorrected ECC 0;
- memory: NVML's version 1 memory query counts the driver's own
  reservation as used (480 MiB on the H100, 615 on the H200), version 2
  counts it apart as ``reserved``, and ``nvidia-smi``'s "Used" is version
  2's;
- XID and double-bit ECC events can be registered; a wait with no event
  times out;
- the H200's PCIe replay counter: 0 (the H100's was not read).

The H100 was read idle (0 MiB used, 0 %); the H200 while it ran matrix
products with 6 GiB allocated (6,130 MiB used, 100 %).  Temperature, power
and clock event reasons were read from NVML later (2026-11-27), on
another H100 and H200 of the same kind and driver: the H100 idle (35 C,
75,758 mW, reasons mask 1: ``gpu_idle``), the H200 under the same load as
before (56 to 60 C, 691 to 694 W against its 700 W limit, mask 4:
``sw_power_cap``; 36 C, 78 W and ``gpu_idle`` idle).  The H200 supports
all nine reasons (mask 511); its slowdown temperature is 89 C, its
shutdown temperature 95 C.  ``tools/nvidia_check.py`` found no difference
with ``nvidia-smi`` on both, idle and busy.
"""

import pytest

from cyborg.common import states
from cyborg.drivers import nvidia_gpu
from tests.fixtures import fake_nvml
from tests.fixtures import sysfs as fake_sysfs

ADDRESS = fake_sysfs.VM_GPU_ADDRESS
KEY = 'PCI:' + ADDRESS
MIB = 1024 * 1024
_HOPPER = {'mig': False, 'ecc_uncorrected': 0,
           'remapped_rows': {'correctable': 0, 'uncorrectable': 0,
                             'pending': False, 'failure': False}}
GPUS = {
    'h100_vm': {'name': 'NVIDIA H100 80GB HBM3', 'product_id': '2330',
                'uuid': 'GPU-d763925c-e70e-91d5-7fc6-15731aa57f69',
                'serial': '1753024033999', 'memory_mb': 81559,
                'memory_reserved_mb': 480, 'memory_used_mb': 0,
                'utilization': 0, 'temperature': 35, 'power_mw': 75758,
                'clock_events': ['gpu_idle'], **_HOPPER},
    'h200_vm': {'name': 'NVIDIA H200', 'product_id': '2335',
                'uuid': 'GPU-0fbaec0c-7355-555c-108d-98c4237649e5',
                'serial': '1653724057944', 'memory_mb': 143771,
                'memory_reserved_mb': 615, 'memory_used_mb': 6130,
                'utilization': 100, 'pcie_replays': 0, 'temperature': 60,
                'power_mw': 691198, 'clock_events': ['sw_power_cap'],
                **_HOPPER},
}
each_gpu = pytest.mark.parametrize('gpu', sorted(GPUS))


def _driver(conf, scenario, tmp_path, gpu='h100_vm', **changes):
    scenario(gpu)
    answers = {k: v for k, v in GPUS[gpu].items() if k != 'product_id'}
    nvml = fake_nvml.create(tmp_path / 'nvml.json',
                            {ADDRESS: {**answers, **changes}})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    return driver, nvml, driver.discover()


@each_gpu
def test_offered_whole_with_what_nvml_knows(conf, scenario, tmp_path, gpu):
    _, _, devices = _driver(conf, scenario, tmp_path, gpu)
    read = GPUS[gpu]
    [device] = devices
    assert device.model == read['name']
    [deployable] = device.deployables
    assert deployable.attributes == {
        'rc': 'PGPU', 'trait0': 'CUSTOM_NVIDIA_' + read['product_id'],
        'vendor_id': '10de', 'product_id': read['product_id'],
        'memory_mb': str(read['memory_mb']), 'serial': read['serial'],
        'gpu_uuid': read['uuid']}
    # MIG off: no MIG deployables and no mig_mode attribute; the whole
    # GPU is one PCI handle although the function has no IOMMU group.
    assert [h.attach_type for h in deployable.attach_handles] == ['PCI']


@each_gpu
def test_healthy_with_the_sources_it_has(conf, scenario, tmp_path, gpu):
    driver, _nvml, devices = _driver(conf, scenario, tmp_path, gpu)
    for _ in range(2):          # the first check also registers events
        [reading] = driver.check_health(devices)
        assert (reading.device, reading.severity) == (KEY, states.OK)
        # Retired pages are not supported on Hopper: skipped, no reading.
        # (The H100's PCIe replay counter was not read.)
        replays = ({'pcie_replays': 0} if 'pcie_replays' in GPUS[gpu]
                   else {})
        assert reading.counters == {
            'xid': 0, 'ecc_uncorrected': 0, 'remapped_rows_correctable': 0,
            'remapped_rows_uncorrectable': 0, **replays}


@each_gpu
def test_memory_in_use_leaves_the_driver_reservation_out(
        conf, scenario, tmp_path, gpu):
    driver, nvml, devices = _driver(conf, scenario, tmp_path, gpu)
    read = GPUS[gpu]
    # As nvidia-smi: version 1 would add the reservation.
    assert driver.usage(devices) == {KEY: {
        'utilization': read['utilization'] / 100,
        'memory_used_bytes': read['memory_used_mb'] * MIB,
        **_thermals(read)}}
    nvml.update_gpu(ADDRESS, memory_used_mb=2048, utilization=87)
    assert driver.usage(devices) == {
        KEY: {'utilization': 0.87, 'memory_used_bytes': 2048 * MIB,
              **_thermals(read)}}


def _thermals(read):
    return {'temperature_celsius': read['temperature'],
            'power_watts': read['power_mw'] / 1000,
            'clock_events': read['clock_events']}


@each_gpu
def test_an_nvml_without_the_version_2_query_counts_the_reservation(
        conf, scenario, tmp_path, gpu):
    driver, nvml, devices = _driver(conf, scenario, tmp_path, gpu,
                                    memory_v2=False, memory_used_mb=100,
                                    utilization=0)
    reserved = GPUS[gpu]['memory_reserved_mb']
    expected = {KEY: {'utilization': 0.0,
                      'memory_used_bytes': (100 + reserved) * MIB,
                      **_thermals(GPUS[gpu])}}
    assert driver.usage(devices) == expected
    # Asked once: later reads go straight to version 1.
    nvml.update_gpu(ADDRESS, memory_v2=True)
    assert driver.usage(devices) == expected


def test_a_faulting_kernel_is_the_applications_fault(conf, scenario,
                                                     tmp_path):
    """What the H200 answered when a CUDA kernel of ours wrote to an
    unmapped address (cudaErrorIllegalAddress; the kernel log said "Xid
    ...: 31, ... MMU Fault"): one XID 31 event, read as the application's
    error on the next check, and the GPU healthy on the checks after."""
    driver, nvml, devices = _driver(conf, scenario, tmp_path, 'h200_vm')
    driver.check_health(devices)        # registers the GPU's events
    nvml.add_xid(ADDRESS, 31)
    [reading] = driver.check_health(devices)
    assert (reading.severity, reading.code, reading.reason) == (
        states.APPLICATION, 'xid:31', 'XID 31: GPU memory page fault')
    assert reading.counters['xid'] == 1
    [reading] = driver.check_health(devices)
    assert (reading.severity, reading.counters['xid']) == (states.OK, 1)
