"""NVML errors in the middle of reading one GPU at discovery: a MIG
instance destroyed between two NVML calls, the GPU lost while its MIG
devices are read.  They escaped discovery, and every GPU of the host was
frozen at its last acknowledged state (another GPU's vGPU capacity
change was not reported).  One GPU NVML cannot read costs that GPU alone,
and a MIG device that is gone costs that MIG device alone."""

import logging

import pytest

from cyborg.drivers import nvidia_gpu
from tests.fixtures import fake_nvml

MIG_GPU = '0000:3b:00.0'
# An A100 whose four VFs host vGPUs of the enabled type, all free.
VGPU_GPU = '0000:86:00.0'
A100 = {'name': 'NVIDIA A100-PCIE-40GB', 'uuid': 'GPU-1111', 'serial':
        '1320221000001', 'memory_mb': 40960}
# A GPU instance split in two compute instances, and another.
MIGS = [{'gpu_instance_id': 1, 'compute_instance_id': 0,
         'profile': '1c.3g.20gb', 'memory_mb': 20096, 'uuid': 'MIG-a'},
        {'gpu_instance_id': 1, 'compute_instance_id': 1,
         'profile': '1c.3g.20gb', 'memory_mb': 20096, 'uuid': 'MIG-b'},
        {'gpu_instance_id': 2, 'profile': '3g.20gb', 'memory_mb': 20096,
         'uuid': 'MIG-c'}]
MIG_NAMES = ['h_0000:3b:00.0_MIG1', 'h_0000:3b:00.0_MIG1.1',
             'h_0000:3b:00.0_MIG2']


def _host(conf, scenario, tmp_path):
    tree = scenario('nvidia_sriov')
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {
        MIG_GPU: dict(A100, mig=[dict(m) for m in MIGS]),
        '0000:5e:00.0': dict(A100, uuid='GPU-2222', mig=False),
        VGPU_GPU: dict(A100, uuid='GPU-3333', mig=False)})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    driver.name = 'nvidia_gpu_driver'
    return tree, nvml, driver


def _deployables(driver):
    return {dep.name: dep for dev in driver.discover()
            for dep in dev.deployables}


def _mig_names(deployables):
    return sorted(name for name in deployables if name.startswith(
        'h_0000:3b:00.0'))


def _vgpus(deployables):
    return deployables['h_0000:86:00.0_nvidia-471'].num_accelerators


def _fail_mig(nvml, index, errors):
    state = nvml.read()
    state['gpus'][MIG_GPU]['mig'][index]['errors'] = errors
    nvml.write(state)


def test_a_mig_device_destroyed_while_read_is_left_out_alone(
        conf, scenario, tmp_path):
    """Its handle taken, then every call on it answers NOT_FOUND: that
    MIG device is gone, the GPU's others are still offered."""
    _, nvml, driver = _host(conf, scenario, tmp_path)
    assert _mig_names(_deployables(driver)) == MIG_NAMES
    _fail_mig(nvml, 1, {'*': 'NOT_FOUND'})
    deployables = _deployables(driver)
    assert _mig_names(deployables) == ['h_0000:3b:00.0_MIG1',
                                       'h_0000:3b:00.0_MIG2']
    assert deployables['h_0000:3b:00.0_MIG2'].attributes['mig_uuid'] == \
        'MIG-c'
    # Destroyed after the first call on it only.
    _fail_mig(nvml, 1, {'nvmlDeviceGetUUID': 'NOT_FOUND'})
    assert _mig_names(_deployables(driver)) == ['h_0000:3b:00.0_MIG1',
                                                'h_0000:3b:00.0_MIG2']


# Where the error hits: (whose calls fail, calls).
LOST_MID_READ = {
    'mig mode': ('gpu', {'nvmlDeviceGetMigMode': 'GPU_IS_LOST'}),
    'mig device count': ('gpu',
                         {'nvmlDeviceGetMaxMigDeviceCount': 'GPU_IS_LOST'}),
    'mig device handle': ('gpu', {
        'nvmlDeviceGetMigDeviceHandleByIndex': 'GPU_IS_LOST'}),
    'mig name': ('mig', {'nvmlDeviceGetName': 'GPU_IS_LOST'}),
    'mig gpu instance': ('mig',
                         {'nvmlDeviceGetGpuInstanceId': 'GPU_IS_LOST'}),
    'mig compute instance': ('mig',
                             {'nvmlDeviceGetComputeInstanceId': 'UNKNOWN'}),
    'mig uuid': ('mig', {'nvmlDeviceGetUUID': 'GPU_IS_LOST'}),
    'mig memory': ('mig', {'nvmlDeviceGetMemoryInfo': 'GPU_IS_LOST'}),
    'gpu memory': ('gpu', {'nvmlDeviceGetMemoryInfo': 'GPU_IS_LOST'}),
}


@pytest.mark.parametrize('where', sorted(LOST_MID_READ))
def test_a_gpu_nvml_fails_to_read_costs_that_gpu_alone(
        conf, scenario, tmp_path, where):
    """An NVML error on any call of a GPU in MIG mode, or of one of its
    MIG devices: that GPU's MIG instances are reported as last discovered
    (not the whole GPU under them, not some or none of them, not the
    second compute instance named as the first), and the other GPUs as
    they are now.  Once NVML reads it again, what it says goes."""
    tree, nvml, driver = _host(conf, scenario, tmp_path)
    assert _mig_names(_deployables(driver)) == MIG_NAMES
    assert _vgpus(_deployables(driver)) == 4

    whose, errors = LOST_MID_READ[where]
    if whose == 'gpu':
        nvml.update_gpu(MIG_GPU, errors=errors)
    else:
        _fail_mig(nvml, 1, errors)
    tree.set_available('0000:86:00.4', 'nvidia-471', 0)
    deployables = _deployables(driver)
    assert _mig_names(deployables) == MIG_NAMES
    assert _vgpus(deployables) == 3            # read as it is now

    nvml.update_gpu(MIG_GPU, errors=None, mig=MIGS[:1])
    assert _mig_names(_deployables(driver)) == ['h_0000:3b:00.0_MIG1']


def test_a_whole_gpu_lost_mid_read_is_read_from_sysfs(conf, scenario,
                                                      tmp_path):
    """Not in MIG mode when last read: the GPU is described from sysfs
    alone while NVML cannot read it, the others with what NVML says."""
    _, nvml, driver = _host(conf, scenario, tmp_path)
    nvml.update_gpu(MIG_GPU, mig=False)
    assert _deployables(driver)['h_0000:3b:00.0'].attributes[
        'memory_mb'] == '40960'
    nvml.update_gpu(MIG_GPU, errors={'nvmlDeviceGetMigMode': 'GPU_IS_LOST'})
    deployables = _deployables(driver)
    assert 'memory_mb' not in deployables['h_0000:3b:00.0'].attributes
    assert deployables['h_0000:86:00.0_nvidia-471'].attributes[
        'gpu_uuid'] == 'GPU-3333'


def test_a_gpu_nvml_cannot_read_is_logged_when_it_starts_and_ends(
        conf, scenario, tmp_path, caplog):
    """Discovery runs at every report: a GPU NVML cannot read for an hour
    is one warning (and one for its MIG instances kept), not one of each
    at every report, and never a traceback; another when the reason
    changes, and a line when NVML reads it again."""
    caplog.set_level(logging.DEBUG, logger='cyborg.drivers.nvidia_gpu')
    _, nvml, driver = _host(conf, scenario, tmp_path)
    driver.discover()

    def logged():
        found = [(r.levelname, r.getMessage()) for r in caplog.records
                 if MIG_GPU in r.getMessage() and r.levelno >= logging.INFO]
        assert not any(r.exc_info for r in caplog.records)
        caplog.clear()
        return found

    nvml.update_gpu(MIG_GPU, lost=True)
    for _ in range(3):
        driver.discover()
    found = logged()
    assert [level for level, _ in found] == ['WARNING', 'WARNING']
    assert 'GPU is lost' in found[0][1]
    assert 'last seen in MIG mode' in found[1][1]

    nvml.update_gpu(MIG_GPU, lost=False,
                    errors={'nvmlDeviceGetMaxMigDeviceCount': 'UNKNOWN'})
    driver.discover()
    driver.discover()
    found = logged()
    assert [level for level, _ in found] == ['WARNING']
    assert 'Unknown Error' in found[0][1]

    nvml.update_gpu(MIG_GPU, errors=None)
    driver.discover()
    driver.discover()
    found = logged()
    assert [level for level, _ in found] == ['INFO', 'INFO']
    assert 'reads GPU 0000:3b:00.0 again' in found[0][1]
