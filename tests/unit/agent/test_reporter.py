"""The reporter against the real conductor (fake:// RPC, real Placement):
full first report, cheap unchanged reports, deltas, restart with the
cache, a conductor outage, need_full."""

import socket
import threading
import time

import pytest
from oslo_messaging import exceptions as messaging_exc

from cyborg.agent import hotplug
from cyborg.agent import reporter as agent_reporter
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.drivers import fake
from cyborg.drivers import loader
from tests.fixtures import sysfs as fake_sysfs
from tests.fixtures.disks import full_disk  # noqa: F401

HOST = fake_sysfs.HOST
QAT = 'compute-1_0000:3d:00.0'
FAKE = 'compute-1_FakeDevice'


@pytest.fixture
def host(conf, tmp_path):
    """The QAT host plus the fake device, with its agent's options."""
    root = tmp_path / 'sys'
    tree, options = fake_sysfs.build('qat', root)
    options['enabled_drivers'] = ['fake_driver', 'intel_qat_driver']
    fake_sysfs.apply_options(conf, options, root, tmp_path / 'state')
    return tree


def _reporter(conf, timeout=10):
    drivers = loader.load_drivers(conf, HOST)
    api = conductor_rpcapi.ConductorAPI(conf, timeout=timeout)
    return agent_reporter.Reporter(conf, HOST, drivers, conductor_api=api)


def test_first_report_is_full_then_unchanged_costs_nothing(conf, host,
                                                          conductor):
    reporter = _reporter(conf)
    reply = reporter.report_now()
    assert reply['need_full'] is False
    assert reporter.last_report['full'] is True
    assert conductor.deployables() == {FAKE: 16, QAT: 3}
    providers = conductor.providers()
    assert providers[FAKE] == 16 and providers[QAT] == 3

    reporter.report_now()
    assert reporter.last_report == {
        'digest': reply['digest'], 'base_digest': reply['digest'],
        'full': False, 'devices': [], 'removed': [],
        'resource_provider_name': socket.getfqdn()}


def test_a_change_is_sent_as_a_delta(conf, host, conductor):
    reporter = _reporter(conf)
    reporter.report_now()
    host.add_vfs('0000:3f:00.0', ['0000:3f:01.0', '0000:3f:01.1'],
                 device='37c9')
    reporter.report_now()
    sent = reporter.last_report
    assert sent['full'] is False and sent['removed'] == []
    assert [d['controlpath_id']['cpid_info'] for d in sent['devices']] == \
        ['0000:3f:00.0']
    assert conductor.deployables()['compute-1_0000:3f:00.0'] == 2
    host.disable_vfs('0000:3d:00.0')
    reporter.report_now()
    assert reporter.last_report['removed'] == ['PCI:0000:3d:00.0']
    assert QAT not in conductor.deployables()
    assert QAT not in conductor.providers()


def test_restart_with_the_cache_sends_no_inventory(conf, host, conductor):
    _reporter(conf).report_now()
    restarted = _reporter(conf)
    restarted.report_now()
    assert restarted.last_report['full'] is False
    assert restarted.last_report['devices'] == []


class RecallingFake(fake.FakeDriver):
    """The fake driver, keeping what the agent told it at start."""

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.recalled = []

    def recall(self, devices):
        self.recalled.append([d.key() for d in devices])


def test_drivers_recall_what_was_acknowledged_before_the_restart(
        conf, host, conductor):
    """Once, before the first discovery, each driver is given its own
    devices from the cache (NVIDIA remembers MIG GPUs with it)."""
    first = _reporter(conf)
    first.report_now()
    fakes = [d.key() for d in first.known_devices()
             if agent_reporter.driver_of(d) == 'fake_driver']
    assert fakes
    restarted = _reporter(conf)
    driver = restarted.drivers['fake_driver'] = RecallingFake(conf, HOST)
    restarted.report_now()
    restarted.report_now()
    assert driver.recalled == [fakes]


def test_a_change_during_an_outage_arrives_when_the_conductor_returns(
        conf, host, conductor):
    # The first (full) report syncs Placement and may take over a second
    # on a loaded machine: only the calls meant to time out get 1 s.
    _reporter(conf).report_now()
    conductor.stop()
    host.add_vfs('0000:3f:00.0', ['0000:3f:01.0'], device='37c9')
    reporter = _reporter(conf, timeout=1)
    with pytest.raises(messaging_exc.MessagingTimeout):
        reporter.report_now()
    # The agent restarts while the conductor is still away: its reporting
    # thread retries with back-off until the conductor is back.
    reporter = _reporter(conf, timeout=2)
    reporter.start()
    try:
        time.sleep(1.5)
        conductor.start()
        _wait_for(lambda: conductor.deployables().get(
            'compute-1_0000:3f:00.0') == 1)
    finally:
        reporter.stop()
    assert conductor.deployables() == {FAKE: 16, QAT: 3,
                                       'compute-1_0000:3f:00.0': 1}


def _wait_for(predicate, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f'condition not met within {timeout} s')


def test_conductor_that_lost_track_gets_a_full_report(conf, host, conductor,
                                                      tmp_path):
    stale = _reporter(conf)
    stale.report_now()
    stale_cache = (tmp_path / 'state' / (f'agent-{HOST}.json')).read_text()
    # Another agent life moves the conductor on...
    host.add_vfs('0000:3f:00.0', ['0000:3f:01.0'], device='37c9')
    _reporter(conf).report_now()
    # ...and this one comes back with an older cache (restored backup).
    (tmp_path / 'state' / (f'agent-{HOST}.json')).write_text(stale_cache)
    host.disable_vfs('0000:3f:00.0')
    reporter = _reporter(conf)
    reply = reporter.report_now()
    assert reply['need_full'] is False
    assert reporter.last_report['full'] is True
    assert set(conductor.deployables()) == {FAKE, QAT}


def test_a_cache_that_cannot_be_written_costs_full_reports_only(
        conf, host, conductor, full_disk):  # noqa: F811
    """An acknowledged report the agent cannot record (disk full,
    read-only) still is what the conductor knows: the health monitor
    watches its devices, and the next reports, based on the old record
    the conductor refuses, go in full until the record can be written."""
    reporter = _reporter(conf)
    reporter.report_now()
    # The record cannot be replaced: its temporary file is on a full
    # disk.
    full_disk.fill(f'agent-{HOST}.json.tmp-')
    host.add_vfs('0000:3f:00.0', ['0000:3f:01.0'], device='37c9')
    reply = reporter.report_now()
    assert reply['need_full'] is False
    assert 'PCI:0000:3f:00.0' in [d.key() for d in reporter.known_devices()]
    assert conductor.deployables()['compute-1_0000:3f:00.0'] == 1
    for _ in range(2):
        acknowledged = reporter.reports_acknowledged
        reply = reporter.report_now()
        assert reply['need_full'] is False
        assert reporter.last_report['full'] is True
        assert reporter.reports_acknowledged == acknowledged + 1
    full_disk.free()
    reporter.report_now()               # recorded at last
    reporter.report_now()
    assert reporter.last_report['full'] is False
    assert reporter.last_report['devices'] == []
    assert conductor.deployables() == {FAKE: 16, QAT: 3,
                                       'compute-1_0000:3f:00.0': 1}


def test_a_cache_path_taken_by_a_directory_is_no_cache(conf, host,
                                                       conductor, tmp_path):
    """A record that cannot even be read: every report is a full one,
    and every one is acknowledged."""
    (tmp_path / 'state' / f'agent-{HOST}.json').mkdir(parents=True)
    reporter = _reporter(conf)
    reporter.report_now()
    host.add_vfs('0000:3f:00.0', ['0000:3f:01.0'], device='37c9')
    reporter.report_now()
    assert reporter.last_report['full'] is True
    assert reporter.reports_acknowledged == 2
    assert 'PCI:0000:3f:00.0' in [d.key() for d in reporter.known_devices()]
    assert conductor.deployables()['compute-1_0000:3f:00.0'] == 1


def test_a_failing_driver_keeps_its_devices(conf, host, conductor):
    reporter = _reporter(conf)
    reporter.report_now()
    # The QAT tree becomes unreadable for the driver (not gone).
    broken = reporter.drivers['intel_qat_driver']
    broken.discover = lambda: 1 / 0
    reporter.report_now()
    assert reporter.last_report['removed'] == []
    assert QAT in conductor.deployables()


def test_a_hung_driver_keeps_its_devices_and_holds_no_other(
        conf, host, conductor):
    """A driver whose discovery never returns (a call into its hardware
    hangs) held the report, and every report after it, for good: the
    host fell silent, and the other drivers' changes never went out."""
    conf.set_override('discovery_timeout', 0.5, 'agent')
    reporter = _reporter(conf)
    reporter.report_now()
    hung, release = reporter.drivers['fake_driver'], threading.Event()
    real = hung.discover
    entered = []

    def discover():
        entered.append(1)
        release.wait(30)
        return real()
    hung.discover = discover
    try:
        host.add_vfs('0000:3f:00.0', ['0000:3f:01.0'], device='37c9')
        started = time.monotonic()
        reporter.report_now()
        assert time.monotonic() - started < 5
        # The QAT change went out; the hung driver's device is kept.
        assert conductor.deployables()['compute-1_0000:3f:00.0'] == 1
        assert FAKE in conductor.deployables()
        assert reporter.last_report['removed'] == []
        # Not asked again, nor waited for, while it hangs.
        started = time.monotonic()
        reporter.report_now()
        assert time.monotonic() - started < 0.5 + 2
        assert len(entered) == 1
    finally:
        release.set()
    # Back: asked again.
    hung.discover = real
    reporter.report_now()
    assert FAKE in conductor.deployables()


@pytest.mark.parametrize('record', ['deleted', 'cleared'])
def test_a_failing_driver_keeps_its_devices_without_the_record(
        conf, host, conductor, tmp_path, record):
    """The record of what the conductor acknowledged is safe to delete
    (the next report is full), and is cleared when the conductor asks for
    a full report: a driver failing then kept nothing, and the full
    report made the conductor delete its devices and their providers.
    What was acknowledged in this life stands in."""
    reporter = _reporter(conf)
    reporter.report_now()
    if record == 'deleted':
        (tmp_path / 'state' / f'agent-{HOST}.json').unlink()
    else:
        reporter._cache.clear()
    reporter.drivers['intel_qat_driver'].discover = lambda: 1 / 0
    reporter.report_now()
    assert reporter.last_report['full'] is True
    assert QAT in conductor.deployables() and QAT in conductor.providers()


def test_a_card_being_programmed_keeps_its_last_reported_picture(
        conf, host, conductor):
    """A card may leave the bus, or read half-written, while its vendor
    tool rewrites it: a report taken then (periodic, or a hotplug event
    the reset raised) keeps the card as last acknowledged; the report
    after the programming says what it is."""
    reporter = _reporter(conf)
    reporter.report_now()
    with reporter.programming.alone('0000:3d:00.0'):
        host.remove_pci('0000:3d:00.0')
        reporter.report_now()
        assert reporter.last_report['removed'] == []
        assert QAT in conductor.deployables()
    reporter.report_now()
    assert reporter.last_report['removed'] == ['PCI:0000:3d:00.0']
    assert QAT not in conductor.deployables()


def test_resource_provider_name_is_sent_when_configured(conf, host,
                                                       conductor):
    conf.set_override('resource_provider_name', 'compute-1.example.org',
                      'agent')
    reporter = _reporter(conf)
    reporter.report_now()
    assert reporter.last_report['resource_provider_name'] == \
        'compute-1.example.org'


def test_hotplug_add_and_remove_each_report_once_within_a_second(
        conf, host, conductor):
    conf.set_override('periodic_interval', 3600)
    conf.set_override('hotplug_debounce', 0.2, 'agent')
    reporter = _reporter(conf)
    watcher = hotplug.HotplugWatcher(conf, reporter.request_report)
    reporter.start()
    watcher.start()
    try:
        _wait_for(lambda: reporter.reports_acknowledged == 1)
        for change in (_enable_vf, _disable_vf):
            before = reporter.reports_acknowledged
            change(host)
            sent_at = time.monotonic()
            for action in ('add', 'bind', 'change'):
                watcher.inject(action, 'pci',
                               '/devices/pci0000:3f/0000:3f:01.0')
            _wait_for(lambda n=before + 1: reporter.reports_acknowledged == n)
            assert reporter.last_report_started - sent_at < 1.0
            time.sleep(0.5)
            assert reporter.reports_acknowledged == before + 1
            assert reporter.last_report['full'] is False
        assert 'compute-1_0000:3f:00.0' not in conductor.deployables()
    finally:
        watcher.stop()
        reporter.stop()


def _enable_vf(tree):
    tree.add_vfs('0000:3f:00.0', ['0000:3f:01.0'], device='37c9')


def _disable_vf(tree):
    tree.disable_vfs('0000:3f:00.0')


def test_resource_provider_name_defaults_to_the_fqdn(conf, host, conductor):
    reporter = _reporter(conf)
    reporter.report_now()
    assert reporter.last_report['resource_provider_name'] == \
        socket.getfqdn()


def test_a_report_that_carries_something_is_one_info_line(conf, host,
                                                          conductor, caplog):
    caplog.set_level('DEBUG', logger='cyborg.agent')
    reporter = _reporter(conf)

    def lines(level):
        return [r.getMessage() for r in caplog.records
                if r.name == 'cyborg.agent.reporter'
                and r.levelname == level]

    reporter.report_now()
    assert lines('INFO') == ['Reporting the inventory of %s: full, 2 '
                             'device(s) sent, 0 removed' % HOST]
    caplog.clear()
    reporter.report_now()
    assert lines('INFO') == []
    assert lines('DEBUG') == ['Reporting the inventory of %s: delta, 0 '
                              'device(s) sent, 0 removed' % HOST]


@pytest.mark.parametrize('first', ['intel_qat_driver', 'pci_driver'])
def test_hardware_two_drivers_find_is_reported_once(conf, host, conductor,
                                                    caplog, first):
    """The QAT driver's PF offers its VFs as one pool; the generic PCI
    driver, allowed the same VFs, would offer each again as a device of
    its own (different device keys, the same functions).  The driver
    enabled first keeps them, the other's overlapping devices are left
    out with an error naming both, and the host's report is stored."""
    conf.set_override('passthrough_whitelist',
                      ['{"vendor_id": "8086", "product_id": "37c9"}'],
                      'agent')
    order = [first] + [d for d in ('intel_qat_driver', 'pci_driver')
                       if d != first]
    conf.set_override('enabled_drivers', ['fake_driver'] + order, 'agent')
    reporter = _reporter(conf)
    reporter.report_now()
    stored = conductor.deployables()
    vfs = [name for name in stored if '0000:3d:01.' in name]
    if first == 'intel_qat_driver':
        assert QAT in stored and vfs == []
    else:
        assert QAT not in stored and len(vfs) == 3
    assert FAKE in stored
    assert 'is claimed by drivers %s and %s' % tuple(order) in caplog.text


class TwiceNamingFake(fake.FakeDriver):
    """The fake driver with its deployable listed twice, as a driver bug
    (or hardware it does not expect) may make it."""

    def discover(self):
        devices = super().discover()
        for device in devices:
            device.deployables.append(device.deployables[0])
        return devices


def test_a_deployable_a_driver_names_twice_is_reported_once(conf, host,
                                                            conductor):
    """The conductor refuses a report naming one deployable twice, and
    with it the rest of the host's inventory, at every period: the agent
    reports the first and says so."""
    reporter = _reporter(conf)
    reporter.drivers['fake_driver'] = TwiceNamingFake(conf, HOST)
    reply = reporter.report_now()
    assert reply['need_full'] is False
    assert conductor.deployables() == {FAKE: 16, QAT: 3}
