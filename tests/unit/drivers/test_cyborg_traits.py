"""OpenStack Cyborg's trait names set beside ours, so that device profiles
written for Cyborg (e.g. ``trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10=required``)
still find their providers after migrating, and profiles written for us
keep finding them too (doc/source/drivers.rst, "Compared with OpenStack
Cyborg")."""

import os

from cyborg.drivers import loader


def _traits(conf, driver_name):
    driver = loader.load_driver(conf, 'h', driver_name)
    return {dep.name: set(dep.traits) for dev in driver.discover()
            for dep in dev.deployables}


def test_intel_pac_arria10_has_cyborg_model_trait(conf, scenario):
    scenario('intel_fpga')
    traits = _traits(conf, 'intel_fpga_driver')
    assert {'CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_INTEL_PAC_A10',
            'CUSTOM_FPGA_INTEL_PAC_ARRIA10'} <= traits['h_0000:d8:00.0']
    # Cyborg named no other model: the N3000's VF keeps ours alone.
    n3000 = traits['h_0000:5e:00.1']
    assert 'CUSTOM_FPGA_INTEL_PAC_N3000' in n3000
    assert not {t for t in n3000 if 'ARRIA10' in t}


def test_xilinx_has_cyborg_product_id_trait(conf, scenario):
    scenario('mixed')
    traits = _traits(conf, 'xilinx_fpga_driver')
    assert traits == {'h_0000:d8:00.0': {
        'CUSTOM_FPGA_XILINX', 'CUSTOM_FPGA_XILINX_5004',
        'CUSTOM_FPGA_PRODUCT_ID_5004'}}


def test_vgpu_has_cyborg_type_name_trait(conf, scenario):
    scenario('vgpu')
    traits = _traits(conf, 'nvidia_gpu_driver')
    for address in ('0000:41:00.0', '0000:c1:00.0'):
        assert traits[f'h_{address}_nvidia-223'] == {
            'CUSTOM_NVIDIA_1EB8', 'CUSTOM_NVIDIA_223',
            'CUSTOM_NVIDIA_1EB8_T4_2B'}


def _set_type_name(tree, address, type_id, name):
    """The mdev type's ``name`` file written (None: removed)."""
    path = os.path.join(tree.device_path(address), 'mdev_supported_types',
                        type_id, 'name')
    if name is None:
        os.unlink(path)
    else:
        with open(path, 'w') as f:
            f.write(name + '\n')


def test_vgpu_without_type_name_has_ours_only(conf, scenario):
    """No ``name`` file, or a name of one word: no second word to name
    the type by, so Cyborg's trait is left out (ours are kept)."""
    tree = scenario('vgpu')
    _set_type_name(tree, '0000:41:00.0', 'nvidia-223', None)
    _set_type_name(tree, '0000:c1:00.0', 'nvidia-223', 'T4-2B')
    traits = _traits(conf, 'nvidia_gpu_driver')
    for address in ('0000:41:00.0', '0000:c1:00.0'):
        assert traits[f'h_{address}_nvidia-223'] == {
            'CUSTOM_NVIDIA_1EB8', 'CUSTOM_NVIDIA_223'}


def test_nic_has_cyborg_vf_and_physnet_traits(conf, scenario):
    scenario('nic')
    traits = _traits(conf, 'intel_nic_driver')
    assert {'CUSTOM_NIC', 'CUSTOM_PHYSNET_PHYSNET1', 'CUSTOM_VF',
            'CUSTOM_PHYSNET1'} <= traits['h_0000:b1:00.0']
    assert {'CUSTOM_PHYSNET_PHYSNET2', 'CUSTOM_VF',
            'CUSTOM_PHYSNET2'} <= traits['h_0000:b1:00.1']
