"""What the agent keeps per device it watches goes when the device leaves
the inventory the conductor acknowledged: the monitor's unsent readings
of it, and what its driver's checks compare (counter baselines, AER
counts, the functions seen bound...), in memory and in the driver's
health record on disk.

Before, a conductor outage with devices coming and going piled up to
``MAX_PENDING_PER_KEY`` unsent readings per device ever seen, all sent
once the conductor came back, which drops them (a device it deleted, or
keeps lost, which no reading moves); and the PCI checks kept each
device's state, which the health record carried across restarts, for
as long as the agent ran (on disk: for the whole boot).

Over oslo.messaging's fake:// transport, against the recording conductor
endpoint of ``test_health``; the hardware is the fake sysfs tree."""

import json
import os

from cyborg.common import states
from cyborg.drivers import loader
from tests.fixtures import sysfs as fake_sysfs
from tests.unit.agent import test_health as monitor_tests
from tests.unit.agent.test_health import (
    GPU_A, HOST, KEY_A, KEY_B, WatchedDriver, _agent, _fault)

# The fixtures of the monitor's own tests: its configuration, and the
# recording conductor endpoint over fake://.
conf = monitor_tests.conf
conductor = monitor_tests.conductor

KEPT, LEAVES = '0000:3d:00.0', '0000:3f:00.0'
LEAVING_VF = '0000:3f:01.0'


# -- the monitor's unsent readings --------------------------------------------

def test_unsent_readings_of_a_device_gone_are_not_kept(conf, conductor):
    """During an outage, A and B read new events; B leaves the inventory:
    its readings go, A's are sent, in order, with their numbers."""
    driver = WatchedDriver(conf, HOST)
    reporter, monitor = _agent(conf, driver)
    conductor.refuse = True
    for count in range(3):
        for key in (KEY_A, KEY_B):
            driver.faults[key] = _fault(key, severity=states.TRANSIENT,
                                        code=f'xid:{count}', event=True,
                                        xid=count)
        monitor.check_once()
        assert monitor.send_once() is False
    driver.addresses = (GPU_A,)
    reporter.report_now()
    monitor.check_once()
    conductor.refuse = False

    assert monitor.send_once() is True

    [report] = conductor.health_reports
    assert {r['device'] for r in report['readings']} == {KEY_A}
    numbered = [(r['code'], r['seq']) for r in report['readings']
                if 'seq' in r]
    assert [code for code, _seq in numbered] == ['xid:0', 'xid:1', 'xid:2']
    assert [seq for _code, seq in numbered] == sorted(
        seq for _code, seq in numbered)


def test_devices_coming_and_going_in_an_outage_leave_no_readings(
        conf, conductor):
    """A device at a new address at each check, each with a condition
    that changes: only the devices known at the end have readings
    waiting."""
    driver = WatchedDriver(conf, HOST, addresses=(GPU_A,))
    reporter, monitor = _agent(conf, driver)
    conductor.refuse = True
    for bus in range(0x10, 0x30):
        address = f'0000:{bus:02x}:00.0'
        driver.addresses = (GPU_A, address)
        reporter.report_now()
        for code in ('xid:13', 'xid:31'):
            driver.faults['PCI:' + address] = _fault(
                'PCI:' + address, severity=states.TRANSIENT, code=code)
            monitor.check_once()
    conductor.refuse = False

    assert monitor.send_once() is True

    [report] = conductor.health_reports
    assert {r['device'] for r in report['readings']} == {KEY_A,
                                                         'PCI:' + address}
    assert [r['code'] for r in report['readings']
            if r['device'] == 'PCI:' + address] == ['xid:13', 'xid:31']


# -- what the PCI checks compare ----------------------------------------------

def _qat_host(conf, tmp_path):
    """The fake QAT host with both PFs offered (VFs on each), errors
    counted on both."""
    root = tmp_path / 'sys'
    tree, options = fake_sysfs.build('qat', root)
    fake_sysfs.apply_options(conf, options, root, tmp_path / 'state')
    tree.add_vfs(LEAVES, [LEAVING_VF], device='37c9', driver='vfio-pci',
                 iommu_base=96)
    for address in (KEPT, LEAVES):
        tree.set_aer(address, fatal={'Surprise Down Error': 1},
                     nonfatal={'Completion Timeout': 2},
                     correctable={'Receiver Error': 3})
        tree.set_qat(address, fatal=1, nonfatal=0, correctable=0)
        tree.set_qat_heartbeat(address, failed=0)
    return tree


def _qat_driver(conf):
    return loader.load_driver(conf, HOST, 'intel_qat_driver')


def _record(conf):
    """The addresses the QAT driver's health record names, per part."""
    path = os.path.join(conf.state_path,
                        f'health-intel_qat_driver-{HOST}.json')
    with open(path) as f:
        record = json.load(f)
    return {'bound': set(record['bound']),
            'counters': {key[0][4:] for key, _value in record['counters']},
            'aer': {key[4:] for key, *_rest in record['aer']}}


def _kept_state(driver):
    """The addresses the driver's checks keep something of, per part."""
    state = driver._pci_health_state()
    counters = state['counters'].values()
    return {'bound': set(state['bound']),
            'counters': {key[0][4:] for key in counters},
            'aer': {key[4:] for key, _kind in state['aer']},
            'paths': set(state['paths']),
            'sparing': {value[2][4:] for value in state['sparing'].values()},
            'failing': set(state['failing'])}


def _leave(tree):
    """The second QAT card pulled: gone from sysfs, so from the next
    report's inventory, before any check saw it gone."""
    tree.remove_pci(LEAVING_VF)
    tree.remove_pci(LEAVES)


def test_what_the_checks_keep_of_a_device_gone_goes(conf, conductor,
                                                    tmp_path):
    tree = _qat_host(conf, tmp_path)
    driver = _qat_driver(conf)
    reporter, monitor = _agent(conf, driver)
    monitor.check_once()
    both = {KEPT, LEAVES}
    assert _record(conf) == {'bound': both, 'counters': both, 'aer': both}
    assert _kept_state(driver) == {
        'bound': both, 'counters': both, 'aer': both, 'paths': both,
        'sparing': both, 'failing': set()}
    _leave(tree)
    reporter.report_now()

    monitor.check_once()

    kept = {KEPT}
    assert _record(conf) == {'bound': kept, 'counters': kept, 'aer': kept}
    assert _kept_state(driver) == {
        'bound': kept, 'counters': kept, 'aer': kept, 'paths': kept,
        'sparing': kept, 'failing': set()}


def test_a_device_gone_while_the_agent_was_down_leaves_the_record(
        conf, conductor, tmp_path):
    """The record an agent left names a device that left while no agent
    ran: the restarted agent's first check writes it without."""
    tree = _qat_host(conf, tmp_path)
    _reporter, monitor = _agent(conf, _qat_driver(conf))
    monitor.check_once()
    _leave(tree)

    driver = _qat_driver(conf)
    _reporter, monitor = _agent(conf, driver)
    # Errors counted on the card that stayed while the agent was down
    # are still told: its values were kept.
    tree.set_qat(KEPT, fatal=2, nonfatal=0, correctable=0)
    [reading] = [r for r in monitor.check_once()
                 if r.source == 'qat']

    assert reading.code == 'qat:errors_fatal'
    kept = {KEPT}
    assert _record(conf) == {'bound': kept, 'counters': kept, 'aer': kept}


def test_a_probe_of_one_device_keeps_what_the_others_compare(
        conf, tmp_path):
    """With health watching off, a re-probe checks one device: the other
    devices' baselines stay, and errors counted on one between its
    probes are told at its next."""
    tree = _qat_host(conf, tmp_path)
    driver = _qat_driver(conf)
    devices = {d.controlpath_id.cpid_info: d for d in driver.discover()}
    for address in (LEAVES, KEPT):
        driver.probe(devices[address])
    tree.set_qat(LEAVES, fatal=2, nonfatal=0, correctable=0)
    driver.probe(devices[KEPT])

    verdict = driver.probe(devices[LEAVES])

    assert (verdict[0].severity, verdict[0].code) == (states.FATAL,
                                                      'qat:errors_fatal')
