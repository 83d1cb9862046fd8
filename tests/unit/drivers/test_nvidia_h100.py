"""An H100 as one was read on real hardware, replayed.

The values below were read off an NVIDIA H100 80GB HBM3 passed through to
a virtual machine (driver 580.159.04), by the NVIDIA driver itself and by
``nvidia-smi -q -x`` beside it: the sysfs side is scenario ``h100_vm``
(``tests/fixtures/sysfs.py``), the NVML side is ``H100`` here, in the fake
NVML's format.  What NVML answered that the fake must repeat:

- MIG mode (0, 0): MIG-capable, MIG off; no MIG devices;
- retired pages: ``NVML_ERROR_NOT_SUPPORTED`` (Hopper remaps rows
  instead); remapped rows (0, 0, 0, 0); volatile uncorrected ECC 0;
- memory: 81559 MiB in all, 480 MiB reserved by the driver, 0 MiB used
  (``nvidia-smi``'s "Used"); NVML's version 1 memory query answers 480 MiB
  used, version 2 answers 0 with the 480 MiB as ``reserved``;
- XID and double-bit ECC events can be registered; a wait with no event
  times out.
"""

from cyborg.common import states
from cyborg.drivers import nvidia_gpu
from tests.fixtures import fake_nvml
from tests.fixtures import sysfs as fake_sysfs

KEY = 'PCI:' + fake_sysfs.H100_ADDRESS
MIB = 1024 * 1024
H100 = {'name': 'NVIDIA H100 80GB HBM3',
        'uuid': 'GPU-d763925c-e70e-91d5-7fc6-15731aa57f69',
        'serial': '1753024033999', 'memory_mb': 81559,
        'memory_reserved_mb': 480, 'memory_used_mb': 0, 'utilization': 0,
        'mig': False, 'ecc_uncorrected': 0,
        'remapped_rows': {'correctable': 0, 'uncorrectable': 0,
                          'pending': False, 'failure': False}}


def _driver(conf, scenario, tmp_path, **changes):
    scenario('h100_vm')
    nvml = fake_nvml.create(tmp_path / 'nvml.json',
                            {fake_sysfs.H100_ADDRESS: {**H100, **changes}})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    return driver, nvml, driver.discover()


def test_offered_whole_with_what_nvml_knows(conf, scenario, tmp_path):
    _, _, devices = _driver(conf, scenario, tmp_path)
    [device] = devices
    assert device.model == 'NVIDIA H100 80GB HBM3'
    [deployable] = device.deployables
    assert deployable.attributes == {
        'rc': 'PGPU', 'trait0': 'CUSTOM_NVIDIA_2330', 'vendor_id': '10de',
        'product_id': '2330', 'memory_mb': '81559',
        'serial': '1753024033999',
        'gpu_uuid': 'GPU-d763925c-e70e-91d5-7fc6-15731aa57f69'}
    # MIG off: no MIG deployables and no mig_mode attribute; the whole
    # GPU is one PCI handle although the function has no IOMMU group.
    assert [h.attach_type for h in deployable.attach_handles] == ['PCI']


def test_healthy_with_the_sources_it_has(conf, scenario, tmp_path):
    driver, _nvml, devices = _driver(conf, scenario, tmp_path)
    for _ in range(2):          # the first check also registers events
        [reading] = driver.check_health(devices)
        assert (reading.device, reading.severity) == (KEY, states.OK)
        # Retired pages are not supported on an H100: skipped, no reading.
        assert reading.counters == {
            'xid': 0, 'ecc_uncorrected': 0, 'remapped_rows_correctable': 0,
            'remapped_rows_uncorrectable': 0}


def test_memory_in_use_leaves_the_driver_reservation_out(
        conf, scenario, tmp_path):
    driver, nvml, devices = _driver(conf, scenario, tmp_path)
    # Idle: nvidia-smi says 0 MiB used; version 1 would say 480 MiB.
    assert driver.usage(devices) == {
        KEY: {'utilization': 0.0, 'memory_used_bytes': 0}}
    nvml.update_gpu(fake_sysfs.H100_ADDRESS, memory_used_mb=2048,
                    utilization=87)
    assert driver.usage(devices) == {
        KEY: {'utilization': 0.87, 'memory_used_bytes': 2048 * MIB}}


def test_an_nvml_without_the_version_2_query_counts_the_reservation(
        conf, scenario, tmp_path):
    driver, nvml, devices = _driver(conf, scenario, tmp_path,
                                    memory_v2=False, memory_used_mb=100)
    expected = {KEY: {'utilization': 0.0,
                      'memory_used_bytes': (100 + 480) * MIB}}
    assert driver.usage(devices) == expected
    # Asked once: later reads go straight to version 1.
    nvml.update_gpu(fake_sysfs.H100_ADDRESS, memory_v2=True)
    assert driver.usage(devices) == expected
