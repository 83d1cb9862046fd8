"""What proves which image an FPGA runs: the record of the image the
agent programmed holds only while the card still shows the fingerprint
recorded with it (``cyborg.drivers.fpga``)."""

import json
import os
import shutil

import pytest

from cyborg.common import exception
from cyborg.drivers import fpga
from cyborg.drivers import loader
from tests.fixtures import sysfs as fake_sysfs

XCLBIN_1 = '1f9c6bd6-6c4e-4a8f-b6d2-55d1c0b0e001'
XCLBIN_2 = '1f9c6bd6-6c4e-4a8f-b6d2-55d1c0b0e002'


def _load(conf, name):
    return loader.load_driver(conf, 'h', name)


def _reported(driver):
    return {dep.name: dep.bitstream_id for dev in driver.discover()
            for dep in dev.deployables}


def _recorded(driver):
    with open(driver._record().path) as f:
        return {address: entry['image_uuid']
                for address, entry in json.load(f).items()}


def _image(conf, name='k.xclbin'):
    os.makedirs(conf.state_path, exist_ok=True)
    path = os.path.join(conf.state_path, name)
    with open(path, 'wb') as f:
        f.write(b'bits')
    return path


def _xbutil_loads(fake_tools, tree, uuid):
    """Make the fake ``xbutil`` load an xclbin of uuid ``uuid``: xocl then
    shows it in the user function's ``xclbinuuid``."""
    path = os.path.join(tree.device_path('0000:d8:00.1'), 'xclbinuuid')
    script = fake_tools.parent / 'bin' / 'xbutil'
    script.write_text(f'#!/bin/sh\necho "xbutil $*" >> {fake_tools}\n'
                      f'echo {uuid} > {path}\n')


# -- Xilinx -------------------------------------------------------------------


def test_xilinx_image_is_reported_while_its_xclbin_is_loaded(
        conf, scenario, in_process_privsep, fake_tools):
    tree = scenario('mixed')
    _xbutil_loads(fake_tools, tree, XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.program('0000:d8:00.0', _image(conf), 'img-1')
    assert _reported(driver) == {'h_0000:d8:00.0': 'img-1'}
    # An agent restarted.
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': 'img-1'}


def test_xilinx_image_is_unknown_once_reprogrammed_by_hand(
        conf, scenario, in_process_privsep, fake_tools):
    """``xbutil program`` run by hand loaded another xclbin: the record
    made at programming named the image still, and the conductor, which
    skips programming a card recorded as running the image asked for,
    gave an instance a card not running its image."""
    tree = scenario('mixed')
    _xbutil_loads(fake_tools, tree, XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.program('0000:d8:00.0', _image(conf), 'img-1')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_2)
    assert _reported(driver) == {'h_0000:d8:00.0': None}
    # Forgotten: the first xclbin loaded again by hand proves nothing.
    assert _recorded(driver) == {}
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}


def test_xilinx_image_is_unknown_after_a_reset(conf, scenario):
    """A reset or a reboot unloads the xclbin: xocl shows none."""
    tree = scenario('mixed')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.remember('0000:d8:00.0', 'img-1')
    assert _reported(driver) == {'h_0000:d8:00.0': 'img-1'}
    tree.set_xclbin('0000:d8:00.1')
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}
    assert _recorded(driver) == {}


def _pass_through_user(tree, address='0000:d8:00.1'):
    """What libvirt does when an instance starts with the Alveo's user
    function: xocl unbound (its ``xclbinuuid`` and XMC sub-device go),
    vfio-pci bound.  xclmgmt keeps the management function."""
    path = tree.device_path(address)
    if os.path.exists(os.path.join(path, 'xclbinuuid')):
        os.unlink(os.path.join(path, 'xclbinuuid'))
    for name in os.listdir(path):
        if name.startswith('xmc.'):
            shutil.rmtree(os.path.join(path, name))
    tree.set_driver(address, 'vfio-pci')


def _keeps_nothing_seen(driver):
    """The Xilinx driver writes no state of ids last seen."""
    return not os.path.exists(driver._last_seen().path)


def test_xilinx_image_is_unknown_while_passed_through(
        conf, scenario, in_process_privsep, fake_tools):
    """The user function given to an instance (vfio-pci), or unbound:
    xocl shows no ``xclbinuuid``, and nothing read before stands for it,
    though xclmgmt's serial number confirms the same card: the instance
    can load xclbins of its own through xclmgmt's mailbox."""
    tree = scenario('mixed')
    _xbutil_loads(fake_tools, tree, XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.program('0000:d8:00.0', _image(conf), 'img-1')
    assert _reported(driver) == {'h_0000:d8:00.0': 'img-1'}
    _pass_through_user(tree)
    assert os.listdir(tree.device_path('0000:d8:00.0')).count(
        'xmc.m.1024') == 1
    assert _reported(driver) == {'h_0000:d8:00.0': None}
    # The record made at programming is forgotten, not merely unused.
    assert _recorded(driver) == {}
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}
    tree.set_driver('0000:d8:00.1', None)
    assert _reported(driver) == {'h_0000:d8:00.0': None}
    # Back on xocl, showing the xclbin programmed: the record is gone,
    # and nothing shows the instance did not load that xclbin itself.
    tree.set_driver('0000:d8:00.1', 'xocl')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    assert _reported(driver) == {'h_0000:d8:00.0': None}
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}
    assert _keeps_nothing_seen(driver)


def test_xilinx_image_is_unknown_on_xocl_without_xclbinuuid(conf, scenario):
    """xocl bound but no ``xclbinuuid`` readable: nothing shows which
    image the card runs, whatever was seen before."""
    tree = scenario('mixed')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.remember('0000:d8:00.0', 'img-1')
    os.unlink(os.path.join(tree.device_path('0000:d8:00.1'), 'xclbinuuid'))
    assert _reported(driver) == {'h_0000:d8:00.0': None}


def test_xilinx_a_card_swapped_in_the_slot_is_lent_nothing(
        conf, scenario):
    """Another card of the same model in the slot, its user function on
    vfio-pci from the start; or the same card gone and back, passed
    through: nothing read on the card before says what it runs."""
    tree = scenario('mixed')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.remember('0000:d8:00.0', 'img-1')
    assert _reported(driver) == {'h_0000:d8:00.0': 'img-1'}
    _swap_card(tree, '5004', '5005', '21290594399X')
    _pass_through_user(tree)
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}
    assert _recorded(driver) == {}
    # Recorded while passed through: no fingerprint, which holds for none.
    driver.remember('0000:d8:00.0', 'img-1')
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}

    tree.set_driver('0000:d8:00.1', 'xocl')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    driver.remember('0000:d8:00.0', 'img-1')
    assert _reported(driver) == {'h_0000:d8:00.0': 'img-1'}
    tree.remove_pci('0000:d8:00.1')
    assert _reported(driver) == {'h_0000:d8:00.0': None}
    assert _recorded(driver) == {}
    tree.add_pci('0000:d8:00.1', '10ee', '5005', '120000',
                 driver='vfio-pci', numa_node=1, iommu_group=151)
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}
    assert _keeps_nothing_seen(driver)


def test_xilinx_refused_programming_keeps_the_record_not_ids_seen(
        conf, scenario, in_process_privsep, fake_tools):
    """A refusal before the tool ran leaves the card's record as it was
    (the card on xocl still shows its xclbin); passed through afterwards,
    the card reads as unknown all the same: programming keeps nothing
    seen on it."""
    tree = scenario('mixed')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.remember('0000:d8:00.0', 'img-1')
    tool_dirs = conf.cyborg_sys_admin.fpga_tool_dirs
    conf.set_override('fpga_tool_dirs', [str(fake_tools.parent / 'none')],
                      group='cyborg_sys_admin')
    with pytest.raises(exception.NotFound):
        driver.program('0000:d8:00.0', _image(conf), 'img-2')
    assert _reported(driver) == {'h_0000:d8:00.0': 'img-1'}
    _pass_through_user(tree)
    assert _reported(driver) == {'h_0000:d8:00.0': None}
    conf.set_override('fpga_tool_dirs', tool_dirs, group='cyborg_sys_admin')
    tree.set_driver('0000:d8:00.1', 'xocl')
    _xbutil_loads(fake_tools, tree, XCLBIN_2)
    driver.program('0000:d8:00.0', _image(conf), 'img-2')
    assert _reported(driver) == {'h_0000:d8:00.0': 'img-2'}
    _pass_through_user(tree)
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}
    assert _keeps_nothing_seen(driver)


def _swap_card(tree, mgmt_device, user_device, serial):
    for address in ('0000:d8:00.0', '0000:d8:00.1'):
        tree.remove_pci(address)
    tree.add_pci('0000:d8:00.0', '10ee', mgmt_device, '120000',
                 driver='xclmgmt', numa_node=1, iommu_group=150)
    tree.add_pci('0000:d8:00.1', '10ee', user_device, '120000',
                 driver='xocl', numa_node=1, iommu_group=151)
    tree.set_xrt_serial('0000:d8:00.0', serial)


def test_xilinx_image_is_unknown_for_another_card_in_the_slot(
        conf, scenario):
    """Another card (a U280 for the U250, or one of the same model: its
    serial number differs) in the slot, showing the same xclbin uuid."""
    tree = scenario('mixed')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.remember('0000:d8:00.0', 'img-1')
    _swap_card(tree, '5004', '5005', '21290594399X')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}

    driver.remember('0000:d8:00.0', 'img-2')
    _swap_card(tree, '500c', '500d', '21290594399X')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    assert _reported(_load(conf, 'xilinx_fpga_driver')) == {
        'h_0000:d8:00.0': None}


def test_a_card_gone_has_its_record_forgotten(conf, scenario):
    """The card left (removed, or gone from the bus for a while): a card
    found at its address later proves nothing of the image recorded."""
    tree = scenario('mixed')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    driver = _load(conf, 'xilinx_fpga_driver')
    driver.remember('0000:d8:00.0', 'img-1')
    for address in ('0000:d8:00.0', '0000:d8:00.1'):
        tree.remove_pci(address)
    assert _reported(driver) == {}
    assert _recorded(driver) == {}


# -- Inspur -------------------------------------------------------------------


def test_inspur_image_is_unknown_when_nothing_shows_it(conf, scenario):
    """On vfio-pci an Inspur card shows no function id: the record made
    at programming matched for ever ([''])."""
    scenario('mixed')
    driver = _load(conf, 'inspur_fpga_driver')
    driver.remember('0000:da:00.0', 'img-1')
    assert _reported(driver) == {'h_0000:da:00.0': None}
    assert _recorded(driver) == {}


def test_inspur_image_holds_while_its_afu_is_shown(conf, scenario):
    tree = scenario('mixed')
    tree.set_driver('0000:da:00.0', 'dfl-pci')
    tree.add_fpga_region('0000:da:00.0', 'region0',
                         afu_id='c000c9660d824272a0a1d7f1b1b3fae4')
    driver = _load(conf, 'inspur_fpga_driver')
    driver.remember('0000:da:00.0', 'img-1')
    assert _reported(_load(conf, 'inspur_fpga_driver')) == {
        'h_0000:da:00.0': 'img-1'}
    # Another Inspur card in the slot, running the same AFU.
    tree.remove_pci('0000:da:00.0')
    tree.add_pci('0000:da:00.0', '1bd4', '0099', '120000', driver='dfl-pci',
                 numa_node=1, iommu_group=160)
    tree.add_fpga_region('0000:da:00.0', 'region0',
                         afu_id='c000c9660d824272a0a1d7f1b1b3fae4')
    assert _reported(_load(conf, 'inspur_fpga_driver')) == {
        'h_0000:da:00.0': None}


# -- Intel --------------------------------------------------------------------


def test_intel_image_is_unknown_once_its_afu_is_gone(conf, scenario):
    """The port shows no AFU any more (the region was reset)."""
    tree = scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    driver.remember('0000:d8:00.0', 'img-1')
    assert _reported(driver)['h_0000:d8:00.0'] == 'img-1'
    os.unlink(os.path.join(tree.device_path('0000:d8:00.0'), 'fpga_region',
                           'region3', 'dfl-port.0', 'afu_id'))
    assert _reported(driver)['h_0000:d8:00.0'] is None
    assert _recorded(driver) == {}


# -- the record itself ------------------------------------------------------


def test_forgetting_a_stale_record_keeps_a_newer_one(conf, tmp_path):
    """Discovery compared a card with the record it read; the card was
    programmed and recorded again meanwhile: the new record stays."""
    conf.set_override('state_path', str(tmp_path))
    record = fpga.BitstreamRecord(conf, 'xilinx_fpga_driver', 'h')
    record.save('0000:d8:00.0', 'img-1', ['xclbin=1'])
    stale = record.load()
    record.save('0000:d8:00.0', 'img-2', ['xclbin=2'])
    record.save('0000:d9:00.0', 'img-3', ['xclbin=3'])
    record.forget_stale(stale)
    assert {a: e['image_uuid'] for a, e in record.load().items()} == {
        '0000:d8:00.0': 'img-2', '0000:d9:00.0': 'img-3'}
    record.forget_stale({'0000:d9:00.0': record.load()['0000:d9:00.0']})
    assert list(record.load()) == ['0000:d8:00.0']


# -- records written by the agent of 2027.1 -------------------------------


def _write_2027_1_records(driver, fingerprints):
    """Records as the agent of 2027.1 wrote them: ``{controlpath id:
    fingerprint}``, the fingerprint the sorted function ids of the card's
    deployables ('' for one showing none)."""
    os.makedirs(os.path.dirname(driver._record().path), exist_ok=True)
    with open(driver._record().path, 'w') as f:
        json.dump({address: {'image_uuid': 'img-1', 'fingerprint': marks}
                   for address, marks in fingerprints.items()}, f)


INTEL_AFU = '9aeffe5f84570612c72e0935b4c4d7a0'


def test_intel_record_of_2027_1_holds_while_its_afu_is_shown(
        conf, scenario):
    """The agent upgraded from 2027.1 forgot every record at its first
    discovery (its fingerprint never equals the new one): the card
    programmed read as running no known image, so binds on a card
    another instance holds a VF of were refused, and idle ones
    programmed again for nothing.  The ids recorded, shown still, prove
    the image: the record is kept, written again with the card's
    fingerprint."""
    tree = scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    _write_2027_1_records(driver, {'0000:d8:00.0': [INTEL_AFU]})
    assert _reported(driver)['h_0000:d8:00.0'] == 'img-1'
    with open(driver._record().path) as f:
        assert json.load(f)['0000:d8:00.0']['fingerprint'] == [
            'function=' + INTEL_AFU, 'pci=0000:d8:00.0=8086:09c4:8086:09c4']
    # Held as any record since: an agent restarted reports it, and
    # forgets it once the AFU is gone.
    assert _reported(_load(conf, 'intel_fpga_driver'))[
        'h_0000:d8:00.0'] == 'img-1'
    os.unlink(os.path.join(tree.device_path('0000:d8:00.0'), 'fpga_region',
                           'region3', 'dfl-port.0', 'afu_id'))
    assert _reported(driver)['h_0000:d8:00.0'] is None
    assert _recorded(driver) == {}


@pytest.mark.parametrize('fingerprint', [
    ['c000c9660d824272a0a1d7f1b1b3fae4'],   # another function
    [''],                                   # none shown when recorded
    ['', ''],
    [INTEL_AFU + ',c000c9660d824272a0a1d7f1b1b3fae4'],   # one more
])
def test_intel_record_of_2027_1_not_shown_is_forgotten(
        conf, scenario, fingerprint):
    scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    _write_2027_1_records(driver, {'0000:d8:00.0': fingerprint})
    assert _reported(driver)['h_0000:d8:00.0'] is None
    assert _recorded(driver) == {}


def test_xilinx_and_inspur_records_of_2027_1_are_forgotten(conf, scenario):
    """Their deployables showed no function id: the 2027.1 record (['']),
    which matched whatever the card ran, proves nothing, though the card
    shows a function now."""
    tree = scenario('mixed')
    tree.set_xclbin('0000:d8:00.1', XCLBIN_1)
    tree.set_driver('0000:da:00.0', 'dfl-pci')
    tree.add_fpga_region('0000:da:00.0', 'region0',
                         afu_id='c000c9660d824272a0a1d7f1b1b3fae4')
    for name, address in (('xilinx_fpga_driver', '0000:d8:00.0'),
                          ('inspur_fpga_driver', '0000:da:00.0')):
        driver = _load(conf, name)
        _write_2027_1_records(driver, {address: ['']})
        assert _reported(driver) == {'h_' + address: None}
        assert _recorded(driver) == {}


def test_a_record_of_2027_1_replaced_meanwhile_is_kept(conf, tmp_path):
    """Discovery converted a 2027.1 record it read; the card was
    recorded again meanwhile: the new record stays."""
    conf.set_override('state_path', str(tmp_path))
    record = fpga.BitstreamRecord(conf, 'intel_fpga_driver', 'h')
    record.save('0000:d8:00.0', 'img-1', [INTEL_AFU])
    old = record.load()['0000:d8:00.0']
    record.save('0000:d8:00.0', 'img-2', ['function=2', 'pci=x'])
    record.replace_stale({'0000:d8:00.0': (
        old, dict(old, fingerprint=['function=1']))})
    assert record.load()['0000:d8:00.0']['image_uuid'] == 'img-2'
    record.save('0000:d8:00.0', 'img-1', [INTEL_AFU])
    record.replace_stale({'0000:d8:00.0': (
        old, dict(old, fingerprint=['function=1']))})
    assert record.load()['0000:d8:00.0']['fingerprint'] == ['function=1']


def test_intel_record_of_2027_1_holds_while_an_instance_holds_a_vf(
        conf, tmp_path):
    """The card the review found refusing binds: an instance holds one of
    its VFs (vfio-pci: no AFU shown there), the other shows the AFU
    recorded.  Its image is what a record of this release proves it by
    (the ids shown), and no instance on a VF can reprogram the card."""
    root = tmp_path / 'sys'
    tree = fake_sysfs.FakeSysfs(root)
    fake_sysfs.apply_options(conf, fake_sysfs.INTEL_FPGA_OPTIONS, root,
                             tmp_path / 'state')
    tree.add_pci('0000:5e:00.0', '8086', '0b30', '120000', driver='dfl-pci',
                 numa_node=0, iommu_group=70, sriov_totalvfs=2)
    tree.add_fpga_region('0000:5e:00.0', 'region0',
                         compat_id='ce489bd3b9a54a099b8ba7ba9ab1fb8a')
    tree.add_vfs('0000:5e:00.0', ['0000:5e:00.1', '0000:5e:00.2'],
                 device='0b31', driver='dfl-pci', iommu_base=71)
    tree.add_fpga_region('0000:5e:00.2', 'region2', afu_id=INTEL_AFU)
    tree.set_driver('0000:5e:00.1', 'vfio-pci')
    driver = _load(conf, 'intel_fpga_driver')
    # Recorded with both VFs on dfl-pci.
    _write_2027_1_records(driver, {'0000:5e:00.0': [INTEL_AFU, INTEL_AFU]})
    assert _reported(driver) == {'h_0000:5e:00.1': 'img-1',
                                 'h_0000:5e:00.2': 'img-1'}
    with open(driver._record().path) as f:
        assert json.load(f)['0000:5e:00.0']['fingerprint'] == [
            'function=' + INTEL_AFU,
            'pci=0000:5e:00.0=8086:0b30:8086:0b30']
