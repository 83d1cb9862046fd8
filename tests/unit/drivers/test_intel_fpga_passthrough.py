"""Intel DFL FPGAs passed through: the kernel shows the region tree
(``fpga_region/``: ``compat_id``, the ports' ``afu_id``) only while
dfl-pci is bound to the function, none on vfio-pci or unbound."""

import json
import os
import shutil

import pytest

from cyborg.drivers import base, loader, pci_health
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


def _region_only(attributes):
    """``attributes`` of a PF passed through whole: its region id and
    trait kept, its function id and traits gone."""
    traits = [v for k, v in attributes.items() if k.startswith('trait')
              and not v.startswith('CUSTOM_FPGA_FUNCTION_ID_')]
    kept = {k: v for k, v in attributes.items()
            if not k.startswith('trait') and k != 'function_id'}
    return base.make_attributes(kept.pop('rc'), traits, **kept)


def test_a_pf_passed_through_whole_keeps_only_its_region(conf, tmp_path):
    """The PF is the card's only deployable (no VFs): passed through, its
    instance holds the management engine and can load a function of its
    own; the region stays what it was."""
    tree = _n6001_host(conf, tmp_path)
    driver = _load(conf)
    before = _deployables(driver)['h_0000:b1:00.0']
    region = 'CUSTOM_FPGA_REGION_INTEL_' + N6001_REGION.upper()
    assert region in before.traits
    assert inventory.function_trait(N6001_AFU) in before.traits
    _pass_through(tree, '0000:b1:00.0')
    found = _deployables(driver)['h_0000:b1:00.0']
    assert found.attributes == _region_only(before.attributes)
    assert region in found.traits
    assert found.attributes['region_id'] == N6001_REGION
    assert not [t for t in found.traits
                if t.startswith('CUSTOM_FPGA_FUNCTION_ID_')]
    # An agent restarted meanwhile: the region from its state.
    assert _deployables(_load(conf))['h_0000:b1:00.0'].attributes \
        == found.attributes
    tree.set_driver('0000:b1:00.0', None)
    assert _deployables(driver)['h_0000:b1:00.0'].attributes \
        == found.attributes


def test_a_programmed_image_is_unknown_once_passed_through_whole(
        conf, scenario):
    """The PAC Arria 10 has no VFs: passed through, its image is unknown
    and its record forgotten, its region trait kept.  The N3000's VF
    passed through beside it keeps the function seen on it."""
    tree = scenario('intel_fpga')
    driver = _load(conf)
    vf_trait = inventory.function_trait('d8424dc4a4a3c413f89e433683f9040b')
    tree.set_driver('0000:5e:00.1', 'dfl-pci')
    tree.add_fpga_region('0000:5e:00.1', 'region2',
                         afu_id='d8424dc4a4a3c413f89e433683f9040b')
    driver.remember('0000:d8:00.0', 'img-1')
    assert _deployables(driver)['h_0000:d8:00.0'].bitstream_id == 'img-1'
    _pass_through(tree, '0000:d8:00.0')
    _pass_through(tree, '0000:5e:00.1')
    found = _deployables(_load(conf))
    assert found['h_0000:d8:00.0'].bitstream_id is None
    assert 'CUSTOM_FPGA_FUNCTION_ID_9AEFFE5F_8457_0612_C72E_0935B4C4D7A0' \
        not in found['h_0000:d8:00.0'].traits
    assert 'function_id' not in found['h_0000:d8:00.0'].attributes
    assert 'CUSTOM_FPGA_REGION_INTEL_9346116DA52D5CA8B06AA9A389EF7C8D' \
        in found['h_0000:d8:00.0'].traits
    assert vf_trait in found['h_0000:5e:00.1'].traits
    with open(driver._record().path) as f:
        assert json.load(f) == {}
    # Back on dfl-pci showing the function it ran: the record is gone.
    tree.set_driver('0000:d8:00.0', 'dfl-pci')
    tree.add_fpga_region('0000:d8:00.0', 'region3',
                         compat_id='9346116da52d5ca8b06aa9a389ef7c8d',
                         afu_id='9aeffe5f84570612c72e0935b4c4d7a0')
    assert _deployables(driver)['h_0000:d8:00.0'].bitstream_id is None


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
    tree.add_fpga_region('0000:b1:00.0', 'region0',
                         compat_id='00000000000000000000000000000002',
                         afu_id='00000000000000000000000000000001')
    assert _deployables(driver)['h_0000:b1:00.0'].attributes[
        'function_id'] == '00000000000000000000000000000001'
    _pass_through(tree, '0000:b1:00.0')
    attributes = _deployables(_load(conf))['h_0000:b1:00.0'].attributes
    assert attributes['region_id'] == '00000000000000000000000000000002'
    assert 'function_id' not in attributes


# -- Silicom's DFL cards ------------------------------------------------------

N5010_REGION = '8ea2b1b7c0bd5e1d9b3b5a8f56a5a6a1'


def _silicom_host(conf, tmp_path, driver):
    """A Silicom PAC N5010 (1c2c:1000) and N5011 (1c2c:1001), both in
    dfl-pci's id table, and a Silicom function that is no FPGA."""
    root = tmp_path / 'sys'
    tree = fake_sysfs.FakeSysfs(root)
    fake_sysfs.apply_options(conf, fake_sysfs.INTEL_FPGA_OPTIONS, root,
                             tmp_path / 'state')
    tree.add_pci('0000:3b:00.0', '1c2c', '1000', '120000', driver=driver,
                 numa_node=0, iommu_group=30, subsystem_vendor='1c2c',
                 subsystem_device='1000')
    tree.add_pci('0000:af:00.0', '1c2c', '1001', '120000', driver=driver,
                 numa_node=1, iommu_group=40, subsystem_vendor='1c2c',
                 subsystem_device='1001')
    tree.add_pci('0000:af:00.1', '1c2c', '0003', '020000', driver='ixgbe',
                 numa_node=1, iommu_group=41)
    if driver == 'dfl-pci':
        tree.add_fpga_region('0000:3b:00.0', 'region0',
                             compat_id=N5010_REGION, afu_id=N6001_AFU)
    return tree


def test_silicom_cards_are_found_as_the_other_dfl_cards(conf, tmp_path):
    """The N5010 and N5011 are in dfl-pci's id table under Silicom's
    vendor id: found by their ids whatever driver they are on."""
    for driver, where in (('vfio-pci', 'vfio'), (None, 'unbound'),
                          ('dfl-pci', 'dfl')):
        _silicom_host(conf, tmp_path / where, driver)
        devices = _load(conf).discover()
        assert [(d.controlpath_id.cpid_info, d.vendor, d.model)
                for d in devices] == [
            ('0000:3b:00.0', '1c2c', 'PAC_N5010'),
            ('0000:af:00.0', '1c2c', 'PAC_N5011')], driver
        assert {t for d in devices for dep in d.deployables
                for t in dep.traits} >= {
            'CUSTOM_FPGA_SILICOM', 'CUSTOM_FPGA_SILICOM_PAC_N5010',
            'CUSTOM_FPGA_SILICOM_PAC_N5011'}


def test_silicom_traits_name_silicom_and_the_dfl_ids(conf, tmp_path):
    """The card's vendor in its vendor and model traits (a profile asking
    for an Intel card gets none), the region and function ids as any DFL
    card's; passed through whole (no VFs), the region kept, the function
    not."""
    tree = _silicom_host(conf, tmp_path, 'dfl-pci')
    found = _deployables(_load(conf))['h_0000:3b:00.0']
    assert set(found.traits) == {
        'CUSTOM_FPGA_SILICOM', 'CUSTOM_FPGA_SILICOM_PAC_N5010',
        'CUSTOM_FPGA_REGION_INTEL_' + N5010_REGION.upper(),
        inventory.function_trait(N6001_AFU),
        'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + N6001_AFU.upper()}
    _pass_through(tree, '0000:3b:00.0')
    passed = _deployables(_load(conf))['h_0000:3b:00.0']
    assert set(passed.traits) == {
        'CUSTOM_FPGA_SILICOM', 'CUSTOM_FPGA_SILICOM_PAC_N5010',
        'CUSTOM_FPGA_REGION_INTEL_' + N5010_REGION.upper()}
    assert passed.attributes == _region_only(found.attributes)


def test_programming_a_card_forgets_what_its_vfs_showed(
        conf, scenario, in_process_privsep, fake_tools):
    """The region programmed again runs another function in every port,
    a VF's included: the AFU seen on the VF before says nothing of it."""
    tree = scenario('intel_fpga')
    driver = _load(conf)
    trait = 'CUSTOM_FPGA_FUNCTION_ID_D8424DC4_A4A3_C413_F89E_433683F9040B'
    tree.set_driver('0000:5e:00.1', 'dfl-pci')
    tree.add_fpga_region('0000:5e:00.1', 'region2',
                         afu_id='d8424dc4a4a3c413f89e433683f9040b')
    driver.discover()
    _pass_through(tree, '0000:5e:00.1')
    assert trait in _deployables(driver)['h_0000:5e:00.1'].traits
    image = os.path.join(conf.state_path, 'gbs')
    with open(image, 'wb') as f:
        f.write(b'bits')
    driver.program('0000:5e:00.0', image, 'img-1')
    assert trait not in _deployables(driver)['h_0000:5e:00.1'].traits
    assert trait not in _deployables(_load(conf))['h_0000:5e:00.1'].traits


# -- What holds across programming and reboots ------------------------------

N3000_REGION = 'ce489bd3b9a54a099b8ba7ba9ab1fb8a'


@pytest.fixture
def boot(tmp_path, monkeypatch):
    """``boot(id)`` makes ``id`` this boot's id (None: unreadable)."""
    path = tmp_path / 'boot_id'
    monkeypatch.setattr(pci_health, 'BOOT_ID_FILE', str(path))

    def set_boot(boot_id):
        if boot_id is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(boot_id + '\n')
    return set_boot


def _n3000_vfs_on_vfio(conf, tmp_path):
    """An N3000 whose two VFs are on vfio-pci from the start (where Nova
    wants them): dfl-pci never showed their ports' AFU."""
    root = tmp_path / 'sys'
    tree = fake_sysfs.FakeSysfs(root)
    fake_sysfs.apply_options(conf, fake_sysfs.INTEL_FPGA_OPTIONS, root,
                             tmp_path / 'state')
    tree.add_pci('0000:5e:00.0', '8086', '0b30', '120000', driver='dfl-pci',
                 numa_node=0, iommu_group=70, sriov_totalvfs=2)
    tree.add_fpga_region('0000:5e:00.0', 'region0', compat_id=N3000_REGION)
    tree.add_vfs('0000:5e:00.0', ['0000:5e:00.1', '0000:5e:00.2'],
                 device='0b31', driver='vfio-pci', iommu_base=71)
    return tree


def _images(driver):
    return {name: dep.bitstream_id
            for name, dep in _deployables(driver).items()}


def test_a_card_programmed_while_its_vfs_are_on_vfio_pci_runs_its_image(
        conf, tmp_path, boot, in_process_privsep, fake_tools):
    """No VF shows a function id: the card's region, VFs and boot prove
    the image programmed (no instance holding a VF can reprogram it),
    until the host reboots or the region changes.  Its image read as
    unknown right after programming: every bind programmed it again."""
    boot('boot-1')
    tree = _n3000_vfs_on_vfio(conf, tmp_path)
    driver = _load(conf)
    os.makedirs(conf.state_path, exist_ok=True)
    image = os.path.join(conf.state_path, 'gbs')
    with open(image, 'wb') as f:
        f.write(b'bits')
    driver.program('0000:5e:00.0', image, 'img-1')
    programmed = {'h_0000:5e:00.1': 'img-1', 'h_0000:5e:00.2': 'img-1'}
    assert _images(driver) == programmed
    assert _images(_load(conf)) == programmed
    # The host rebooted: the region runs the flash's default.
    boot('boot-2')
    assert _images(_load(conf)) == dict.fromkeys(programmed)
    driver.program('0000:5e:00.0', image, 'img-2')
    assert set(_images(driver).values()) == {'img-2'}
    # Another region (the FIM updated by hand): nothing proven.
    shutil.rmtree(os.path.join(tree.device_path('0000:5e:00.0'),
                               'fpga_region'))
    tree.add_fpga_region('0000:5e:00.0', 'region0',
                         compat_id='00000000000000000000000000000003')
    assert set(_images(_load(conf)).values()) == {None}
    # The boot id unreadable: nothing proven either.
    boot(None)
    driver.program('0000:5e:00.0', image, 'img-3')
    assert set(_images(driver).values()) == {None}


def test_what_a_vf_showed_before_a_reboot_is_not_used_after_it(
        conf, scenario, boot):
    """After a power cycle the region runs the flash's default; a VF on
    vfio-pci from boot went on reporting the AFU seen before it, and the
    image recorded with it."""
    boot('boot-1')
    tree = scenario('intel_fpga')
    driver = _load(conf)
    tree.set_driver('0000:5e:00.1', 'dfl-pci')
    tree.add_fpga_region('0000:5e:00.1', 'region2', afu_id=N6001_AFU)
    driver.remember('0000:5e:00.0', 'img-A')
    assert _deployables(driver)['h_0000:5e:00.1'].bitstream_id == 'img-A'
    _pass_through(tree, '0000:5e:00.1')
    # Same boot: what the VF showed stands.
    assert _deployables(_load(conf))['h_0000:5e:00.1'].attributes[
        'function_id'] == N6001_AFU
    boot('boot-2')
    found = _deployables(_load(conf))['h_0000:5e:00.1']
    assert found.bitstream_id is None
    assert 'function_id' not in found.attributes
    assert inventory.function_trait(N6001_AFU) not in found.traits
    # Seen again in this boot, then the boot id unreadable: unused.
    tree.set_driver('0000:5e:00.1', 'dfl-pci')
    tree.add_fpga_region('0000:5e:00.1', 'region2', afu_id=N6001_AFU)
    driver.discover()
    _pass_through(tree, '0000:5e:00.1')
    boot(None)
    assert 'function_id' not in _deployables(
        _load(conf))['h_0000:5e:00.1'].attributes
    # Seen while the boot id is unreadable: nothing says in which boot.
    tree.set_driver('0000:5e:00.1', 'dfl-pci')
    tree.add_fpga_region('0000:5e:00.1', 'region2', afu_id=N6001_AFU)
    driver.discover()
    _pass_through(tree, '0000:5e:00.1')
    assert 'function_id' not in _deployables(
        _load(conf))['h_0000:5e:00.1'].attributes
