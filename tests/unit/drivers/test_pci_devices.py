"""QAT, NIC, PCI allowlist and duplicate claims."""

import json

import pytest
from oslo_config import cfg

import cyborg.conf
from cyborg.agent import reporter
from cyborg.common import exception
from cyborg.drivers import loader, pci
from tests.fixtures import sysfs as fake_sysfs


def _deps(conf, name):
    driver = loader.load_driver(conf, 'h', name)
    return {dep.name: dep for dev in driver.discover()
            for dep in dev.deployables}


def test_qat_pf_without_vfs_is_not_offered(conf, scenario):
    tree = scenario('qat')
    assert list(_deps(conf, 'intel_qat_driver')) == ['h_0000:3d:00.0']
    tree.add_vfs('0000:3f:00.0', ['0000:3f:01.0'], device='37c9')
    deps = _deps(conf, 'intel_qat_driver')
    assert deps['h_0000:3f:00.0'].num_accelerators == 1


def test_nic_physnet_mapping_by_name_and_address(conf, scenario):
    scenario('nic')
    deps = _deps(conf, 'intel_nic_driver')
    assert sorted(deps) == ['h_0000:b1:00.0', 'h_0000:b1:00.1']
    second = deps['h_0000:b1:00.1']
    assert 'CUSTOM_PHYSNET_PHYSNET2' in second.traits
    assert {h.attach_info['physical_network']
            for h in second.attach_handles} == {'physnet2'}
    conf.set_override('physical_device_mappings',
                      ['eno1:phys-net.3', '0000:b1:00.1:physnet2'], 'agent')
    deps = _deps(conf, 'intel_nic_driver')
    assert sorted(deps) == ['h_0000:18:00.0', 'h_0000:b1:00.1']
    assert 'CUSTOM_PHYSNET_PHYS_NET_3' in deps['h_0000:18:00.0'].traits


def test_two_pfs_of_one_domain_mapped_by_address(tmp_path):
    """Both ports of a NIC mapped by PCI address, as a config file says
    it: the option was a dict, which split each entry at its first colon,
    so both keys were '0000' and reading the option failed (the NIC
    driver's discovery with it: no NIC was ever offered)."""
    config = tmp_path / 'agent.conf'
    config.write_text('[agent]\nphysical_device_mappings = '
                      '0000:b1:00.0:physnet1, 0000:b1:00.1:physnet2, '
                      'ens9\n')
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf(['--config-file', str(config)], project='cyborg',
         default_config_files=[], default_config_dirs=[])
    root = tmp_path / 'sys'
    _tree, options = fake_sysfs.build('nic', root)
    options.pop('physical_device_mappings')
    fake_sysfs.apply_options(conf, options, root, tmp_path / 'state')
    deps = _deps(conf, 'intel_nic_driver')
    assert {name: {h.attach_info['physical_network']
                   for h in dep.attach_handles}
            for name, dep in deps.items()} == {
        'h_0000:b1:00.0': {'physnet1'}, 'h_0000:b1:00.1': {'physnet2'}}


@pytest.mark.parametrize('spec, expected', [
    ({'vendor_id': '15b3'}, ['h_0000:e3:00.0']),
    ({'address': '0000:d8:00.*'}, ['h_0000:d8:00.0', 'h_0000:d8:00.1']),
    ({'address': ':3d:00.'}, ['h_0000:3d:00.1', 'h_0000:3d:00.2']),
    ({'address': {'bus': 'b1', 'function': '[01]'}},
     ['h_0000:b1:01.0', 'h_0000:b1:01.1']),
    ({'devname': 'ens801f0'}, []),   # a PF with VFs is left to its VFs
    ({'vendor_id': '1bd4', 'product_id': '1001'}, ['h_0000:db:00.0']),
])
def test_allowlist_matching(conf, scenario, spec, expected):
    scenario('mixed')
    conf.set_override('passthrough_whitelist', [json.dumps(spec)], 'agent')
    assert sorted(_deps(conf, 'pci_driver')) == expected


def test_allowlist_tags(conf, scenario):
    scenario('mixed')
    conf.set_override('passthrough_whitelist', [json.dumps({
        'vendor_id': '15b3', 'resource_class': 'cx6-vf',
        'traits': 'CUSTOM_FAST,mlx', 'physical_network': 'physnet9',
        'device_type': 'NIC'})], 'agent')
    driver = loader.load_driver(conf, 'h', 'pci_driver')
    [device] = driver.discover()
    [dep] = device.deployables
    assert dep.resource_class == 'CUSTOM_CX6_VF'
    assert dep.traits == ['CUSTOM_FAST', 'CUSTOM_MLX']
    assert dep.attach_handles[0].attach_info['physical_network'] == \
        'physnet9'


def test_allowlisted_processing_accelerators_typed_by_vendor(
        conf, scenario):
    """A PCI processing accelerator (class 12) the allowlist takes is a
    GPU from AMD (Instinct MI300 and later are class 1200), an FPGA from
    Xilinx, an AICHIP from anyone else; a ``device_type`` tag wins."""
    tree = scenario('mixed')
    tree.add_pci('0000:c1:00.0', '1002', '74a1', '120000', driver='vfio-pci',
                 numa_node=1, iommu_group=190)
    conf.set_override('passthrough_whitelist', [
        '{"vendor_id": "1002"}', '{"vendor_id": "10ee"}',
        '{"vendor_id": "19e5"}',
        '{"vendor_id": "1bd4", "product_id": "0042", "device_type": "FPGA"}',
    ], 'agent')
    driver = loader.load_driver(conf, 'h', 'pci_driver')
    assert {dev.deployables[0].name: dev.type
            for dev in driver.discover()} == {
        'h_0000:c1:00.0': 'GPU', 'h_0000:d8:00.0': 'FPGA',
        'h_0000:d8:00.1': 'FPGA', 'h_0000:01:00.0': 'AICHIP',
        'h_0000:da:00.0': 'FPGA'}


@pytest.mark.parametrize('bad', ['{not json', '["a"]',
                                 '{"device_type": "TPU"}',
                                 '{"address": "1:2:3:4:5"}'])
def test_bad_allowlist_entry_stops_loading(conf, bad):
    conf.set_override('passthrough_whitelist', [bad], 'agent')
    with pytest.raises(exception.InvalidParameterValue,
                       match='passthrough_whitelist'):
        loader.load_driver(conf, 'h', 'pci_driver')
    with pytest.raises(ValueError):
        pci.DeviceSpec(bad)


def test_a_device_claimed_twice_is_reported_once(conf, scenario):
    scenario('mixed')
    conf.set_override('passthrough_whitelist', ['{"vendor_id": "10de"}'],
                      'agent')
    conf.set_override('enabled_drivers', ['nvidia_gpu_driver', 'pci_driver'],
                      'agent')
    drivers = loader.load_drivers(conf, 'h')
    devices = reporter.Reporter(conf, 'h', drivers,
                                conductor_api=object()).discover()
    assert [d.key() for d in devices] == ['PCI:0000:3b:00.0']
    assert devices[0].deployables[0].driver_name == 'nvidia_gpu_driver'


def test_amd_gpu_with_vfs_offers_its_vfs_not_itself(conf, scenario):
    tree = scenario('amd_gpu')
    tree.add_vfs('0000:c3:00.0', ['0000:c3:02.0', '0000:c3:02.1'],
                 device='7410', driver='vfio-pci')
    deps = _deps(conf, 'amd_gpu_driver')
    assert sorted(deps) == ['h_0000:23:00.0', 'h_0000:c3:00.0']
    pool = deps['h_0000:c3:00.0']
    assert (pool.resource_class, pool.num_accelerators) == ('VGPU', 2)
    assert [h.attach_info['device'] for h in pool.attach_handles] == \
        ['02', '02']
