"""tools/nvidia_check.py on what a real H100 answered: its sysfs function
(scenario ``h100_vm``), its NVML answers (``test_nvidia_h100.H100``) and
its ``nvidia-smi -q -x`` (``data/h100-nvidia-smi.xml``, captured beside
them).  The tool finds no difference there, and finds each one made."""

import importlib.util
import pathlib

from tests.fixtures import sysfs as fake_sysfs
from tests.unit.drivers import test_nvidia_h100

ROOT = pathlib.Path(__file__).resolve().parents[3]
XML = pathlib.Path(__file__).parent / 'data' / 'h100-nvidia-smi.xml'


def _tool():
    spec = importlib.util.spec_from_file_location(
        'nvidia_check', ROOT / 'tools' / 'nvidia_check.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(conf, scenario, tmp_path, **changes):
    driver, _nvml, devices = test_nvidia_h100._driver(conf, scenario,
                                                      tmp_path, **changes)
    return devices, driver.usage(devices)


def test_nvidia_smi_xml_is_read():
    smi = _tool().parse_nvidia_smi(XML.read_bytes())
    assert smi == {fake_sysfs.H100_ADDRESS: {
        'name': 'NVIDIA H100 80GB HBM3',
        'uuid': 'GPU-d763925c-e70e-91d5-7fc6-15731aa57f69',
        'serial': '1753024033999', 'memory_mb': 81559, 'memory_used_mb': 0,
        'utilization': 0.0, 'mig_enabled': False}}


def test_the_h100_as_read_shows_no_difference(conf, scenario, tmp_path):
    tool = _tool()
    devices, usage = _read(conf, scenario, tmp_path)
    assert tool.compare(devices, usage,
                        tool.parse_nvidia_smi(XML.read_bytes())) == []


def test_each_difference_is_named(conf, scenario, tmp_path):
    tool = _tool()
    # The driver reads another serial, and the reservation as used (as
    # with NVML's version 1 memory query).
    devices, usage = _read(conf, scenario, tmp_path, serial='42',
                           memory_v2=False)
    smi = tool.parse_nvidia_smi(XML.read_bytes())
    smi['0000:3b:00.0'] = dict(smi[fake_sysfs.H100_ADDRESS])
    found = tool.compare(devices, usage, smi)
    assert len(found) == 3, found
    assert any('serial' in d and "'42'" in d for d in found)
    assert any('memory in use: driver 480 MiB, nvidia-smi 0 MiB' in d
               for d in found)
    assert any(d.startswith('0000:3b:00.0: nvidia-smi lists it')
               for d in found)
