"""Discovery at the edges: AMD Instinct accelerators of the processing
accelerator class, whole-function PFs with SR-IOV VFs enabled, allowlist
tags checked at start, and sysfs values that are not text."""

import json
import os

import pytest

from cyborg.agent import reporter
from cyborg.common import exception
from cyborg.drivers import loader, pci, sysfs
from cyborg.objects import inventory


def _devices(conf, name):
    return loader.load_driver(conf, 'h', name).discover()


def _deps(conf, name):
    return {dep.name: dep for dev in _devices(conf, name)
            for dep in dev.deployables}


def _write(path, data):
    with open(path, 'wb') as f:
        f.write(data)


# -- AMD Instinct MI300 and later: class 0x1200 ---------------------------

def test_amd_instinct_of_accelerator_class_is_offered(conf, scenario):
    """MI300X (1002:74a1) and later present as processing accelerators
    (0x1200), not display controllers: they were never discovered."""
    tree = scenario('amd_gpu')
    tree.add_pci('0000:05:00.0', '1002', '74a1', '120000', driver='amdgpu',
                 numa_node=0, iommu_group=10)
    # AMD's XDNA NPU is vendor 0x1022: not one of this driver's.
    tree.add_pci('0000:c6:00.1', '1022', '17f0', '118000',
                 driver='amdxdna', numa_node=0, iommu_group=11)
    tree.add_pci('0000:c7:00.1', '1022', '1502', '120000',
                 driver='amdxdna', numa_node=0, iommu_group=12)
    devices = {d.key(): d for d in _devices(conf, 'amd_gpu_driver')}
    assert sorted(devices) == ['PCI:0000:05:00.0', 'PCI:0000:23:00.0',
                               'PCI:0000:c3:00.0']
    mi300 = devices['PCI:0000:05:00.0']
    assert mi300.type == 'GPU'
    assert mi300.std_board_info['controller'] == 'Processing accelerators'
    [dep] = mi300.deployables
    assert (dep.name, dep.resource_class, dep.traits) == \
        ('h_0000:05:00.0', 'PGPU', ['CUSTOM_AMD_74A1'])
    assert [h.attach_info['bus'] for h in dep.attach_handles] == ['05']


def test_amd_instinct_of_accelerator_class_offers_its_vfs(conf, scenario):
    tree = scenario('amd_gpu')
    tree.add_pci('0000:05:00.0', '1002', '74a1', '120000', driver='amdgpu',
                 numa_node=0, iommu_group=10, sriov_totalvfs=8)
    tree.add_vfs('0000:05:00.0', ['0000:05:02.0', '0000:05:02.1'],
                 device='74b5', driver='vfio-pci', iommu_base=20)
    pool = _deps(conf, 'amd_gpu_driver')['h_0000:05:00.0']
    assert (pool.resource_class, pool.num_accelerators) == ('VGPU', 2)
    assert [h.attach_info['function'] for h in pool.attach_handles] == \
        ['0', '1']


# -- whole-function drivers: a PF with VFs enabled is not offered ----------

WHOLE = [
    ('inspur_nvme_ssd_driver', '0000:db:00.0', ('1bd4', '1001', '010802'),
     'nvme', '1002'),
    ('huawei_ascend_driver', '0000:01:00.0', ('19e5', 'd500', '120000'),
     'devdrv_device_driver', 'd500'),
    ('inspur_fpga_driver', '0000:da:00.0', ('1bd4', '0042', '120000'),
     'vfio-pci', '0043'),
]


@pytest.mark.parametrize('name, pf, ids, host_driver, vf_device', WHOLE)
def test_whole_function_pf_with_vfs_is_not_offered(
        conf, scenario, name, pf, ids, host_driver, vf_device):
    tree = scenario('mixed')
    tree.remove_pci(pf)
    tree.add_pci(pf, *ids, driver=host_driver, numa_node=1,
                 iommu_group=170, sriov_totalvfs=8)
    assert list(_deps(conf, name)) == [f'h_{pf}']
    vfs = [pf[:-1] + '1', pf[:-1] + '2']
    tree.add_vfs(pf, vfs, device=vf_device, driver='vfio-pci',
                 iommu_base=171)
    assert _deps(conf, name) == {}
    # Nor are its VFs offered by this driver, even of the PF's device id.
    tree.disable_vfs(pf)
    tree.add_vfs(pf, vfs, driver='vfio-pci', iommu_base=171)
    assert _deps(conf, name) == {}
    tree.disable_vfs(pf)
    assert list(_deps(conf, name)) == [f'h_{pf}']


def test_pf_with_sriov_numvfs_but_no_vf_links_is_not_offered(conf,
                                                             scenario):
    """VFs being made (``sriov_numvfs`` written, their functions not
    there yet) are enabled VFs too."""
    tree = scenario('ascend')
    _write(os.path.join(tree.device_path('0000:81:00.0'), 'sriov_numvfs'),
           b'2\n')
    assert list(_deps(conf, 'huawei_ascend_driver')) == ['h_0000:01:00.0']


def test_nvme_vfs_offered_by_allowlist_without_their_pf(conf, scenario):
    """The PF and each of its VFs were all reported: the same silicon
    allocated twice."""
    tree = scenario('mixed')
    tree.remove_pci('0000:db:00.0')
    tree.add_pci('0000:db:00.0', '1bd4', '1001', '010802', driver='nvme',
                 numa_node=1, iommu_group=170, sriov_totalvfs=8)
    tree.add_vfs('0000:db:00.0', ['0000:db:00.1', '0000:db:00.2'],
                 device='1002', driver='vfio-pci', iommu_base=171)
    conf.set_override('enabled_drivers',
                      ['inspur_nvme_ssd_driver', 'pci_driver'], 'agent')
    conf.set_override('passthrough_whitelist',
                      ['{"vendor_id": "1bd4", "product_id": "1002"}'],
                      'agent')
    drivers = loader.load_drivers(conf, 'h')
    devices = reporter.Reporter(conf, 'h', drivers,
                                conductor_api=object()).discover()
    assert [d.key() for d in devices] == ['PCI:0000:db:00.1',
                                          'PCI:0000:db:00.2']


# -- pci_driver: allowlist tags checked when the entry is parsed -----------

@pytest.mark.parametrize('bad', [
    {'vendor_id': '15b3', 'traits': ['CUSTOM_A', 'CUSTOM_B']},
    {'vendor_id': '15b3', 'traits': 7},
    {'vendor_id': '15b3', 'traits': 'CUSTOM_A,' + 'X' * 250},
    {'vendor_id': '15b3', 'resource_class': ''},
    {'vendor_id': '15b3', 'resource_class': ' '},
    {'vendor_id': '15b3', 'resource_class': 'CUSTOM_'},
    {'vendor_id': '15b3', 'resource_class': 'R' * 250},
    {'vendor_id': '15b3', 'resource_class': 7},
    {'vendor_id': '15b3', 'resource_class': ['PGPU']},
    {'vendor_id': '15b3', 'physical_network': 7},
    {'vendor_id': '15b3', 'physical_network': ['physnet1']},
    {'vendor_id': '15b3', 'device_type': ['NIC']},
])
def test_bad_allowlist_tag_stops_loading(conf, scenario, bad):
    scenario('mixed')
    text = json.dumps(bad)
    conf.set_override('passthrough_whitelist', [text], 'agent')
    with pytest.raises(exception.InvalidParameterValue,
                       match='passthrough_whitelist') as caught:
        loader.load_driver(conf, 'h', 'pci_driver')
    message = str(caught.value)
    assert text in message and '\n' not in message
    with pytest.raises(ValueError):
        pci.DeviceSpec(text)


@pytest.mark.parametrize('value', ['', '  '])
def test_an_empty_physical_network_is_none(value):
    """Entries that worked before (the conductor took the empty
    attribute) keep working: an empty physical network is none."""
    spec = pci.DeviceSpec(json.dumps({'vendor_id': '15b3',
                                      'physical_network': value}))
    assert spec.physical_network is None


@pytest.mark.parametrize('tags, rc, traits', [
    # Standard names are kept, as Nova's [pci]device_spec keeps them.
    ({'resource_class': 'PGPU', 'traits': 'HW_GPU_API_VULKAN'},
     'PGPU', ['HW_GPU_API_VULKAN']),
    # HW_GPU_API_CUDA is no standard trait.
    ({'resource_class': 'VGPU', 'traits': 'HW_GPU_API_CUDA'},
     'VGPU', ['CUSTOM_HW_GPU_API_CUDA']),
    ({'resource_class': 'CUSTOM_CX6', 'traits':
      ' CUSTOM_FAST , HW_NIC_SRIOV,mlx-5,, '},
     'CUSTOM_CX6', ['CUSTOM_FAST', 'CUSTOM_MLX_5', 'HW_NIC_SRIOV']),
    # Other names are made CUSTOM_ (a standard name in lower case too).
    ({'resource_class': 'pgpu', 'traits': 'hw_gpu_api_vulkan'},
     'CUSTOM_PGPU', ['CUSTOM_HW_GPU_API_VULKAN']),
    ({'resource_class': 'cx6-vf'}, 'CUSTOM_CX6_VF', ['CUSTOM_PCI_15B3_101D']),
    ({'traits': ''}, 'CUSTOM_PCI', ['CUSTOM_PCI_15B3_101D']),
])
def test_allowlist_names(conf, scenario, tags, rc, traits):
    scenario('mixed')
    conf.set_override('passthrough_whitelist',
                      [json.dumps({'vendor_id': '15b3', **tags})], 'agent')
    [device] = _devices(conf, 'pci_driver')
    [dep] = device.deployables
    assert (dep.resource_class, dep.traits) == (rc, traits)
    assert [inventory.attribute_problem(key, value)
            for key, value in dep.attributes.items()
            if inventory.attribute_problem(key, value)] == []


# -- sysfs values that are not text ------------------------------------------

def test_read_text_of_a_value_that_is_not_utf8(tmp_path):
    path = tmp_path / 'vendor'
    path.write_bytes(b'\x80\x81\n')
    assert sysfs.read_text(str(path)) is None
    assert sysfs.read_text(str(path), 'unknown') == 'unknown'
    assert sysfs.read_int(str(path), 5) == 5


def test_a_function_not_utf8_stops_no_discovery(conf, scenario):
    """One non-UTF-8 byte in any function's file stopped discovery for
    every PCI driver."""
    tree = scenario('amd_gpu')
    tree.add_pci('0000:00:1f.0', '8086', 'a1c1', '060100')
    _write(os.path.join(tree.device_path('0000:00:1f.0'), 'vendor'),
           b'\x80\x81\n')
    _write(os.path.join(tree.device_path('0000:c3:00.0'), 'numa_node'),
           b'\xff\xfe\n')
    conf.set_override('passthrough_whitelist', ['{"vendor_id": "1002"}'],
                      'agent')
    functions = sysfs.Sysfs(conf.agent.sysfs_root).pci_functions()
    assert '0000:00:1f.0' not in [f.address for f in functions]
    deps = _deps(conf, 'amd_gpu_driver')
    assert sorted(deps) == ['h_0000:23:00.0', 'h_0000:c3:00.0']
    assert 'numa_node' not in deps['h_0000:c3:00.0'].attributes
    assert 'h_0000:23:00.1' in _deps(conf, 'pci_driver')


# -- QAT: one trait per service the endpoint serves --------------------------

@pytest.mark.parametrize('services, expected', [
    ('sym;asym', ['CUSTOM_QAT_ASYM', 'CUSTOM_QAT_SYM']),
    ('dc', ['CUSTOM_QAT_DC']),
    ('asym;dc', ['CUSTOM_QAT_ASYM', 'CUSTOM_QAT_DC']),
    ('dc;sym\n', ['CUSTOM_QAT_DC', 'CUSTOM_QAT_SYM']),
    ('dcc', ['CUSTOM_QAT_DC', 'CUSTOM_QAT_DCC']),
    ('sym;dc;decomp', ['CUSTOM_QAT_DC', 'CUSTOM_QAT_DECOMP',
                       'CUSTOM_QAT_SYM']),
])
def test_qat_endpoint_traits_name_its_services(conf, scenario, services,
                                               expected):
    """A compression profile could land on a crypto-only endpoint: every
    endpoint had the same traits whatever it served."""
    tree = scenario('mixed')
    path = os.path.join(tree.device_path('0000:3d:00.0'), 'qat')
    os.makedirs(path, exist_ok=True)
    _write(os.path.join(path, 'cfg_services'), services.encode())
    dep = _deps(conf, 'intel_qat_driver')['h_0000:3d:00.0']
    assert dep.traits == sorted(['CUSTOM_QAT', 'CUSTOM_QAT_4XXX',
                                 *expected])


def test_qat_endpoint_without_cfg_services_has_no_service_trait(conf,
                                                                scenario):
    scenario('qat')
    dep = _deps(conf, 'intel_qat_driver')['h_0000:3d:00.0']
    assert dep.traits == ['CUSTOM_QAT', 'CUSTOM_QAT_C62X']


def test_pf_left_out_for_its_vfs_is_logged_once(conf, scenario, caplog):
    tree = scenario('ascend')
    tree.remove_pci('0000:81:00.0')
    tree.add_pci('0000:81:00.0', '19e5', 'd500', '120000',
                 driver='vfio-pci', numa_node=1, iommu_group=141,
                 sriov_totalvfs=4)
    tree.add_vfs('0000:81:00.0', ['0000:81:00.1'], driver='vfio-pci')
    driver = loader.load_driver(conf, 'h', 'huawei_ascend_driver')
    with caplog.at_level('INFO', logger='cyborg.drivers.base'):
        for _ in range(3):
            assert [d.key() for d in driver.discover()] == \
                ['PCI:0000:01:00.0']
    said = [r.getMessage() for r in caplog.records
            if '0000:81:00.0' in r.getMessage()]
    assert len(said) == 1 and 'SR-IOV VFs enabled' in said[0]
