"""The health monitor over oslo.messaging's fake:// transport, against a
conductor endpoint that records what reaches it: debouncing, full reports,
retries, probes, preparation, a broken driver, telemetry and metrics.

The drivers are small test drivers implementing our own interfaces
(``base.Driver`` + ``base.HealthReporting``, ``Preparable``, ``usage``):
a test decides what they read."""

import threading
import time

import oslo_messaging as messaging
import pytest

from cyborg.agent import health as agent_health
from cyborg.agent import manager as agent_manager
from cyborg.agent import reporter as agent_reporter
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.cmd import agent as agent_cmd
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import rpc
from cyborg.common import service
from cyborg.common import states
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.drivers import base
from cyborg.drivers import nvidia_gpu
from cyborg.objects import health
from cyborg.objects import inventory
from tests.fixtures import fake_nvml
from tests.fixtures import sysfs as fake_sysfs
from tests.fixtures import notifications as notification_fixture

HOST = 'compute-1'
GPU_A = '0000:3b:00.0'
GPU_B = '0000:5e:00.0'
KEY_A = 'PCI:' + GPU_A
KEY_B = 'PCI:' + GPU_B


class RecordingConductor:
    """The conductor's agent-facing endpoints: acknowledges inventory as
    sent and keeps every health report; ``refuse`` makes health reports
    fail the way a broken conductor would (an error comes back)."""

    target = messaging.Target(version=conductor_rpcapi.RPC_API_VERSION)

    def __init__(self):
        self.health_reports = []
        self.received_at = []
        self.refuse = False
        self.refused = 0

    def report_inventory(self, context, hostname, report):
        return {'digest': report['digest'], 'need_full': False}

    def report_health(self, context, hostname, report):
        assert hostname == HOST
        if self.refuse:
            self.refused += 1
            raise exception.CyborgException('conductor database is down')
        self.health_reports.append(report)
        self.received_at.append(time.monotonic())
        return {'accepted': len(report['readings'])}

    def readings(self, index=-1):
        """``[(device, severity, source)]`` of one report."""
        return [(r['device'], r['severity'], r['source'])
                for r in self.health_reports[index]['readings']]


class WatchedDriver(base.Driver, base.HealthReporting):
    """GPUs at ``addresses`` that read well unless a test sets ``faults``
    (device key -> Reading) or makes the whole driver ``broken``."""

    name = 'watched_driver'

    def __init__(self, conf, host, addresses=(GPU_A, GPU_B)):
        super().__init__(conf, host)
        self.addresses = addresses
        self.faults = {}
        self.broken = False

    def discover(self):
        return [inventory.DriverDevice(
            type='GPU', vendor='0x10de', model='test',
            controlpath_id=inventory.ControlPathID(address),
            deployables=[inventory.Deployable(
                name=base.deployable_name(self.host, address),
                num_accelerators=1,
                attributes=base.make_attributes('PGPU', ['test']),
                driver_name=self.name)])
            for address in self.addresses]

    def check_health(self, devices):
        if self.broken:
            raise OSError('sysfs unreadable')
        return [self.faults.get(d.key()) or
                health.Reading(device=d.key(), severity=states.OK,
                               source='test')
                for d in devices]


class PreparedDriver(WatchedDriver, base.Preparable):
    name = 'prepared_driver'

    def __init__(self, conf, host, addresses=('0000:af:00.0',)):
        super().__init__(conf, host, addresses)
        self.prepared = []

    def prepare(self, device):
        self.prepared.append(device.key())


class MeteredDriver(WatchedDriver):
    name = 'metered_driver'

    def __init__(self, conf, host, addresses=('0000:d8:00.0',)):
        super().__init__(conf, host, addresses)
        self.values = {'utilization': 0.25, 'memory_used_bytes': 4096}

    def usage(self, devices):
        return {d.key(): dict(self.values) for d in devices}


def _fault(key, severity=states.FATAL, reason='XID 79: fallen off the bus',
           code='xid:79', event=False, **counters):
    """A condition that holds while the test leaves it; ``event``: an
    occurrence (an XID as NVML delivers it), seen by one check."""
    return health.Reading(device=key, severity=severity, reason=reason,
                          source='test', code=code, counters=counters,
                          event=event)


@pytest.fixture
def conf(conf, tmp_path):
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('check_interval', 0.1, 'health')
    conf.set_override('report_interval', 60, 'health')
    rpc.register_messaging_opts(conf)
    return conf


@pytest.fixture
def conductor(conf):
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    rpc.set_transport(transport)
    endpoint = RecordingConductor()
    server = rpc.get_server(conf, conductor_rpcapi.TOPIC, 'cond-1',
                            [endpoint])
    server.start()
    yield endpoint
    server.stop()
    server.wait()
    rpc.set_transport(None)
    transport.cleanup()


@pytest.fixture
def watched(conf):
    return WatchedDriver(conf, HOST)


def _agent(conf, *drivers):
    """A reporter that got the drivers' devices acknowledged, and a
    monitor (not started) watching them."""
    by_name = {d.name: d for d in drivers}
    reporter = agent_reporter.Reporter(
        conf, HOST, by_name,
        conductor_api=conductor_rpcapi.ConductorAPI(conf, timeout=5))
    reporter.report_now()
    monitor = agent_health.HealthMonitor(
        conf, HOST, by_name, reporter.known_devices,
        conductor_api=conductor_rpcapi.ConductorAPI(conf, timeout=5),
        in_progress=reporter.programming)
    return reporter, monitor


@pytest.fixture
def running(conf, conductor, watched):
    """A started monitor over ``watched``, its first full report in."""
    _reporter, monitor = _agent(conf, watched)
    monitor.start()
    try:
        _wait_for(lambda: len(conductor.health_reports) == 1)
        yield monitor
    finally:
        monitor.stop()


def _wait_for(predicate, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f'condition not met within {timeout} s')


def _wait_checks(monitor, count):
    start = monitor.checks
    _wait_for(lambda: monitor.checks >= start + count)


def _sample(name, **labels):
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


# -- debouncing ---------------------------------------------------------


def test_first_report_is_full_and_a_change_goes_at_once(conf, conductor,
                                                        watched, running):
    assert conductor.health_reports[0]['full'] is True
    assert sorted(conductor.readings(0)) == [(KEY_A, 'ok', 'test'),
                                             (KEY_B, 'ok', 'test')]
    assert _sample('cyborg_agent_device_healthy', device=KEY_A) == 1

    watched.faults[KEY_A] = _fault(KEY_A)
    changed_at = time.monotonic()
    _wait_for(lambda: len(conductor.health_reports) == 2)
    # One check interval (0.1 s) plus scheduling slack, not a period.
    assert conductor.received_at[1] - changed_at < 1.0
    assert conductor.health_reports[1]['full'] is False
    assert conductor.readings() == [(KEY_A, 'fatal', 'test')]
    assert conductor.health_reports[1]['readings'][0]['code'] == 'xid:79'
    assert _sample('cyborg_agent_device_healthy', device=KEY_A) == 0

    # The fault holds: nothing more is sent; its healing is sent once.
    _wait_checks(running, 4)
    assert len(conductor.health_reports) == 2
    del watched.faults[KEY_A]
    _wait_for(lambda: len(conductor.health_reports) == 3)
    assert conductor.readings() == [(KEY_A, 'ok', 'test')]
    _wait_checks(running, 4)
    assert len(conductor.health_reports) == 3


def test_a_new_event_of_the_same_kind_is_sent_a_harmless_one_is_not(
        conf, conductor, watched):
    _reporter, monitor = _agent(conf, watched)
    monitor.check_once()
    assert monitor.send_once() and monitor.last_report['full'] is True

    watched.faults[KEY_A] = _fault(KEY_A, xid=1, event=True)
    monitor.check_once()
    monitor.send_once()
    assert conductor.readings() == [(KEY_A, 'fatal', 'test')]
    # One more XID 79 in the next check: same severity, reason and code,
    # a new event.
    watched.faults[KEY_A] = _fault(KEY_A, xid=2, event=True)
    monitor.check_once()
    monitor.send_once()
    assert len(conductor.health_reports) == 3
    assert conductor.health_reports[-1]['readings'][0]['counters'] == \
        {'xid': 2}
    # No event in the next check: the device reads well again (news).
    del watched.faults[KEY_A]
    monitor.check_once()
    monitor.send_once()
    assert conductor.readings() == [(KEY_A, 'ok', 'test')]

    # Application faults: the first is news, more of them are not.
    app = {'severity': states.APPLICATION, 'reason': 'XID 13',
           'code': 'xid:13'}
    watched.faults[KEY_B] = _fault(KEY_B, xid=1, event=True, **app)
    monitor.check_once()
    monitor.send_once()
    assert conductor.readings() == [(KEY_B, 'application', 'test')]
    watched.faults[KEY_B] = _fault(KEY_B, xid=2, event=True, **app)
    monitor.check_once()
    monitor.send_once()
    assert len(conductor.health_reports) == 5


def test_a_full_report_goes_out_every_report_interval(conf, conductor,
                                                      watched):
    conf.set_override('report_interval', 1, 'health')
    _reporter, monitor = _agent(conf, watched)
    monitor.start()
    try:
        _wait_for(lambda: len(conductor.health_reports) == 3, timeout=10)
    finally:
        monitor.stop()
    assert [r['full'] for r in conductor.health_reports] == [True] * 3
    gaps = [b - a for a, b in zip(conductor.received_at,
                                  conductor.received_at[1:])]
    assert all(0.8 < gap < 2.5 for gap in gaps), gaps
    assert sorted(conductor.readings()) == [(KEY_A, 'ok', 'test'),
                                            (KEY_B, 'ok', 'test')]


def test_readings_a_failed_send_carried_are_sent_in_order_later(
        conf, conductor, watched, running):
    conductor.refuse = True
    watched.faults[KEY_A] = _fault(KEY_A)
    _wait_for(lambda: conductor.refused >= 2)
    del watched.faults[KEY_A]
    _wait_for(lambda: conductor.refused >= 4)
    assert len(conductor.health_reports) == 1
    conductor.refuse = False
    _wait_for(lambda: len(conductor.health_reports) == 2)
    # The fault is not lost to the recovery that followed it.
    assert conductor.readings() == [(KEY_A, 'fatal', 'test'),
                                    (KEY_A, 'ok', 'test')]
    _wait_checks(running, 3)
    assert len(conductor.health_reports) == 2


def test_changes_due_with_a_full_report_go_first_as_changes(conf, conductor,
                                                             watched):
    """A fault the conductor could not take before the next full report
    was due still reaches it as a change (counted), not only inside the
    full report (a re-statement, never counted)."""
    conf.set_override('report_interval', 1, 'health')
    _reporter, monitor = _agent(conf, watched)
    monitor.start()
    try:
        _wait_for(lambda: len(conductor.health_reports) == 1)
        conductor.refuse = True
        watched.faults[KEY_A] = _fault(KEY_A)
        _wait_for(lambda: conductor.refused >= 1)
        time.sleep(1.2)     # the next full report is due meanwhile
        conductor.refuse = False
        _wait_for(lambda: len(conductor.health_reports) == 3)
    finally:
        monitor.stop()
    assert [r['full'] for r in conductor.health_reports] == [True, False,
                                                             True]
    assert conductor.readings(1) == [(KEY_A, 'fatal', 'test')]
    assert sorted(conductor.readings(2)) == [(KEY_A, 'fatal', 'test'),
                                             (KEY_B, 'ok', 'test')]


class PartitionedDriver(WatchedDriver):
    """WatchedDriver whose deployables (partitions) read a fault of their
    own while ``partition_faults`` names them, and nothing while well (as
    the FPGA port and MIG checks do)."""

    name = 'partitioned_driver'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.partition_faults = {}      # deployable name -> Reading

    def check_health(self, devices):
        return super().check_health(devices) + [
            self.partition_faults[dep.name] for d in devices
            for dep in d.deployables if dep.name in self.partition_faults]


def _partition_fault(name, xid=1):
    return health.Reading(device=KEY_A, deployable=name,
                          severity=states.FATAL, reason='port error',
                          source='test', code='port:error',
                          counters={'errors': xid})


def test_a_partition_fault_that_clears_and_comes_back_is_news(conf,
                                                              conductor):
    """A partition reads nothing once well, so its last sent fault stayed
    the one 'the conductor already has': the same fault coming back was
    not sent (only re-stated by the next full report, never counted)."""
    driver = PartitionedDriver(conf, HOST)
    name = base.deployable_name(HOST, GPU_A)
    _reporter, monitor = _agent(conf, driver)
    monitor.check_once()
    assert monitor.send_once() and monitor.last_report['full'] is True

    def partition_reports():
        return [r for report in conductor.health_reports[1:]
                for r in report['readings'] if r['deployable'] == name]

    driver.partition_faults[name] = _partition_fault(name)
    monitor.check_once()
    monitor.send_once()
    assert len(partition_reports()) == 1
    # Still there: nothing new.  Then it clears (the device's own reading
    # says OK, as it did all along: nothing to send either).
    monitor.check_once()
    monitor.send_once()
    del driver.partition_faults[name]
    monitor.check_once()
    monitor.send_once()
    assert len(partition_reports()) == 1
    driver.partition_faults[name] = _partition_fault(name)
    monitor.check_once()
    monitor.send_once()
    assert len(partition_reports()) == 2
    assert conductor.health_reports[-1]['full'] is False

    # A round whose check fails reads nothing: the fault has not cleared,
    # and the round after it does not send it again.
    driver.broken = True
    monitor.check_once()
    driver.broken = False
    monitor.check_once()
    monitor.send_once()
    assert len(partition_reports()) == 2

    # Cleared and back while the conductor cannot be reached: the return
    # is kept and reaches it later.
    conductor.refuse = True
    del driver.partition_faults[name]
    monitor.check_once()
    assert monitor.send_once()          # nothing to send
    driver.partition_faults[name] = _partition_fault(name, xid=1)
    monitor.check_once()
    assert monitor.send_once() is False
    conductor.refuse = False
    assert monitor.send_once()
    assert len(partition_reports()) == 3


def test_a_condition_that_holds_is_not_sent_again_when_counters_move(
        conf, conductor, tmp_path):
    """A GPU held in hardware slowdown (a transient condition, counted
    once) while application XIDs arrive and PCIe replays tick below their
    burst: the device's counters, shared by all its readings, moved, and
    the slowdown went out again as a change each time, counted as one more
    fault (two application crashes took the GPU out).  Only the events go
    now; a fatal XID still does."""
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(GPU_A, *fake_sysfs.A100, driver='nvidia', numa_node=0)
    conf.set_override('sysfs_root', tree.root, 'agent')
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {GPU_A: {
        'name': 'NVIDIA A100', 'uuid': 'GPU-1', 'serial': '1',
        'memory_mb': 40960, 'clock_events': ['hw_thermal_slowdown'],
        'pcie_replays': 0, 'events': True}})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, HOST, nvml=nvml)
    driver.name = 'nvidia_gpu_driver'
    _reporter, monitor = _agent(conf, driver)

    def sent():
        before = len(conductor.health_reports)
        monitor.check_once()
        assert monitor.send_once()
        return [r['code'] for report in conductor.health_reports[before:]
                for r in report['readings']]

    assert 'clocks:hw_thermal_slowdown' in sent()      # the first, full
    assert sent() == []
    nvml.add_xid(GPU_A, 13)
    nvml.add_xid(GPU_A, 43)
    assert sorted(sent()) == ['xid:13', 'xid:43']
    nvml.update_gpu(GPU_A, pcie_replays=2)
    assert sent() == []
    nvml.add_xid(GPU_A, 79)
    assert sent() == ['xid:79']
    assert sent() == []


def test_unsent_readings_are_bounded_per_device(conf, conductor, watched):
    _reporter, monitor = _agent(conf, watched)
    conductor.refuse = True
    for count in range(agent_health.MAX_PENDING_PER_KEY + 5):
        watched.faults[KEY_A] = _fault(KEY_A, xid=count, event=True)
        monitor.check_once()
        assert monitor.send_once() is False
    conductor.refuse = False
    assert monitor.send_once() is True
    sent = [r for r in conductor.health_reports[0]['readings']
            if r['device'] == KEY_A]
    # The newest events are kept; the full report adds nothing for A
    # (its current reading is the last one queued).
    assert len(sent) == agent_health.MAX_PENDING_PER_KEY
    assert sent[-1]['counters'] == {'xid': agent_health.MAX_PENDING_PER_KEY
                                    + 4}


def test_a_raising_driver_is_skipped_and_the_monitor_goes_on(
        conf, conductor):
    broken = WatchedDriver(conf, HOST, addresses=(GPU_A,))
    broken.broken = True
    working = MeteredDriver(conf, HOST)
    _reporter, monitor = _agent(conf, broken, working)
    monitor.start()
    try:
        _wait_for(lambda: len(conductor.health_reports) == 1)
        assert conductor.readings() == [('PCI:0000:d8:00.0', 'ok', 'test')]
        working.faults['PCI:0000:d8:00.0'] = _fault('PCI:0000:d8:00.0')
        _wait_for(lambda: len(conductor.health_reports) == 2)
        broken.broken = False
        _wait_for(lambda: len(conductor.health_reports) == 3)
        assert conductor.readings() == [(KEY_A, 'ok', 'test')]
    finally:
        monitor.stop()


# -- probes and preparation ------------------------------------------------


@pytest.fixture
def agent_server(conf, conductor):
    """The agent's RPC endpoints served over the same fake:// transport,
    with a started monitor over a watched and a prepared driver."""
    watched = WatchedDriver(conf, HOST)
    prepared = PreparedDriver(conf, HOST)
    reporter, monitor = _agent(conf, watched, prepared)
    manager = agent_manager.AgentManager(
        conf, HOST, reporter=reporter, drivers=reporter.drivers,
        health_monitor=monitor)
    server = service.RPCService(conf, agent_rpcapi.TOPIC, HOST, [manager])
    server.start()
    monitor.start()
    try:
        _wait_for(lambda: len(conductor.health_reports) == 1)
        yield manager
    finally:
        monitor.stop()
        server.stop()
        server.wait()


def test_a_probe_verdict_is_always_sent(conf, conductor, agent_server,
                                        admin_context):
    api = agent_rpcapi.AgentAPI(conf)
    # The device read well and that was sent: the verdict still goes.
    api.probe_health(admin_context, HOST, [KEY_A, 'PCI:0000:00:00.0'])
    _wait_for(lambda: len(conductor.health_reports) == 2)
    assert conductor.readings() == [(KEY_A, 'ok', 'probe')]
    api.probe_health(admin_context, HOST, [KEY_A])
    _wait_for(lambda: len(conductor.health_reports) == 3)
    assert conductor.readings() == [(KEY_A, 'ok', 'probe')]

    watched = agent_server.drivers['watched_driver']
    watched.faults[KEY_B] = _fault(KEY_B)
    _wait_for(lambda: len(conductor.health_reports) == 4)
    api.probe_health(admin_context, HOST, [KEY_B])
    _wait_for(lambda: len(conductor.health_reports) == 5)
    assert conductor.readings() == [(KEY_B, 'fatal', 'probe')]


def test_a_card_being_programmed_is_not_probed_well(conf, conductor,
                                                   agent_server,
                                                   admin_context):
    """The conductor may re-probe a card whose programming it gave up on
    while the vendor tool still runs: the verdict is "not yet" (transient,
    so it stays out until the conductor re-probes it again), not the
    driver's reading of a card mid-write, for the device and each of its
    deployables (which the programming took out): the conductor takes it
    as a verdict for whichever it probes, no fault of the others."""
    api = agent_rpcapi.AgentAPI(conf)

    def verdicts():
        # In the report the probe's verdicts go in, or beside a periodic
        # check's readings, in the order sent.
        return [r for report in conductor.health_reports
                for r in report['readings'] if r['source'] == 'probe']

    with agent_server.programming.alone(GPU_A):
        api.probe_health(admin_context, HOST, [KEY_A])
        _wait_for(lambda: len(verdicts()) == 2)
    readings = verdicts()
    assert [(r['device'], r['severity'], r['deployable'])
            for r in readings] == [
        (KEY_A, 'transient', None),
        (KEY_A, 'transient', base.deployable_name(HOST, GPU_A))]
    for reading in readings:
        assert reading['code'] == 'probe:programming'
        assert reading['reason'].startswith('being programmed (for ')
        # Whatever the conductor's hold-down (zero: the next re-probe
        # may come at a good reading, or a probe_timeout later).
        assert reading['reason'].endswith(
            's); re-probed when the conductor asks again')
    # Once it ends, the probe is the driver's again.
    api.probe_health(admin_context, HOST, [KEY_A])
    _wait_for(lambda: (KEY_A, 'ok') in {(r['device'], r['severity'])
                                        for r in verdicts()})


def test_a_conductor_older_than_1_7_gets_not_yet_for_deployables_only(
        conf, conductor, watched):
    """Capped below 1.7 (conductors that count a transient probe reading
    for a healthy device as its fault), the agent sends "not yet" for the
    card's deployables only, as it did before."""
    conf.set_override('conductor', '1.6', group='upgrade_levels')
    _reporter, monitor = _agent(conf, watched)
    with monitor.programming.alone(GPU_A):
        monitor.request_probe([KEY_A])
        verdicts = monitor.probe_once()
    assert [(v.device, v.deployable, v.code) for v in verdicts] == [
        (KEY_A, base.deployable_name(HOST, GPU_A), 'probe:programming')]


def test_checks_keep_a_card_s_readings_while_it_is_programmed(
        conf, conductor, watched):
    """What a check reads while a card is rewritten (errors the reset
    raised, a function briefly gone) is not its health: the card keeps its
    previous reading until a check has run after the programming ended; a
    condition that outlasts the write is then reported."""
    _reporter, monitor = _agent(conf, watched)
    monitor.check_once()
    assert monitor.send_once()
    sent = len(monitor._pending)
    with monitor.programming.alone(GPU_A):
        watched.faults[KEY_A] = _fault(KEY_A, code='aer:fatal')
        watched.faults[KEY_B] = _fault(KEY_B)
        readings = monitor.check_once()
    # The other card is checked as ever.
    assert {(r.device, r.severity) for r in readings} == {
        (KEY_A, 'ok'), (KEY_B, 'fatal')}
    assert [r.device for r in monitor._pending[sent:]] == [KEY_B]
    # The check that began before the end may have read the write.
    assert (KEY_A, 'ok') in {(r.device, r.severity)
                             for r in monitor.check_once()}
    assert (KEY_A, 'fatal') in {(r.device, r.severity)
                                for r in monitor.check_once()}
    assert [r.device for r in monitor._pending[sent:]] == [KEY_B, KEY_A]


def test_a_probe_that_raises_is_a_failed_verdict(conf, conductor, watched):
    _reporter, monitor = _agent(conf, watched)
    watched.probe = lambda device: 1 / 0
    monitor.request_probe([KEY_A])
    [verdict] = monitor.probe_once()
    assert (verdict.device, verdict.severity, verdict.source) == \
        (KEY_A, 'fatal', 'probe')
    assert 'division by zero' in verdict.reason


def test_prepare_device_runs_the_preparation_step_when_there_is_one(
        conf, conductor, agent_server, admin_context):
    prepared = agent_server.drivers['prepared_driver']
    assert agent_server.prepare_device(admin_context,
                                       'PCI:0000:af:00.0') is True
    assert prepared.prepared == ['PCI:0000:af:00.0']
    # A driver without a preparation step: nothing to do, still True.
    assert agent_server.prepare_device(admin_context, KEY_A) is True
    assert prepared.prepared == ['PCI:0000:af:00.0']
    with pytest.raises(messaging.ExpectedException) as caught:
        agent_server.prepare_device(admin_context, 'PCI:0000:00:00.0')
    assert isinstance(caught.value.exc_info[1], exception.ResourceNotFound)


def test_prepare_device_finds_a_device_not_reported_yet(conf, conductor,
                                                        admin_context):
    prepared = PreparedDriver(conf, HOST)
    reporter, _monitor = _agent(conf, prepared)
    prepared.addresses = ('0000:af:00.0', '0000:b0:00.0')
    manager = agent_manager.AgentManager(conf, HOST, reporter=reporter,
                                         drivers=reporter.drivers)
    assert manager.prepare_device(admin_context, 'PCI:0000:b0:00.0')
    assert prepared.prepared == ['PCI:0000:b0:00.0']


def test_a_probe_is_answered_with_health_watching_off(conf, conductor,
                                                     admin_context):
    """With [health]enabled off no monitor runs, and the conductor's
    re-probes were ignored: a card it took out (a programming whose
    outcome is unknown) timed out back to unhealthy at every probe, and
    not even an operator enabling it could bring it back.  The probe runs
    at once and its verdict is sent."""
    watched = WatchedDriver(conf, HOST)
    reporter, _monitor = _agent(conf, watched)
    manager = agent_manager.AgentManager(conf, HOST, reporter=reporter,
                                         drivers=reporter.drivers)
    manager.probe_health(admin_context, [KEY_A])
    assert [r['full'] for r in conductor.health_reports] == [False]
    assert conductor.readings() == [(KEY_A, 'ok', 'probe')]
    watched.faults[KEY_B] = _fault(KEY_B)
    manager.probe_health(admin_context, [KEY_B])
    assert conductor.readings() == [(KEY_B, 'fatal', 'probe')]


def test_probe_with_health_off_is_ignored(conf, admin_context):
    manager = agent_manager.AgentManager(conf, HOST)
    assert manager.probe_health(admin_context, [KEY_A]) is None


# -- telemetry and metrics ---------------------------------------------


@pytest.fixture
def notifications(conf):
    """Notifications through oslo.messaging's own in-memory 'test'
    driver; returns a callable listing those sent."""
    with notification_fixture.published(conf) as sent:
        yield sent


def test_telemetry_only_for_drivers_with_usage(conf, conductor,
                                               notifications):
    watched = WatchedDriver(conf, HOST)
    metered = MeteredDriver(conf, HOST)
    _reporter, monitor = _agent(conf, watched, metered)
    sampled = monitor.sample_usage()
    assert list(sampled) == ['PCI:0000:d8:00.0']
    [(_ctx, message, priority, _retry)] = notifications()
    assert priority == 'SAMPLE'
    assert message['event_type'] == 'device.metrics'
    assert message['publisher_id'] == f'cyborg-agent:{HOST}'
    assert message['payload']['cyborg_object.name'] == 'DeviceMetricsPayload'
    assert message['payload']['cyborg_object.data'] == {
        'host': HOST, 'device': 'PCI:0000:d8:00.0',
        'driver_name': 'metered_driver', 'utilization': 0.25,
        'memory_used_bytes': 4096}
    assert _sample('cyborg_agent_device_utilization_ratio',
                   device='PCI:0000:d8:00.0') == 0.25
    assert _sample('cyborg_agent_device_memory_used_bytes',
                   device='PCI:0000:d8:00.0') == 4096
    assert metrics.REGISTRY.get_sample_value(
        'cyborg_agent_device_utilization_ratio', {'device': KEY_A}) is None


def test_telemetry_is_sampled_with_the_full_report(conf, conductor,
                                                   notifications):
    _reporter, monitor = _agent(conf, MeteredDriver(conf, HOST))
    monitor.start()
    try:
        _wait_for(lambda: len(notifications()) == 1)
    finally:
        monitor.stop()


def test_a_vanished_device_loses_its_metric_labels(conf, conductor,
                                                  tmp_path):
    """Every series of a device that is gone goes, those its driver set
    during checks too: XID events by number and severity, the time of
    its last fatal XID, AER counters by kind (they stayed at their last
    values, a GPU long gone still counting errors).  Another GPU's
    stay."""
    metered = MeteredDriver(conf, HOST)
    gone, kept = '0000:17:00.0', '0000:65:00.0'
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    for address in (gone, kept):
        tree.add_pci(address, *fake_sysfs.A100, driver='nvidia',
                     numa_node=0)
        tree.set_aer(address, fatal={}, nonfatal={'Completion Timeout': 3},
                     correctable={'Receiver Error': 7})
    conf.set_override('sysfs_root', tree.root, 'agent')
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {
        address: {'name': 'NVIDIA A100', 'uuid': f'GPU-{address}',
                  'serial': address, 'memory_mb': 40960, 'events': True}
        for address in (gone, kept)})
    gpus = nvidia_gpu.NvidiaGPUDriver(conf, HOST, nvml=nvml)
    gpus.name = 'nvidia_gpu_driver'
    reporter, monitor = _agent(conf, metered, gpus)
    monitor.check_once()              # registers the GPUs' NVML events
    for address in (gone, kept):
        nvml.add_xid(address, 13)
    nvml.add_xid(gone, 79)
    monitor.check_once()
    monitor.sample_usage()
    assert _sample('cyborg_agent_device_healthy',
                   device='PCI:0000:d8:00.0') == 1
    assert _sample('cyborg_agent_gpu_last_fatal_xid_timestamp_seconds',
                   device='PCI:' + gone, xid='79')

    def driver_series(address):
        device = 'PCI:' + address
        return (metrics.REGISTRY.get_sample_value(
                    'cyborg_agent_xid_events_total',
                    {'device': device, 'xid': '13',
                     'severity': states.APPLICATION}),
                metrics.REGISTRY.get_sample_value(
                    'cyborg_agent_aer_errors',
                    {'device': device, 'kind': 'aer_nonfatal'}),
                metrics.REGISTRY.get_sample_value(
                    'cyborg_agent_aer_errors',
                    {'device': device, 'kind': 'aer_correctable'}))

    assert driver_series(gone) == driver_series(kept) == (1, 3, 7)
    metered.addresses = ()
    tree.remove_pci(gone)
    reporter.report_now()
    monitor.check_once()
    for name in ('cyborg_agent_device_healthy',
                 'cyborg_agent_device_utilization_ratio',
                 'cyborg_agent_device_memory_used_bytes'):
        assert metrics.REGISTRY.get_sample_value(
            name, {'device': 'PCI:0000:d8:00.0'}) is None
    assert driver_series(gone) == (None, None, None)
    assert not [sample for family in metrics.REGISTRY.collect()
                for sample in family.samples
                if sample.labels.get('device') == 'PCI:' + gone]
    assert driver_series(kept) == (1, 3, 7)
    # Back at the same address with the same AER counts: its AER series
    # are there again (the counts unchanged since they were last read).
    tree.add_pci(gone, *fake_sysfs.A100, driver='nvidia', numa_node=0)
    tree.set_aer(gone, fatal={}, nonfatal={'Completion Timeout': 3},
                 correctable={'Receiver Error': 7})
    reporter.report_now()
    monitor.check_once()
    assert driver_series(gone) == (None, 3, 7)


def test_temperature_power_and_clock_events_are_gauges(conf, conductor,
                                                       notifications):
    metered = MeteredDriver(conf, HOST)
    metered.values.update(temperature_celsius=61, power_watts=690.15,
                          clock_events=['sw_power_cap'])
    reporter, monitor = _agent(conf, metered)
    device = 'PCI:0000:d8:00.0'

    def clock(reason):
        return metrics.REGISTRY.get_sample_value(
            'cyborg_agent_device_clock_event_active',
            {'device': device, 'reason': reason})

    monitor.sample_usage()
    assert _sample('cyborg_agent_device_temperature_celsius',
                   device=device) == 61
    assert _sample('cyborg_agent_device_power_watts',
                   device=device) == 690.15
    assert (clock('sw_power_cap'), clock('gpu_idle')) == (1, None)
    [(_ctx, message, _priority, _retry)] = notifications()
    assert message['payload']['cyborg_object.version'] == '1.1'
    assert message['payload']['cyborg_object.data']['clock_events'] == [
        'sw_power_cap']
    # The cap lifts, the GPU idles: the reason seen before reads 0.
    metered.values.update(clock_events=['gpu_idle'])
    monitor.sample_usage()
    assert (clock('sw_power_cap'), clock('gpu_idle')) == (0, 1)
    # The device goes: every series of it goes too.
    monitor.check_once()
    metered.addresses = ()
    reporter.report_now()
    monitor.check_once()
    assert (clock('sw_power_cap'), clock('gpu_idle')) == (None, None)
    for name in ('cyborg_agent_device_temperature_celsius',
                 'cyborg_agent_device_power_watts'):
        assert metrics.REGISTRY.get_sample_value(
            name, {'device': device}) is None


def test_a_gpu_nvml_no_longer_reads_loses_its_usage_series(
        conf, conductor, tmp_path):
    """A GPU NVML can no longer read (lost, its driver unloaded, handed
    to vfio-pci) is left out of the usage sample: its utilization,
    temperature and clock event series go, rather than show the GPU
    hot and slowed down for good (an alert on hw_thermal_slowdown
    firing for ever); a query it stops answering loses its series
    alone.  Read again, they are back."""
    address = '0000:17:00.0'
    device = 'PCI:' + address
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(address, *fake_sysfs.A100, driver='nvidia', numa_node=0)
    conf.set_override('sysfs_root', tree.root, 'agent')
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {address: {
        'name': 'NVIDIA A100', 'uuid': 'GPU-1', 'serial': '1',
        'memory_mb': 40960, 'utilization': 90, 'temperature': 91,
        'power_mw': 300000, 'clock_events': ['hw_thermal_slowdown']}})
    gpus = nvidia_gpu.NvidiaGPUDriver(conf, HOST, nvml=nvml)
    gpus.name = 'nvidia_gpu_driver'
    _reporter, monitor = _agent(conf, gpus)

    def series():
        return (_sample('cyborg_agent_device_utilization_ratio',
                        device=device) or None,
                metrics.REGISTRY.get_sample_value(
                    'cyborg_agent_device_temperature_celsius',
                    {'device': device}),
                metrics.REGISTRY.get_sample_value(
                    'cyborg_agent_device_clock_event_active',
                    {'device': device, 'reason': 'hw_thermal_slowdown'}))

    monitor.sample_usage()
    assert series() == (0.9, 91, 1)
    nvml.update_gpu(address, temperature=None)
    monitor.sample_usage()
    assert series() == (0.9, None, 1)
    nvml.update_gpu(address, lost=True)
    monitor.check_once()
    assert device not in monitor.sample_usage()
    assert series() == (None, None, None)
    assert metrics.REGISTRY.get_sample_value(
        'cyborg_agent_device_memory_used_bytes', {'device': device}) is None
    nvml.update_gpu(address, lost=False, temperature=88)
    monitor.check_once()
    monitor.sample_usage()
    assert series() == (0.9, 88, 1)


def test_usage_series_go_while_their_sampling_fails(conf, conductor):
    metered = MeteredDriver(conf, HOST)
    _reporter, monitor = _agent(conf, metered)
    device = 'PCI:0000:d8:00.0'
    monitor.sample_usage()
    assert _sample('cyborg_agent_device_utilization_ratio',
                   device=device) == 0.25
    metered.values = None       # usage() raises: nothing is known
    monitor.sample_usage()
    assert metrics.REGISTRY.get_sample_value(
        'cyborg_agent_device_utilization_ratio', {'device': device}) is None
    metered.values = {'utilization': 0.5, 'memory_used_bytes': 1}
    monitor.sample_usage()
    assert _sample('cyborg_agent_device_utilization_ratio',
                   device=device) == 0.5


def test_check_and_reporter_metrics_are_recorded(conf, conductor, watched):
    checks = _sample('cyborg_agent_health_check_seconds_count')
    fatal = _sample('cyborg_agent_health_readings_total', severity='fatal')
    discoveries = _sample('cyborg_agent_discovery_seconds_count')
    reports = _sample('cyborg_agent_report_seconds_count')
    _reporter, monitor = _agent(conf, watched)
    watched.faults[KEY_A] = _fault(KEY_A)
    monitor.check_once()
    assert _sample('cyborg_agent_health_check_seconds_count') == checks + 1
    assert _sample('cyborg_agent_health_readings_total',
                   severity='fatal') == fatal + 1
    assert _sample('cyborg_agent_discovery_seconds_count') == discoveries + 1
    assert _sample('cyborg_agent_report_seconds_count') == reports + 1


# -- wiring ----------------------------------------------------------


def test_known_devices_come_from_the_cache_after_a_restart(conf, conductor,
                                                           watched):
    _agent(conf, watched)
    restarted = agent_reporter.Reporter(conf, HOST,
                                        {watched.name: watched},
                                        conductor_api=object())
    assert [d.key() for d in restarted.known_devices()] == [KEY_A, KEY_B]


@pytest.mark.parametrize('enabled', [True, False])
def test_the_agent_runs_a_monitor_only_when_health_is_on(conf, conductor,
                                                         enabled):
    conf.set_override('enabled', enabled, 'health')
    conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
    conf.set_override('hotplug', False, 'agent')
    services = agent_cmd.build_services(conf, HOST)
    kinds = [type(s) for s in services]
    monitors = [s for s in services
                if isinstance(s, agent_health.HealthMonitor)]
    manager = services[0]._server.dispatcher.endpoints[0]
    if enabled:
        # After the reporter: it starts after it and stops before it.
        assert kinds.index(agent_health.HealthMonitor) == \
            kinds.index(agent_reporter.Reporter) + 1
        assert manager.health_monitor is monitors[0]
        # One list of cards being programmed: the endpoints fill it, the
        # reports and the health checks read it.
        [reporter] = [s for s in services
                      if isinstance(s, agent_reporter.Reporter)]
        assert manager.programming is reporter.programming is \
            monitors[0].programming
    else:
        assert monitors == [] and manager.health_monitor is None


def test_stop_returns_promptly_while_the_conductor_hangs(conf, watched):
    """A conductor that never answers must not hold the agent's stop."""

    class Hanging:
        def __init__(self):
            self.release = threading.Event()

        def report_health(self, context, hostname, report):
            self.release.wait(30)

    hanging = Hanging()
    by_name = {watched.name: watched}
    known = watched.discover()
    monitor = agent_health.HealthMonitor(conf, HOST, by_name,
                                         lambda: known,
                                         conductor_api=hanging)
    monitor.start()
    time.sleep(0.2)
    started = time.monotonic()
    monitor.stop()
    assert time.monotonic() - started < 2
    hanging.release.set()


def test_an_event_kept_while_its_card_is_programmed_goes_once(
        conf, conductor, watched):
    """A card's readings are kept, as they were, while it is programmed:
    an event among them (an XID the check before read) was sent again at
    every check of the programming, each one more fault."""
    _reporter, monitor = _agent(conf, watched)
    monitor.check_once()
    assert monitor.send_once()
    watched.faults[KEY_A] = _fault(KEY_A, event=True)
    monitor.check_once()
    assert monitor.send_once()
    assert conductor.readings() == [(KEY_A, 'fatal', 'test')]
    reports = len(conductor.health_reports)
    with monitor.programming.alone(GPU_A):
        for _ in range(3):
            monitor.check_once()
            assert monitor.send_once()
    assert len(conductor.health_reports) == reports
