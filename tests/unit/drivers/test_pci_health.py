"""Health sources in sysfs: AER, vanished and unbound functions, FPGA
error registers (DFL, XRT), and the fake driver's injected faults."""

import json

import pytest

from cyborg.common import metrics, states
from cyborg.drivers import base, fake, loader, pci_health
from tests.fixtures import sysfs as fake_sysfs

N3000 = '0000:5e:00.0'


def _driver(conf, name):
    return loader.load_driver(conf, 'h', name)


def _check(driver):
    """``{device key: [(severity, code, deployable)]}`` of one check."""
    found = {}
    for r in driver.check_health(driver.discover()):
        found.setdefault(r.device, []).append((r.severity, r.code,
                                               r.deployable))
    return found


def _check_devices(driver, devices):
    return {r.device: r for r in driver.check_health(devices)}


@pytest.mark.parametrize('name, host', [
    ('nvidia_gpu_driver', 'mixed'), ('amd_gpu_driver', 'amd_gpu'),
    ('intel_fpga_driver', 'mixed'), ('xilinx_fpga_driver', 'mixed'),
    ('inspur_fpga_driver', 'mixed'), ('intel_qat_driver', 'mixed'),
    ('intel_nic_driver', 'mixed'), ('inspur_nvme_ssd_driver', 'mixed'),
    ('huawei_ascend_driver', 'mixed'), ('pci_driver', 'mixed'),
    ('fake_driver', 'mixed')])
def test_every_driver_reports_health(conf, scenario, name, host):
    scenario(host)
    conf.set_override('passthrough_whitelist', ['{"vendor_id": "15b3"}'],
                      'agent')
    driver = _driver(conf, name)
    assert isinstance(driver, base.HealthReporting)
    devices = driver.discover()
    assert devices
    readings = driver.check_health(devices)
    assert {r.device for r in readings} == {d.key() for d in devices}
    assert {r.severity for r in readings} == {states.OK}


def test_aer_counters_baseline_then_increase(conf, scenario):
    tree = scenario('qat')
    address = '0000:3d:00.0'
    key = 'PCI:' + address
    tree.set_aer(address, fatal={'Surprise Down Error': 2},
                 nonfatal={'Completion Timeout': 5},
                 correctable={'Receiver Error': 100})
    driver = _driver(conf, 'intel_qat_driver')
    devices = driver.discover()
    # Errors from before the agent started are a baseline, not events.
    first = _check_devices(driver, devices)[key]
    assert first.severity == states.OK
    assert first.counters == {'aer_fatal': 2, 'aer_nonfatal': 5,
                              'aer_correctable': 100}
    assert metrics.REGISTRY.get_sample_value(
        'cyborg_agent_aer_errors', {'device': key, 'kind': 'aer_fatal'}) == 2

    tree.set_aer(address, nonfatal={'Completion Timeout': 6})
    [r] = driver.check_health(devices)
    assert (r.severity, r.code, r.source) == (states.TRANSIENT,
                                              'aer:nonfatal', 'aer')
    assert 'Completion Timeout +1' in r.reason
    assert r.counters['aer_nonfatal'] == 6
    # An event is reported once.
    assert _check_devices(driver, devices)[key].severity == states.OK

    tree.set_aer(address, fatal={'Surprise Down Error': 2,
                                 'Malformed TLP': 1})
    [r] = driver.check_health(devices)
    assert (r.severity, r.code) == (states.FATAL, 'aer:fatal')
    assert 'Malformed TLP +1' in r.reason


def test_correctable_errors_count_only_in_bursts(conf, scenario):
    tree = scenario('amd_gpu')
    address = '0000:c3:00.0'
    conf.set_override('aer_correctable_burst', 10, 'agent')
    tree.set_aer(address, correctable={'Bad TLP': 0})
    driver = _driver(conf, 'amd_gpu_driver')
    devices = [d for d in driver.discover() if
               d.controlpath_id.cpid_info == address]
    driver.check_health(devices)
    tree.set_aer(address, correctable={'Bad TLP': 10})
    [r] = driver.check_health(devices)
    assert r.severity == states.OK
    assert r.counters['aer_correctable'] == 10
    tree.set_aer(address, correctable={'Bad TLP': 21})
    [r] = driver.check_health(devices)
    assert (r.severity, r.code) == (states.TRANSIENT, 'aer:correctable')
    # A counter that goes down (reset) is a new baseline.
    tree.set_aer(address, correctable={'Bad TLP': 0})
    assert driver.check_health(devices)[0].severity == states.OK


def test_vanished_function_is_gone(conf, scenario):
    tree = scenario('ascend')
    driver = _driver(conf, 'huawei_ascend_driver')
    devices = driver.discover()
    tree.remove_pci('0000:81:00.0')
    found = _check_devices(driver, devices)
    gone = found['PCI:0000:81:00.0']
    assert (gone.severity, gone.code) == (states.GONE, 'pci:gone')
    assert found['PCI:0000:01:00.0'].severity == states.OK


def test_unbound_driver_is_gone_after_a_grace_check(conf, scenario):
    tree = scenario('nic')
    driver = _driver(conf, 'intel_nic_driver')
    devices = driver.discover()
    key = 'PCI:0000:b1:00.0'
    assert _check_devices(driver, devices)[key].severity == states.OK
    tree.set_driver('0000:b1:00.0', None)
    # One check without a driver may be a rebind in progress.
    assert _check_devices(driver, devices)[key].severity == states.OK
    r = _check_devices(driver, devices)[key]
    assert (r.severity, r.code) == (states.GONE, 'pci:unbound')
    assert 'unbound' in r.reason
    tree.set_driver('0000:b1:00.0', 'ice')
    assert _check_devices(driver, devices)[key].severity == states.OK


def _vf_host(conf, tmp_path, driver=None):
    """A ConnectX PF whose two VFs the generic PCI driver offers, the VFs
    bound to ``driver`` (None: never bound, as with
    sriov_drivers_autoprobe off)."""
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci('0000:e3:00.0', '15b3', '101d', '020000',
                 driver='mlx5_core', iommu_group=180, sriov_totalvfs=8)
    tree.add_vfs('0000:e3:00.0', ['0000:e3:00.2', '0000:e3:00.3'],
                 device='101e', driver=driver, iommu_base=181)
    conf.set_override('sysfs_root', str(tmp_path / 'sys'), 'agent')
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('passthrough_whitelist',
                      ['{"vendor_id": "15b3", "product_id": "101e"}'],
                      'agent')
    driver = _driver(conf, 'pci_driver')
    devices = driver.discover()
    assert sorted(d.key() for d in devices) == [
        'PCI:0000:e3:00.2', 'PCI:0000:e3:00.3']
    return tree, driver, devices


def test_a_function_never_bound_is_not_unbound(conf, tmp_path):
    """VFs nobody bound (autoprobe off; vfio-pci bound only while an
    instance has one) are as their host wants them, not gone."""
    tree, driver, devices = _vf_host(conf, tmp_path)
    for _ in range(3):
        found = _check_devices(driver, devices)
        assert {k: r.severity for k, r in found.items()} == {
            'PCI:0000:e3:00.2': states.OK, 'PCI:0000:e3:00.3': states.OK}
    # An instance gets one through vfio-pci, and gives it back.
    tree.set_driver('0000:e3:00.2', 'vfio-pci')
    assert _check_devices(driver, devices)[
        'PCI:0000:e3:00.2'].severity == states.OK
    tree.set_driver('0000:e3:00.2', None)
    for _ in range(3):
        assert _check_devices(driver, devices)[
            'PCI:0000:e3:00.2'].severity == states.OK


def test_a_function_seen_bound_then_unbound_is_gone(conf, tmp_path):
    tree, driver, devices = _vf_host(conf, tmp_path)
    key = 'PCI:0000:e3:00.3'
    _check_devices(driver, devices)
    # Its host driver takes it (seen at a check), then lets it go.
    tree.set_driver('0000:e3:00.3', 'mlx5_core')
    assert _check_devices(driver, devices)[key].severity == states.OK
    tree.set_driver('0000:e3:00.3', None)
    assert _check_devices(driver, devices)[key].severity == states.OK
    r = _check_devices(driver, devices)[key]
    assert (r.severity, r.code) == (states.GONE, 'pci:unbound')
    assert _check_devices(driver, devices)[
        'PCI:0000:e3:00.2'].severity == states.OK
    # A VF made again at its address, never bound, is watched afresh.
    tree.disable_vfs('0000:e3:00.0')
    assert _check_devices(driver, devices)[key].code == 'pci:gone'
    tree.add_vfs('0000:e3:00.0', ['0000:e3:00.2', '0000:e3:00.3'],
                 device='101e')
    for _ in range(2):
        assert _check_devices(driver, devices)[key].severity == states.OK


def test_parse_aer_reads_names_with_spaces():
    text = ('Receiver Error 2\nBad TLP 0\nRELAY_NUM Rollover 1\n'
            'TOTAL_ERR_COR 3\n')
    assert pci_health.parse_aer(text) == {
        'Receiver Error': 2, 'Bad TLP': 0, 'RELAY_NUM Rollover': 1,
        'TOTAL_ERR_COR': 3}


# -- FPGA error registers -------------------------------------------------

def test_dfl_fme_errors_fatal_then_cleared(conf, scenario):
    tree = scenario('intel_fpga')
    driver = _driver(conf, 'intel_fpga_driver')
    key = 'PCI:' + N3000
    tree.set_fpga_errors(N3000, 'region0', 'dfl-fme.0')
    assert _check(driver)[key] == [(states.OK, None, None)]
    tree.set_fpga_errors(N3000, 'region0', 'dfl-fme.0',
                         catfatal_errors=0x800)
    assert _check(driver)[key] == [(states.FATAL,
                                    'fpga:fme_catfatal_errors', None)]
    # A register holds its bits: a condition, reported until cleared.
    assert _check(driver)[key][0][0] == states.FATAL
    tree.set_fpga_errors(N3000, 'region0', 'dfl-fme.0', catfatal_errors=0,
                         nonfatal_errors=0x2)
    assert _check(driver)[key] == [(states.TRANSIENT,
                                    'fpga:fme_nonfatal_errors', None)]
    tree.set_fpga_errors(N3000, 'region0', 'dfl-fme.0', nonfatal_errors=0)
    assert _check(driver)[key] == [(states.OK, None, None)]


def test_dfl_port_errors_name_the_vf_deployable(conf, scenario):
    tree = scenario('intel_fpga')
    # A second VF, so the card has one deployable per VF.
    tree.add_vfs(N3000, ['0000:5e:00.1', '0000:5e:00.2'], device='0b31',
                 driver='vfio-pci')
    tree.add_fpga_region('0000:5e:00.1', 'region2', afu_id='00' * 16)
    tree.set_fpga_errors('0000:5e:00.1', 'region2', 'dfl-port.0',
                         errors=0x1)
    driver = _driver(conf, 'intel_fpga_driver')
    # The port's fault is its VF deployable's; the card itself reads well
    # (said, so that a fault of the card's that cleared is seen to).
    assert _check(driver)['PCI:' + N3000] == [
        (states.TRANSIENT, 'fpga:port_errors', 'h_0000:5e:00.1'),
        (states.OK, None, None)]
    # Its re-probe: the card's verdict first, then the partition's fault
    # (so that the card's good verdict does not re-admit the partition).
    device, = [d for d in driver.discover() if d.key() == 'PCI:' + N3000]
    verdicts = driver.probe(device)
    assert [(v.severity, v.deployable, v.source) for v in verdicts] == [
        (states.OK, None, 'probe'),
        (states.TRANSIENT, 'h_0000:5e:00.1', 'probe')]


def test_dfl_port_errors_of_a_card_with_one_vf_are_read(conf, scenario):
    """A card with one port has one VF (sriov_totalvfs=1), its only
    deployable once enabled: that VF's port errors are read too."""
    tree = scenario('intel_fpga')
    tree.set_fpga_errors('0000:5e:00.1', 'region2', 'dfl-port.0',
                         errors=0x4)
    driver = _driver(conf, 'intel_fpga_driver')
    [device] = [d for d in driver.discover() if d.key() == 'PCI:' + N3000]
    assert [d.name for d in device.deployables] == ['h_0000:5e:00.1']
    assert _check(driver)['PCI:' + N3000] == [
        (states.TRANSIENT, 'fpga:port_errors', 'h_0000:5e:00.1'),
        (states.OK, None, None)]
    tree.set_fpga_errors('0000:5e:00.1', 'region2', 'dfl-port.0',
                         errors=0)
    assert _check(driver)['PCI:' + N3000] == [(states.OK, None, None)]


def test_xilinx_firewall_and_memory_ecc(conf, scenario):
    tree = scenario('mixed')
    mgmt = '0000:d8:00.0'
    key = 'PCI:' + mgmt
    tree.set_xrt(mgmt, ecc={'mig.m.0': (0, 3)})
    driver = _driver(conf, 'xilinx_fpga_driver')
    assert _check(driver)[key] == [(states.OK, None, None)]
    tree.set_xrt(mgmt, firewall_status=0x40000, ecc={'mig.m.0': (1, 3)})
    found = _check(driver)[key]
    assert sorted(found) == [(states.FATAL, 'fpga:ecc_ue', None),
                             (states.FATAL, 'fpga:firewall', None)]
    tree.set_xrt(mgmt, ecc={'mig.m.0': (1, 3)})
    assert _check(driver)[key] == [(states.OK, None, None)]


# -- the fake driver ---------------------------------------------------------

def _fake(conf, tmp_path):
    conf.set_override('state_path', str(tmp_path))
    driver = _driver(conf, 'fake_driver')
    return driver, driver.discover()


def _inject(conf, **values):
    with open(fake.health_file(conf), 'w') as f:
        json.dump(values, f)


def test_fake_driver_reports_injected_fault_until_healed(conf, tmp_path):
    driver, devices = _fake(conf, tmp_path)
    [r] = driver.check_health(devices)
    assert (r.device, r.severity) == ('PCI:0000:0c:00.0', states.OK)
    assert driver.probe(devices[0]).severity == states.OK

    _inject(conf, severity='fatal', reason='injected', code='xid:79')
    for _ in range(2):      # held as long as the file says so
        [r] = driver.check_health(devices)
        assert (r.severity, r.reason, r.code, r.source) == (
            states.FATAL, 'injected', 'xid:79', 'fake')
    probe = driver.probe(devices[0])
    assert (probe.severity, probe.source) == (states.FATAL, 'probe')

    _inject(conf, severity='fatal', probe='ok')
    assert driver.probe(devices[0]).severity == states.OK
    _inject(conf, severity='application', deployable='h_FakeDevice')
    [r] = driver.check_health(devices)
    assert (r.severity, r.deployable) == (states.APPLICATION, 'h_FakeDevice')
    assert driver.probe(devices[0]).severity == states.OK

    fake.os.unlink(fake.health_file(conf))
    assert driver.check_health(devices)[0].severity == states.OK


def test_fake_driver_ignores_a_bad_file(conf, tmp_path):
    driver, devices = _fake(conf, tmp_path)
    _inject(conf, severity='transient')
    assert driver.check_health(devices)[0].severity == states.TRANSIENT
    _inject(conf, severity='broken', padding='to change the size')
    assert driver.check_health(devices)[0].severity == states.TRANSIENT
    with open(fake.health_file(conf), 'w') as f:
        f.write('{"severity": "ok"')
    assert driver.check_health(devices)[0].severity == states.TRANSIENT


# -- across an agent's restart --------------------------------------------

QAT = '0000:3d:00.0'


@pytest.fixture
def state_dir(conf, tmp_path, monkeypatch):
    """The agent's state directory, and this boot's id (a file the test
    may change: a reboot)."""
    boot = tmp_path / 'boot_id'
    boot.write_text('boot-1\n')
    monkeypatch.setattr(pci_health, 'BOOT_ID_FILE', str(boot))
    state = tmp_path / 'state'
    state.mkdir()
    conf.set_override('state_path', str(state))
    return state


def test_errors_counted_while_the_agent_was_down_are_reported(
        conf, scenario, state_dir):
    """The first value a check read was a baseline: a fatal AER error, or
    an uncorrectable one a driver counts, that came while the agent was
    down was taken for one from before, and never reported.  A
    restarted agent compares with what the last one saw; correctable
    errors that piled up meanwhile are no burst."""
    tree = scenario('qat')
    conf.set_override('state_path', str(state_dir))
    tree.set_aer(QAT, fatal={'Surprise Down Error': 1},
                 nonfatal={}, correctable={'Receiver Error': 3})
    tree.set_qat(QAT, fatal=2, nonfatal=0, correctable=0)
    driver = _driver(conf, 'intel_qat_driver')
    devices = driver.discover()
    for _ in range(2):
        assert _check(driver)['PCI:' + QAT] == [(states.OK, None, None)]
    # The agent stops; meanwhile...
    tree.set_aer(QAT, fatal={'Surprise Down Error': 1, 'Malformed TLP': 1},
                 correctable={'Receiver Error': 300})
    tree.set_qat(QAT, fatal=3, nonfatal=0, correctable=500)
    restarted = _driver(conf, 'intel_qat_driver')
    found = {r.code: r for r in restarted.check_health(devices)}
    assert sorted(found) == ['aer:fatal', 'qat:errors_fatal']
    assert 'Malformed TLP +1' in found['aer:fatal'].reason
    assert found['qat:errors_fatal'].reason == '1 new fatal errors'
    assert _check(restarted)['PCI:' + QAT] == [(states.OK, None, None)]
    # Another restart, nothing new: nothing reported.
    again = _driver(conf, 'intel_qat_driver')
    assert _check(again)['PCI:' + QAT] == [(states.OK, None, None)]


def test_a_function_unbound_while_the_agent_was_down_is_gone(
        conf, tmp_path, state_dir):
    """Only a function the agent saw bound can be unbound: one whose
    driver let it go while the agent was down read well for good after
    its restart (never seen bound), and was re-admitted with no
    driver."""
    tree, driver, devices = _vf_host(conf, tmp_path, driver='mlx5_core')
    conf.set_override('state_path', str(state_dir))
    key = 'PCI:0000:e3:00.3'
    assert _check_devices(driver, devices)[key].severity == states.OK
    tree.set_driver('0000:e3:00.3', None)
    restarted = _driver(conf, 'pci_driver')
    assert _check_devices(restarted, devices)[key].severity == states.OK
    r = _check_devices(restarted, devices)[key]
    assert (r.severity, r.code) == (states.GONE, 'pci:unbound')
    assert _check_devices(restarted, devices)[
        'PCI:0000:e3:00.2'].severity == states.OK


def test_a_record_of_another_boot_host_or_unreadable_is_none(
        conf, tmp_path, state_dir, caplog):
    """After a reboot the kernel counts from zero and drivers bind
    afresh (perhaps after the agent starts): the last boot's record is
    not this one's.  Another host's record, or a damaged one, is no
    record either: the checks start from fresh baselines, as before
    records were kept, and the record is written again."""
    tree, driver, devices = _vf_host(conf, tmp_path, driver='mlx5_core')
    conf.set_override('state_path', str(state_dir))
    key = 'PCI:0000:e3:00.3'
    record = state_dir / 'health-pci_driver-h.json'
    _check_devices(driver, devices)
    saved = record.read_text()
    assert json.loads(saved)['bound'] == ['0000:e3:00.2', '0000:e3:00.3']
    tree.set_driver('0000:e3:00.3', None)

    def never_unbound():
        restarted = _driver(conf, 'pci_driver')
        for _ in range(3):
            assert _check_devices(restarted, devices)[key].code is None
        return restarted

    (tmp_path / 'boot_id').write_text('boot-2\n')
    never_unbound()
    (tmp_path / 'boot_id').write_text('boot-1\n')
    for damaged in ('{"host": "h", "bound": ', '[]',
                    saved.replace('"h"', '"other"'),
                    saved.replace('"0000:e3:00.3"', '7')):
        record.write_text(damaged)
        never_unbound()
    assert any('Ignoring unreadable health record' in r.getMessage()
               for r in caplog.records)
    record.unlink()
    never_unbound()
    assert json.loads(record.read_text())['bound'] == ['0000:e3:00.2']


def test_a_record_that_cannot_be_written_is_said_once(
        conf, tmp_path, caplog):
    """The checks go on without a record (a state directory that cannot
    be made, here under a file; or read-only): said once, not at every
    check, and once more when it is written again."""
    caplog.set_level('INFO', logger='cyborg.drivers.pci_health')
    tree, driver, devices = _vf_host(conf, tmp_path, driver='mlx5_core')
    (tmp_path / 'file').write_text('')
    conf.set_override('state_path', str(tmp_path / 'file' / 'state'))
    for address in ('0000:e3:00.2', '0000:e3:00.3'):
        tree.set_driver(address, None)
        _check_devices(driver, devices)
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if 'Cannot write the health record' in r.getMessage()]
    assert len(said) == 1
    assert said[0][0] == 'WARNING'
    assert '(Not a directory)' in said[0][1]
    caplog.clear()
    (tmp_path / 'file').unlink()
    _check_devices(driver, devices)
    _check_devices(driver, devices)
    assert [(r.levelname, r.getMessage()) for r in caplog.records
            if 'ealth record' in r.getMessage()] == [
        ('INFO', f'Health record {tmp_path}/file/state/'
                 f'health-pci_driver-h.json written again.')]


def test_the_state_directory_of_a_fresh_host_is_made(conf, tmp_path,
                                                     caplog):
    """The health checks may write their record before the agent's first
    report has made the state directory (its cache): they make it, the
    first write is not lost."""
    tree, driver, devices = _vf_host(conf, tmp_path, driver='mlx5_core')
    conf.set_override('state_path', str(tmp_path / 'fresh' / 'state'))
    _check_devices(driver, devices)
    record = tmp_path / 'fresh' / 'state' / 'health-pci_driver-h.json'
    assert json.loads(record.read_text())['bound'] == [
        '0000:e3:00.2', '0000:e3:00.3']
    assert not [r for r in caplog.records
                if 'Cannot write the health record' in r.getMessage()]


def test_temporary_files_left_by_a_killed_agent_are_removed(
        conf, tmp_path, state_dir, caplog):
    """An agent killed in the middle of a write of its health record
    left the temporary file next to it, for ever: the checks of the next
    agent remove those of their record, and nothing else."""
    caplog.set_level('INFO', logger='cyborg.common.files')
    tree, driver, devices = _vf_host(conf, tmp_path, driver='mlx5_core')
    conf.set_override('state_path', str(state_dir))
    left = ['health-pci_driver-h.json.tmp-ab_1cd2e',
            'health-pci_driver-h.json.tmp.31337']
    kept = ['health-pci_driver-h.json.bak',
            'health-pci_driver-h.json.original',
            'health-nvidia_gpu_driver-h.json.tmp-ab_1cd2e',
            'agent-h.json.tmp-ab_1cd2e']
    for name in left + kept:
        (state_dir / name).write_text('{"host": ')
    _check_devices(driver, devices)
    assert sorted(p.name for p in state_dir.iterdir()) == sorted(
        kept + ['health-pci_driver-h.json'])
    [record] = [r for r in caplog.records
                if r.name == 'cyborg.common.files']
    assert ', '.join(sorted(left)) in record.getMessage()
