"""Health readings the agent could not send while the conductor was down,
against the real conductor (fake:// RPC, real Placement): the readings
kept are bounded per device, and what is dropped is what matters least."""

import json
import time

import sqlalchemy as sa

from cyborg.agent import health as agent_health
from cyborg.agent import reporter as agent_reporter
from cyborg.common import states
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.drivers import fake
from cyborg.drivers import loader
from cyborg.drivers import nvidia_gpu
from tests.fixtures import fake_nvml
from tests.fixtures import sysfs as fake_sysfs

HOST = fake_sysfs.HOST


def _device(engine):
    with engine.connect() as c:
        return c.execute(sa.select(models.Device.health,
                                   models.Device.health_reason)
                         .where(models.Device.hostname == HOST)).one()


# What a send waits for the conductor: each send while it is stopped
# waits this long, and a report on a busy 2-core machine may take more
# than 1 s to be answered (a test failed so).
RPC_TIMEOUT = 3


def _inject(conf, **values):
    with open(fake.health_file(conf), 'w') as f:
        json.dump(values, f)


def test_a_fatal_fault_outlasts_harmless_readings_of_an_outage(
        conf, tmp_path, conductor):
    """At most 16 unsent readings were kept per device, the oldest dropped
    whatever its severity: an application error coming and going while
    the conductor was down pushed the fatal fault out, and the full report
    after the outage only said what held then (ok): the device stayed
    healthy."""
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
    drivers = loader.load_drivers(conf, HOST)
    api = conductor_rpcapi.ConductorAPI(conf, timeout=RPC_TIMEOUT)
    reporter = agent_reporter.Reporter(conf, HOST, drivers,
                                       conductor_api=api)
    reporter.report_now()
    monitor = agent_health.HealthMonitor(conf, HOST, drivers,
                                         reporter.known_devices,
                                         conductor_api=api)
    monitor.check_once()
    assert monitor.send_once()
    assert _device(conductor.engine).health == states.HEALTHY

    conductor.stop()
    _inject(conf, severity='fatal', reason='XID 48: double bit ECC',
            code='xid:48')
    # No send is tried meanwhile: one that times out may still be
    # delivered once the conductor is back (fake:// keeps the message).
    monitor.check_once()
    for _ in range(agent_health.MAX_PENDING_PER_KEY):
        _inject(conf, severity='application', reason='XID 13: app',
                code='xid:13')
        monitor.check_once()
        _inject(conf, severity='ok')
        monitor.check_once()
    assert len(monitor._pending) == agent_health.MAX_PENDING_PER_KEY

    conductor.start()
    monitor._full_wanted = True
    assert monitor.send_once()
    assert tuple(_device(conductor.engine)) == (
        states.UNHEALTHY, 'XID 48: double bit ECC')


def _faults(engine):
    with engine.connect() as c:
        return c.execute(sa.select(models.Device.health,
                                   models.Device.health_faults)
                         .where(models.Device.hostname == HOST)).one()


def test_a_reading_delivered_late_and_re_sent_is_applied_once(
        conf, tmp_path, conductor):
    """The conductor away, the agent's sends of a transient fault time
    out and it sends the fault again; the sends that timed out are still
    delivered (fake:// keeps them, as RabbitMQ does a message not yet
    expired) once the conductor is back, beside the re-send that is
    answered: the one fault was counted once per delivery, and at the
    third (``suspect_threshold``) the device was out instead of suspect,
    a transition counted in the metrics and notified that no fault
    made."""
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
    drivers = loader.load_drivers(conf, HOST)
    api = conductor_rpcapi.ConductorAPI(conf, timeout=RPC_TIMEOUT)
    reporter = agent_reporter.Reporter(conf, HOST, drivers,
                                       conductor_api=api)
    reporter.report_now()
    monitor = agent_health.HealthMonitor(conf, HOST, drivers,
                                         reporter.known_devices,
                                         conductor_api=api)
    monitor.check_once()
    assert monitor.send_once()
    assert tuple(_faults(conductor.engine)) == (states.HEALTHY, 0)

    conductor.stop()
    _inject(conf, severity='transient', reason='PCIe link retrained',
            code='aer:nonfatal')
    monitor.check_once()
    assert not monitor.send_once()      # timed out: delivered later
    assert not monitor.send_once()
    conductor.start()
    assert monitor.send_once()
    # The sends that timed out are served too (in this process, on the
    # conductor's threads): give them the time.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert tuple(_faults(conductor.engine)) == (states.SUSPECT, 1)
        time.sleep(0.1)


def test_events_queued_before_the_first_report_count_one_by_one(
        conf, tmp_path, conductor):
    """An agent that has just started cannot reach the conductor yet,
    and its GPU delivers three transient XIDs meanwhile, each seen by a
    check of its own.  Its first report is a full one, and carried them
    all: the conductor took them for re-statements of one condition,
    one fault (suspect), where three events within the suspect window
    take the device out."""
    address = '0000:17:00.0'
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('enabled_drivers', ['nvidia_gpu_driver'], 'agent')
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(address, *fake_sysfs.A100, driver='nvidia', numa_node=0)
    conf.set_override('sysfs_root', tree.root, 'agent')
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {address: {
        'name': 'NVIDIA A100', 'uuid': 'GPU-1', 'serial': '1',
        'memory_mb': 40960, 'events': True}})
    drivers = {'nvidia_gpu_driver': nvidia_gpu.NvidiaGPUDriver(
        conf, HOST, nvml=nvml)}
    api = conductor_rpcapi.ConductorAPI(conf, timeout=RPC_TIMEOUT)
    reporter = agent_reporter.Reporter(conf, HOST, drivers,
                                       conductor_api=api)
    reporter.report_now()
    assert tuple(_faults(conductor.engine)) == (states.HEALTHY, 0)

    conductor.stop()
    monitor = agent_health.HealthMonitor(conf, HOST, drivers,
                                         reporter.known_devices,
                                         conductor_api=api)
    monitor.check_once()                # registers the GPU's events
    for _ in range(3):
        nvml.add_xid(address, 61)
        monitor.check_once()
    conductor.start()
    assert monitor.send_once()
    report = monitor.last_report
    assert report['full'] and monitor.reports_sent == 1
    assert [r['code'] for r in report['readings']].count('xid:61') == 3
    # Taken out by the count (an unhealthy row's health_faults then
    # counts its failed re-probes: none yet).
    health, reason = _device(conductor.engine)
    assert health == states.UNHEALTHY
    assert reason.startswith('3 transient faults within'), reason
