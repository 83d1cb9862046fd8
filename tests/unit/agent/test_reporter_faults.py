"""The reporter when something is wrong (against the real conductor over
fake:// RPC, or RabbitMQ behind a TCP proxy): a record or a driver's
output the conductor or the reporter cannot take, two threads
discovering at once, a refusal under a udev event storm, the broker
away, a stop while a report is blocked.  Each must leave the host
reporting, and the agent able to stop within its grace time."""

import json
import threading
import time

import oslo_messaging as messaging
import pytest

from cyborg.agent import cache as agent_cache
from cyborg.agent import health as agent_health
from cyborg.agent import manager as agent_manager
from cyborg.agent import reporter as agent_reporter
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.drivers import fake
from cyborg.objects import inventory
from tests.fixtures import api as api_fixture
from tests.fixtures import rabbit
from tests.fixtures import sysfs as fake_sysfs
from tests.fixtures import tcp_proxy
from tests.unit.agent import test_reporter

HOST = fake_sysfs.HOST
QAT = test_reporter.QAT
FAKE = test_reporter.FAKE

# The QAT host plus the fake device, with its agent's options.
host = test_reporter.host
_reporter = test_reporter._reporter
_wait_for = test_reporter._wait_for


def _record(tmp_path):
    return tmp_path / 'state' / f'agent-{HOST}.json'


def _refused(error):
    return (isinstance(error, exception.Invalid)
            or getattr(error, 'exc_type', None) == 'Invalid')


# -- a delta the conductor refuses ------------------------------------------

def test_a_delta_the_conductor_refuses_is_followed_by_a_full_report(
        conf, host, conductor, tmp_path):
    """A record the conductor cannot take a delta from (here a device it
    refuses to read as removed: a key holding a NUL character) made every
    report of the host refused, the same delta retried for ever: the
    record is forgotten, and the next report is a full one."""
    _reporter(conf).report_now()
    path = _record(tmp_path)
    record = json.loads(path.read_text())
    devices = [inventory.DriverDevice.from_dict(d)
               for d in record['devices']]
    devices.append(inventory.DriverDevice(
        type='FPGA', vendor='abcd', model='gone',
        controlpath_id=inventory.ControlPathID('0000:0e:00.0\x00')))
    path.write_text(json.dumps({
        'hostname': HOST, 'digest': inventory.inventory_digest(devices),
        'devices': [d.to_dict() for d in devices]}))
    reporter = _reporter(conf)
    with pytest.raises(Exception) as refused:
        reporter.report_now()
    assert _refused(refused.value), refused.value
    assert not path.exists()
    reply = reporter.report_now()
    assert reply['need_full'] is False
    assert reporter.last_report['full'] is True
    assert reporter.reports_acknowledged == 1
    assert conductor.deployables() == {FAKE: 16, QAT: 3}


def test_a_refused_report_is_retried_after_its_back_off_whatever_wakes_it(
        conf, host, conductor, caplog):
    """Every report refused (a provider name the conductor cannot store)
    while udev events keep coming: each event woke the reporter, which
    retried at once, a refused report a few times a second for as long
    as the storm lasted.  The back-off (1 s, then 2 s) runs out first."""
    caplog.set_level('DEBUG', logger='cyborg.agent.reporter')
    conf.set_override('resource_provider_name', 'compute-1\x00', 'agent')
    reporter = _reporter(conf)
    reporter.start()
    storm = threading.Event()

    def events():
        while not storm.wait(0.05):
            reporter.request_report()
    thread = threading.Thread(target=events)
    thread.start()
    try:
        time.sleep(3.5)
    finally:
        storm.set()
        thread.join()
        reporter.stop(timeout=10)
    attempts = [r for r in caplog.records
                if r.getMessage().startswith('Reporting the inventory')]
    # At 0 s, 1 s and 3 s (plus the time each takes).
    assert 2 <= len(attempts) <= 4, len(attempts)
    assert reporter.reports_acknowledged == 0


# -- two threads discovering ------------------------------------------------

class _SlowDriver(fake.FakeDriver):
    """Finds nothing, slowly (a driver reading a busy card)."""

    name = 'slow_driver'

    def discover(self):
        time.sleep(0.6)
        return []


def test_a_device_looked_up_while_the_reporter_discovers_is_found(
        conf, host, conductor, admin_context):
    """The RPC thread preparing a device the conductor has not heard of
    yet discovers afresh (``AgentManager._find_device``); the reporter's
    thread may be discovering then.  Both took and dropped the same
    drivers' calls, and one of them died on a KeyError: the report, or
    the preparation (a server fault)."""
    drivers = {'slow_driver': _SlowDriver(conf, HOST),
               'fake_driver': fake.FakeDriver(conf, HOST)}
    reporter = _reporter(conf)
    reporter.drivers = drivers
    manager = agent_manager.AgentManager(conf, HOST, reporter=reporter,
                                         drivers=drivers)
    key = fake.FakeDriver(conf, HOST).discover()[0].key()
    errors = []

    def report():
        try:
            reporter.report_now()
        except Exception as exc:
            errors.append(exc)
    thread = threading.Thread(target=report)
    thread.start()
    # The fake driver has answered the reporter; the slow one has not.
    time.sleep(0.2)
    try:
        assert manager.prepare_device(admin_context, key) is True
    finally:
        thread.join()
    assert errors == []
    assert reporter.reports_acknowledged == 1
    assert FAKE in conductor.deployables()


# -- a driver's output the report cannot carry ------------------------------

def _returns_none():
    return None


def _pci_handle_without_its_address():
    return [inventory.DriverDevice(
        type='QAT', vendor='8086', model='37c8',
        controlpath_id=inventory.ControlPathID('0000:3d:00.0'),
        deployables=[inventory.Deployable(
            name=QAT, num_accelerators=1, attributes={'rc': 'QAT'},
            attach_handles=[inventory.AttachHandle('PCI', {})])])]


def _not_json():
    return [inventory.DriverDevice(
        type='QAT', vendor='8086', model='37c8',
        controlpath_id=inventory.ControlPathID('0000:3d:00.0'),
        std_board_info={'ids': {1, 2}})]


def _not_devices():
    return ['0000:3d:00.0']


BAD_OUTPUTS = [_returns_none, _pci_handle_without_its_address, _not_json,
               _not_devices]


@pytest.mark.parametrize('bad', BAD_OUTPUTS)
def test_a_driver_returning_what_a_report_cannot_carry_keeps_its_devices(
        conf, host, conductor, bad):
    """Only a driver that raised kept its last acknowledged devices; one
    returning None, or devices a report cannot carry, failed every
    report of the host, every other driver's changes with it."""
    reporter = _reporter(conf)
    reporter.report_now()
    reporter.drivers['intel_qat_driver'].discover = bad
    # Another driver's change goes out meanwhile: its device is gone.
    reporter.drivers['fake_driver'].discover = lambda: []
    reply = reporter.report_now()
    assert reply['need_full'] is False
    assert reporter.last_report['removed'] == ['PCI:0000:0c:00.0']
    assert QAT in conductor.deployables() and FAKE not in \
        conductor.deployables()


@pytest.mark.parametrize('bad', BAD_OUTPUTS)
def test_a_driver_returning_bad_output_at_start_holds_no_other(
        conf, host, conductor, bad):
    reporter = _reporter(conf)
    reporter.drivers['intel_qat_driver'].discover = bad
    reporter.report_now()
    assert conductor.deployables() == {FAKE: 16}


def test_a_failing_driver_is_logged_with_a_back_off(conf, host, conductor,
                                                    caplog):
    """A driver that keeps failing logged an ERROR with its traceback at
    every report and every udev event burst: now the 1st, 2nd, 4th...
    failure in a row, and its recovery once."""
    caplog.set_level('INFO', logger='cyborg.agent.reporter')
    reporter = _reporter(conf)
    reporter.report_now()
    qat = reporter.drivers['intel_qat_driver']
    real = qat.discover
    qat.discover = lambda: 1 / 0
    caplog.clear()
    for _ in range(5):
        reporter.report_now()
    qat.discover = real
    reporter.report_now()
    lines = [r for r in caplog.records if 'intel_qat_driver' in
             r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in lines] == [
        ('WARNING', 'Driver intel_qat_driver failed to discover devices '
                    '(division by zero); keeping its last reported ones '
                    '(failure %d in a row)' % n) for n in (1, 2, 4)] + [
        ('INFO', 'Driver intel_qat_driver discovers devices again (after '
                 '5 failure(s))')]
    assert all(r.exc_info for r in lines[:3])
    assert QAT in conductor.deployables()


# -- RabbitMQ away ------------------------------------------------------------

@pytest.fixture
def broker(conf, tmp_path):
    """The agent's RPC through a TCP proxy to a RabbitMQ virtual host of
    the test's own, where no conductor listens; yields the proxy."""
    api_fixture._register_messaging_opts(conf)
    conf.set_override('state_path', str(tmp_path / 'state'))
    with rabbit.throwaway_vhost() as url, \
            tcp_proxy.tcp_proxy(rabbit.RABBIT_PORT) as proxy:
        transport = messaging.get_rpc_transport(conf, url=url.replace(
            ':%d/' % rabbit.RABBIT_PORT, ':%d/' % proxy.port))
        rpc.set_transport(transport)
        try:
            yield proxy
        finally:
            proxy.restore()
            rpc.set_transport(None)
            transport.cleanup()


def _outcome(function, limit):
    """What ``function()`` returned or raised, or 'blocked' when it had
    not returned after ``limit`` seconds (it goes on, on a daemon
    thread)."""
    done, out = threading.Event(), []

    def run():
        try:
            out.append(function())
        except Exception as exc:
            out.append(exc)
        done.set()
    threading.Thread(target=run, daemon=True).start()
    return out[0] if done.wait(limit) else 'blocked'


def test_a_report_with_the_broker_away_fails_and_is_retried(conf, broker,
                                                            caplog):
    """With RabbitMQ away a report blocked inside oslo.messaging's
    reconnect loop, for as long as it stayed away: the agent logged
    nothing of its own and ran no back-off.  It now fails within
    seconds, and the reporter logs it and tries again later."""
    caplog.set_level('WARNING', logger='cyborg.agent.reporter')
    reporter = agent_reporter.Reporter(conf, HOST, {})
    # The broker is there; no conductor ever listened on it.
    assert isinstance(_outcome(reporter.report_now, 10),
                      messaging.MessageUndeliverable)
    broker.cut()
    error = _outcome(reporter.report_now, 30)
    assert isinstance(error, messaging.MessageDeliveryFailure), error
    broker.restore()
    # The broker back, the next report reaches it.
    assert isinstance(_outcome(reporter.report_now, 30),
                      messaging.MessageUndeliverable)


def test_a_health_report_with_the_broker_away_fails(conf, broker, caplog):
    """The health monitor's reports, sent by a client alike: one blocked
    with RabbitMQ away held the monitor's checks too.  With no conductor
    yet, it says so (the exception carries no message: the log said
    "failed ()")."""
    caplog.set_level('WARNING', logger='cyborg.agent.health')
    conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
    drivers = {'fake_driver': fake.FakeDriver(conf, HOST)}
    devices = drivers['fake_driver'].discover()
    # What the conductor acknowledged before: the devices it watches.
    agent_cache.ReportCache(agent_cache.default_path(conf, HOST), HOST).save(
        inventory.inventory_digest(devices), devices)
    reporter = agent_reporter.Reporter(conf, HOST, drivers)
    monitor = agent_health.HealthMonitor(conf, HOST, drivers,
                                         reporter.known_devices)
    monitor.check_once()
    # The broker is there; no conductor ever listened on it.
    assert _outcome(monitor.send_once, 10) is False
    assert [r.getMessage() for r in caplog.records] == [
        f'Health report of {HOST} not sent: no conductor listens on the '
        f'broker yet; retrying at the next check (failure 1 in a row)']
    broker.cut()
    # Failed (kept for the next check), not blocked.
    assert _outcome(monitor.send_once, 30) is False


# -- stopping ---------------------------------------------------------------

def test_stop_does_not_wait_for_a_blocked_report(conf, host, conductor):
    """The agent's grace time is 3 s, and its RPC server is stopped after
    the reporter: a stop that waited (10 s) for a report blocked on the
    conductor made the process exit before the RPC server finished its
    calls (an mdev being made, a device being prepared)."""
    _reporter(conf).report_now()
    conductor.stop()
    host.add_vfs('0000:3f:00.0', ['0000:3f:01.0'], device='37c9')
    reporter = _reporter(conf, timeout=5)
    reporter.start()
    _wait_for(lambda: reporter.last_report_started is not None)
    thread = reporter._thread
    started = time.monotonic()
    reporter.stop()
    assert time.monotonic() - started < 0.5
    # It ends once the report does, without another.
    thread.join(10)
    assert not thread.is_alive()
    assert reporter.reports_acknowledged == 0
