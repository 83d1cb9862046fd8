"""Intel DFL FPGAs passed through: the kernel shows the region tree
(``fpga_region/``: ``compat_id``, the ports' ``afu_id``) only while
dfl-pci is bound to the function, none on vfio-pci or unbound."""

import os
import shutil

from cyborg.drivers import loader
from cyborg.objects import inventory
from tests.fixtures import sysfs as fake_sysfs

N6001_REGION = 'f3c99413f5e2bb2f8ec2a4e4b2ad5c3f'
N6001_AFU = 'd8424dc4a4a3c413f89e433683f9040b'


def _load(conf):
    return loader.load_driver(conf, 'h', 'intel_fpga_driver')


def _pass_through(tree, address):
    """What libvirt (managed) does when an instance starts: dfl-pci
    unbound (its region tree goes), vfio-pci bound."""
    shutil.rmtree(os.path.join(tree.device_path(address), 'fpga_region'))
    tree.set_driver(address, 'vfio-pci')


def _deployables(driver):
    return {dep.name: dep for dev in driver.discover()
            for dep in dev.deployables}


def _n6001_host(conf, tmp_path, driver='dfl-pci'):
    root = tmp_path / 'sys'
    tree = fake_sysfs.FakeSysfs(root)
    fake_sysfs.apply_options(conf, fake_sysfs.INTEL_FPGA_OPTIONS, root,
                             tmp_path / 'state')
    tree.add_pci('0000:b1:00.0', '8086', 'bcce', '120000', driver=driver,
                 numa_node=1, iommu_group=60, subsystem_vendor='8086',
                 subsystem_device='1771')
    if driver == 'dfl-pci':
        tree.add_fpga_region('0000:b1:00.0', 'region0',
                             compat_id=N6001_REGION, afu_id=N6001_AFU)
    return tree


def test_an_ofs_card_on_vfio_pci_is_still_discovered(conf, tmp_path):
    """0xbcce (OFS: N6000, N6001...) is not one of the models named, and
    was found only by its region tree: the card vanished from the report
    while an instance held it."""
    _n6001_host(conf, tmp_path, driver='vfio-pci')
    devices = _load(conf).discover()
    assert [(d.controlpath_id.cpid_info, d.model) for d in devices] == [
        ('0000:b1:00.0', 'bcce')]
    _n6001_host(conf, tmp_path / 'unbound', driver=None)
    assert len(_load(conf).discover()) == 1


def test_the_ids_last_seen_stand_while_passed_through(conf, tmp_path):
    tree = _n6001_host(conf, tmp_path)
    driver = _load(conf)
    before = _deployables(driver)['h_0000:b1:00.0']
    assert 'CUSTOM_FPGA_REGION_INTEL_' + N6001_REGION.upper() \
        in before.traits
    assert inventory.function_trait(N6001_AFU) in before.traits
    _pass_through(tree, '0000:b1:00.0')
    assert _deployables(driver)['h_0000:b1:00.0'].attributes \
        == before.attributes
    # An agent restarted meanwhile: from its state.
    assert _deployables(_load(conf))['h_0000:b1:00.0'].attributes \
        == before.attributes


def test_a_programmed_image_stays_reported_while_passed_through(
        conf, scenario):
    tree = scenario('intel_fpga')
    driver = _load(conf)
    driver.remember('0000:d8:00.0', 'img-1')
    _pass_through(tree, '0000:d8:00.0')
    found = _deployables(_load(conf))['h_0000:d8:00.0']
    assert found.bitstream_id == 'img-1'
    assert 'CUSTOM_FPGA_FUNCTION_ID_9AEFFE5F_8457_0612_C72E_0935B4C4D7A0' \
        in found.traits


def test_a_vf_keeps_the_function_seen_while_dfl_pci_held_it(conf, scenario):
    """A VF shows its port's AFU only while dfl-pci is bound to it; VFs
    normally sit on vfio-pci, ready for instances."""
    tree = scenario('intel_fpga')
    driver = _load(conf)
    trait = 'CUSTOM_FPGA_FUNCTION_ID_D8424DC4_A4A3_C413_F89E_433683F9040B'
    assert trait not in _deployables(driver)['h_0000:5e:00.1'].traits
    tree.set_driver('0000:5e:00.1', 'dfl-pci')
    tree.add_fpga_region('0000:5e:00.1', 'region2',
                         afu_id='d8424dc4a4a3c413f89e433683f9040b')
    assert trait in _deployables(driver)['h_0000:5e:00.1'].traits
    _pass_through(tree, '0000:5e:00.1')
    assert trait in _deployables(_load(conf))['h_0000:5e:00.1'].traits


def test_the_ids_seen_are_not_lent_to_another_card(conf, tmp_path):
    """Another card in the slot (its PCI ids differ), or a card gone and
    back: what was seen on the one before says nothing of it."""
    tree = _n6001_host(conf, tmp_path)
    driver = _load(conf)
    driver.discover()
    tree.remove_pci('0000:b1:00.0')
    tree.add_pci('0000:b1:00.0', '8086', 'bcce', '120000',
                 driver='vfio-pci', numa_node=1, iommu_group=60,
                 subsystem_vendor='8086', subsystem_device='1770')
    found = _deployables(_load(conf))['h_0000:b1:00.0']
    assert 'region_id' not in found.attributes
    assert 'function_id' not in found.attributes

    tree.remove_pci('0000:b1:00.0')
    driver.discover()
    tree.add_pci('0000:b1:00.0', '8086', 'bcce', '120000',
                 driver='vfio-pci', numa_node=1, iommu_group=60,
                 subsystem_vendor='8086', subsystem_device='1771')
    assert 'function_id' not in _deployables(
        _load(conf))['h_0000:b1:00.0'].attributes


def test_what_dfl_pci_shows_again_replaces_what_was_seen(conf, tmp_path):
    tree = _n6001_host(conf, tmp_path)
    driver = _load(conf)
    driver.discover()
    _pass_through(tree, '0000:b1:00.0')
    tree.set_driver('0000:b1:00.0', 'dfl-pci')
    tree.add_fpga_region('0000:b1:00.0', 'region0', compat_id=N6001_REGION,
                         afu_id='00000000000000000000000000000001')
    driver.discover()
    _pass_through(tree, '0000:b1:00.0')
    assert _deployables(_load(conf))['h_0000:b1:00.0'].attributes[
        'function_id'] == '00000000000000000000000000000001'
