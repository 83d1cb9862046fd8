"""tools/nvidia_check.py on what real GPUs answered: their sysfs function
(scenarios ``h100_vm`` and ``h200_vm``), their NVML answers
(``test_nvidia_hardware.GPUS``) and their ``nvidia-smi -q -x``
(``data/<gpu>-nvidia-smi.xml``, captured beside them).  The tool finds no
difference there, and finds each one made."""

import importlib.util
import pathlib

import pytest

from tests.fixtures import sysfs as fake_sysfs
from tests.unit.drivers import test_nvidia_hardware

ROOT = pathlib.Path(__file__).resolve().parents[3]
DATA = pathlib.Path(__file__).parent / 'data'


def _xml(gpu):
    return (DATA / (gpu.split('_')[0] + '-nvidia-smi.xml')).read_bytes()


def _tool():
    spec = importlib.util.spec_from_file_location(
        'nvidia_check', ROOT / 'tools' / 'nvidia_check.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(conf, scenario, tmp_path, gpu='h100_vm', **changes):
    driver, _nvml, devices = test_nvidia_hardware._driver(
        conf, scenario, tmp_path, gpu, **changes)
    return devices, driver.usage(devices)


@pytest.mark.parametrize('gpu, used, utilization, thermals', [
    ('h100_vm', 0, 0.0, (36, 71.49, ['gpu_idle'])),
    ('h200_vm', 6131, 1.0, (61, 690.15, ['sw_power_cap']))])
def test_nvidia_smi_xml_is_read(gpu, used, utilization, thermals):
    read = test_nvidia_hardware.GPUS[gpu]
    smi = _tool().parse_nvidia_smi(_xml(gpu))
    assert smi == {fake_sysfs.VM_GPU_ADDRESS: {
        'name': read['name'], 'uuid': read['uuid'], 'serial': read['serial'],
        'memory_mb': read['memory_mb'], 'memory_used_mb': used,
        'utilization': utilization, 'mig_enabled': False,
        'temperature_celsius': thermals[0], 'power_watts': thermals[1],
        'clock_events': thermals[2]}}


def test_nvidia_smi_before_535_names_them_throttle_reasons():
    reasons = ''.join(
        f'<clocks_throttle_reason_{name}>{state}'
        f'</clocks_throttle_reason_{name}>'
        for name, state in (('gpu_idle', 'Not Active'),
                            ('hw_slowdown', 'Active'),
                            ('sw_thermal_slowdown', 'Active')))
    xml = f'''<nvidia_smi_log><gpu id="00000000:3B:00.0">
      <product_name>Tesla V100-PCIE-16GB</product_name>
      <clocks_throttle_reasons>{reasons}</clocks_throttle_reasons>
      <power_readings><power_draw>251.30 W</power_draw></power_readings>
      <temperature><gpu_temp>84 C</gpu_temp></temperature>
    </gpu></nvidia_smi_log>'''.encode()
    [gpu] = _tool().parse_nvidia_smi(xml).values()
    assert (gpu['clock_events'], gpu['power_watts'],
            gpu['temperature_celsius']) == (
        ['hw_slowdown', 'sw_thermal_slowdown'], 251.3, 84)


@test_nvidia_hardware.each_gpu
def test_the_gpu_as_read_shows_no_difference(conf, scenario, tmp_path, gpu):
    tool = _tool()
    devices, usage = _read(conf, scenario, tmp_path, gpu)
    assert tool.compare(devices, usage,
                        tool.parse_nvidia_smi(_xml(gpu))) == []


def test_each_difference_is_named(conf, scenario, tmp_path):
    tool = _tool()
    # The driver reads another serial, and the reservation as used (as
    # with NVML's version 1 memory query).
    # It reads the GPU 10 C hotter and in a hardware slowdown.
    devices, usage = _read(conf, scenario, tmp_path, serial='42',
                           memory_v2=False, temperature=46,
                           clock_events=['hw_slowdown'])
    smi = tool.parse_nvidia_smi(_xml('h100_vm'))
    smi['0000:3b:00.0'] = dict(smi[fake_sysfs.VM_GPU_ADDRESS])
    found = tool.compare(devices, usage, smi)
    assert len(found) == 5, found
    assert 'temperature_celsius: driver 46, nvidia-smi 36' in found[-2]
    assert found[-1].endswith(
        "clock_events: driver ['hw_slowdown'], nvidia-smi ['gpu_idle']")
    assert any('serial' in d and "'42'" in d for d in found)
    assert any('memory in use: driver 480 MiB, nvidia-smi 0 MiB' in d
               for d in found)
    assert any(d.startswith('0000:3b:00.0: nvidia-smi lists it')
               for d in found)
