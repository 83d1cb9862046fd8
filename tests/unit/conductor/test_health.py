"""Health reports and timers end to end: a database, the real (embedded)
Placement, the conductor's real agent RPC client talking to an agent
endpoint over fake://, and oslo.messaging's own in-memory notifier."""

import contextlib
import copy
import datetime
import logging
import threading
import time
import uuid as uuidlib

import oslo_messaging as messaging
import prometheus_client as prom
import pytest
import requests
import sqlalchemy as sa
from oslo_messaging.notify import _impl_test as test_notifier

from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import notify
from cyborg.common import states
from cyborg.conductor import device_status
from cyborg.conductor import health, health_machine, inventory_apply
from cyborg.conductor import placement_sync
from cyborg.conductor import manager, metrics_collector, periodics
from cyborg.db import api as db_api
from cyborg.db.api import clock as clock_db
from cyborg.db.api import health as health_db
from cyborg.db.api import hosts as host_db
from cyborg.db import models
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf
from tests.fixtures import notifications as notification_fixture
from tests.fixtures.placement import placement  # noqa: F401
from tests.unit.conductor import agent_endpoint

HOST = 'host1'
GPU_KEY = 'PCI:0000:81:00.0'
GPU = 'host1_0000:81:00.0'
MIG_KEY = 'PCI:0000:3b:00.0'
MIGS = ('host1_0000:3b:00.0_mig0', 'host1_0000:3b:00.0_mig1')


def _mig_device():
    """A GPU split in two MIG instances: one device, two deployables."""
    device = cf.device(HOST, '0000:3b:00.0', rc='CUSTOM_MIG_1G_10GB',
                       suffix='mig0')
    second = copy.deepcopy(device.deployables[0])
    second.name = MIGS[1]
    for handle in second.attach_handles:
        handle.attach_info = dict(handle.attach_info, function='7')
    device.deployables.append(second)
    return device


def _devices():
    return [cf.device(HOST, '0000:81:00.0'), _mig_device()]


@pytest.fixture
def agent(conf):
    with agent_endpoint.serving(conf, HOST,
                                agent_endpoint.RecordingAgent()) as served:
        yield served


@pytest.fixture
def cn(conf, db, admin_context, placement, agent):  # noqa: F811
    """A reported, synced host; returns its compute node provider uuid."""
    pf.placement_conf(conf, placement.url)
    placement_client.reset_clients()
    conf.set_override('hold_down', 60, group='health')
    conf.set_override('probe_timeout', 30, group='health')
    cn_uuid = requests.post(placement.url + '/resource_providers',
                            json={'name': HOST}, headers=pf.HEADERS,
                            timeout=10).json()['uuid']
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    return cn_uuid


@pytest.fixture
def notifications(conf):
    """Notifications through oslo.messaging's in-memory 'test' driver;
    returns a callable listing (event type, priority, data) sent."""
    with notification_fixture.published(conf) as published:
        yield lambda: [(n[1]['event_type'], n[2],
                        n[1]['payload']['cyborg_object.data'])
                       for n in published()]


def _reading(device, severity, reason='', deployable=None, source='nvml'):
    return {'device': device, 'severity': severity, 'reason': reason,
            'deployable': deployable, 'source': source}


def _report(conf, ctx, *readings, full=False):
    return health.handle_report(conf, ctx, HOST, {
        'full': full, 'readings': list(readings)})


def _provider(placement, name):  # noqa: F811
    """(reserved of its one inventory, traits) of a provider."""
    rp = inventory.provider_uuid(name)
    invs = requests.get(f'{placement.url}/resource_providers/{rp}/'
                        'inventories', headers=pf.HEADERS,
                        timeout=10).json()['inventories']
    traits = requests.get(f'{placement.url}/resource_providers/{rp}/traits',
                          headers=pf.HEADERS, timeout=10).json()['traits']
    (inv,) = invs.values()
    return inv['reserved'], set(traits)


def _out(placement, name):  # noqa: F811
    reserved, traits = _provider(placement, name)
    return reserved > 0 and states.UNHEALTHY_TRAIT in traits


def _in(placement, name):  # noqa: F811
    reserved, traits = _provider(placement, name)
    return reserved == 0 and states.UNHEALTHY_TRAIT not in traits


def _health(engine, table, **where):
    t = models.Base.metadata.tables[table]
    query = sa.select(t.c.health, t.c.health_reason, t.c.health_due_at)
    for column, value in where.items():
        query = query.where(t.c[column] == value)
    with engine.connect() as conn:
        return conn.execute(query).one()


def _device_health(engine, key=GPU_KEY):
    return _health(engine, 'devices', uuid=inventory.row_uuid(HOST, key))


def _deployable_health(engine, name):
    return _health(engine, 'deployables', name=name)


def _age(engine, seconds):
    """Time passes: every pending health step is ``seconds`` nearer."""
    delta = datetime.timedelta(seconds=seconds)
    with engine.begin() as conn:
        for table in ('devices', 'deployables'):
            t = models.Base.metadata.tables[table]
            for row in conn.execute(sa.select(t.c.id, t.c.health_due_at)
                                    .where(t.c.health_due_at.is_not(None))):
                conn.execute(sa.update(t).where(t.c.id == row.id).values(
                    health_due_at=row.health_due_at - delta))


@contextlib.contextmanager
def _statements(engine):
    seen = []

    def _record(conn, cursor, statement, *args):
        seen.append(statement)
    sa.event.listen(engine, 'before_cursor_execute', _record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, 'before_cursor_execute', _record)


def _transitions(kind, old, new):
    return metrics.REGISTRY.get_sample_value(
        'cyborg_conductor_health_transitions_total',
        {'kind': kind, 'from_state': old, 'to_state': new}) or 0


def _probe_readmits(conf, ctx, engine, agent, placement, key,  # noqa: F811
                    name):
    """The agent was asked to re-probe device ``key`` (and only it); its
    good verdict re-admits deployable ``name``."""
    assert agent.probed.wait(10) and agent.probes == [[key]]
    _report(conf, ctx, _reading(key, states.OK, source='probe'))
    assert _deployable_health(engine, name).health == 'healthy'
    assert _in(placement, name)


# -- out and back in ----------------------------------------------------------

def test_fatal_fault_takes_the_provider_out_and_a_probe_brings_it_back(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    before = _transitions('device', 'healthy', 'unhealthy')
    reply = _report(conf, admin_context,
                    _reading(GPU_KEY, states.FATAL, 'XID 79'))
    assert reply == {'accepted': 1}
    assert _device_health(db)[:2] == ('unhealthy', 'XID 79')
    assert _out(placement, GPU)
    assert all(_in(placement, name) for name in MIGS)
    assert _transitions('device', 'healthy', 'unhealthy') == before + 1
    # Well again: the hold-down starts, still out, no Placement change.
    _report(conf, admin_context, _reading(GPU_KEY, states.OK))
    assert _device_health(db).health_due_at is not None
    assert health.run_timers(conf, admin_context) == 0
    # The hold-down ends: probing (still out), the agent is asked.
    _age(db, 61)
    assert health.run_timers(conf, admin_context) == 1
    assert _device_health(db).health == 'probing'
    assert agent.probed.wait(10) and agent.probes == [[GPU_KEY]]
    assert _out(placement, GPU)
    # The probe's verdict re-admits it.
    _report(conf, admin_context,
            _reading(GPU_KEY, states.OK, source='probe'))
    assert _device_health(db) == ('healthy', None, None)
    assert _in(placement, GPU)
    assert host_db.get(admin_context, HOST)['placement_synced']


def test_no_probe_verdict_in_time_means_unhealthy_again(
        conf, db, admin_context, cn, placement):  # noqa: F811
    _report(conf, admin_context, _reading(GPU_KEY, states.FATAL, 'x'))
    _report(conf, admin_context, _reading(GPU_KEY, states.OK))
    _age(db, 61)
    health.run_timers(conf, admin_context)
    _age(db, 31)
    health.run_timers(conf, admin_context)
    now = _device_health(db)
    assert now[:2] == ('unhealthy', 'no re-probe verdict within 30 s')
    # Its next re-probe is scheduled (a hold-down from now).
    assert now.health_due_at is not None
    assert _out(placement, GPU)


# -- the operator vouches for a device (enables it) ---------------------------

GPU_DEV = inventory.row_uuid(HOST, GPU_KEY)
MIG_DEV = inventory.row_uuid(HOST, MIG_KEY)


def _flaps(engine, uuid):
    d = models.Device.__table__
    with engine.connect() as conn:
        return conn.execute(sa.select(d.c.health_flaps)
                            .where(d.c.uuid == uuid)).scalar_one()


def test_enabling_an_unhealthy_device_re_probes_it_now(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    # A flapping card: its next hold-down would be long.
    conf.set_override('max_hold_down', 86400, group='health')
    _report(conf, admin_context, _reading(GPU_KEY, states.FATAL, 'XID 79'))
    _report(conf, admin_context, _reading(GPU_KEY, states.OK))
    with db.begin() as conn:
        conn.execute(sa.update(models.Device.__table__)
                     .where(models.Device.__table__.c.uuid == GPU_DEV)
                     .values(health_flaps=6,
                             health_readmitted_at=sa.func.now()))
    before = _transitions('device', 'unhealthy', 'probing')
    # The operator repaired (or replaced) it and enables it: it is
    # re-probed at once, still out of the schedule until the verdict.
    device_status.set_status(conf, admin_context, GPU_DEV, states.ENABLED)
    health_now = _device_health(db)
    assert health_now[:2] == ('probing', 'XID 79')
    assert health_now.health_due_at is not None
    assert agent.probed.wait(10) and agent.probes == [[GPU_KEY]]
    assert _transitions('device', 'unhealthy', 'probing') == before + 1
    assert _out(placement, GPU)
    _report(conf, admin_context,
            _reading(GPU_KEY, states.OK, source='probe'))
    assert _device_health(db) == ('healthy', None, None)
    assert _in(placement, GPU)
    # Its flap history was forgotten: this is its first re-admission.
    assert _flaps(db, GPU_DEV) == 1


def test_a_device_still_broken_when_enabled_fails_its_probe(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    _report(conf, admin_context, _reading(GPU_KEY, states.FATAL, 'XID 79'))
    device_status.set_status(conf, admin_context, GPU_DEV, states.ENABLED)
    assert agent.probed.wait(10) and agent.probes == [[GPU_KEY]]
    _report(conf, admin_context,
            _reading(GPU_KEY, states.FATAL, 'XID 79 again', source='probe'))
    assert _device_health(db)[:2] == ('unhealthy', 'XID 79 again')
    assert _out(placement, GPU)


def test_enabling_a_device_with_a_failed_partition_re_probes_it(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    _report(conf, admin_context, _reading(MIG_KEY, states.FATAL, 'XID 95',
                                          deployable=MIGS[0]))
    device_status.set_status(conf, admin_context, MIG_DEV, states.ENABLED)
    assert _deployable_health(db, MIGS[0]).health == 'probing'
    assert _deployable_health(db, MIGS[1]).health == 'healthy'
    assert _device_health(db, MIG_KEY).health == 'healthy'
    _probe_readmits(conf, admin_context, db, agent, placement, MIG_KEY,
                    MIGS[0])


def test_a_device_s_failed_re_probe_fails_its_deployables_probed_with_it(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    """The device and a partition of it, both out, are re-probed by one
    request; the device's fault verdict is the partition's too (it has
    none of its own): both fail at once and are re-probed again at the
    same time, rather than the partition waiting for its probe timeout
    (and a re-probe later than its device's)."""
    _report(conf, admin_context, _reading(MIG_KEY, states.FATAL, 'XID 48'),
            _reading(MIG_KEY, states.FATAL, 'XID 95', deployable=MIGS[0]))
    device_status.set_status(conf, admin_context, MIG_DEV, states.ENABLED)
    assert agent.probed.wait(10) and agent.probes == [[MIG_KEY]]
    assert _deployable_health(db, MIGS[0]).health == 'probing'
    _report(conf, admin_context, _reading(MIG_KEY, states.FATAL,
                                          'XID 48 again', source='probe'))
    device = _device_health(db, MIG_KEY)
    assert device[:2] == ('unhealthy', 'XID 48 again')
    partition = _deployable_health(db, MIGS[0])
    assert partition[:2] == (
        'unhealthy', "its device's re-probe verdict: XID 48 again")
    assert partition.health_due_at == device.health_due_at
    # Its sibling, not probed, keeps its own record (out by its device).
    assert _deployable_health(db, MIGS[1])[:2] == ('healthy', None)
    assert all(_out(placement, name) for name in MIGS)
    # Nothing is left to time out (the partition's probe timeout, 30 s,
    # is past); both are re-probed after the wait (60 s).
    _age(db, 50)
    assert health.run_timers(conf, admin_context) == 0
    _age(db, 11)
    assert health.run_timers(conf, admin_context) == 2
    assert {_deployable_health(db, MIGS[0]).health,
            _device_health(db, MIG_KEY).health} == {'probing'}


def test_only_enabling_an_unhealthy_device_re_probes_it(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    # An instance holds the GPU (so that it is kept when it vanishes).
    pf.hold_allocation(placement.url, pf.PROJECT,
                       {inventory.provider_uuid(GPU): {'PGPU': 1}})
    # Healthy or suspect: nothing to re-probe, no health write.
    _report(conf, admin_context, _reading(GPU_KEY, states.TRANSIENT, 'ecc'))
    with _statements(db) as seen:
        device_status.set_status(conf, admin_context, GPU_DEV,
                                 states.ENABLED)
    assert not [s for s in seen if 'health' in s and
                s.lstrip().upper().startswith('UPDATE')]
    assert _device_health(db).health == 'suspect'
    # Disabling an unhealthy device does not re-probe it either.
    _report(conf, admin_context, _reading(GPU_KEY, states.FATAL, 'XID 79'))
    device_status.set_status(conf, admin_context, GPU_DEV,
                             states.MAINTAINING)
    assert _device_health(db).health == 'unhealthy'
    # Lost hardware has nothing to probe: it stays lost.
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()[1:]))
    device_status.set_status(conf, admin_context, GPU_DEV, states.ENABLED)
    assert _device_health(db).health == 'lost'
    assert not agent.probed.wait(0.5) and agent.probes == []


def test_application_fault_changes_nothing_and_costs_no_write(
        conf, db, admin_context, cn, placement):  # noqa: F811
    client = placement_client.get_client(conf)
    calls = client.calls
    with _statements(db) as seen:
        reply = _report(conf, admin_context,
                        _reading(GPU_KEY, states.APPLICATION, 'XID 13'))
    assert reply == {'accepted': 1}
    assert all(s.lstrip().upper().startswith('SELECT') for s in seen), seen
    assert client.calls == calls
    assert _device_health(db).health == 'healthy' and _in(placement, GPU)


def test_unchanged_readings_cost_no_write_and_no_placement_call(
        conf, db, admin_context, cn, placement):  # noqa: F811
    snapshot = [_reading(GPU_KEY, states.FATAL, 'XID 79'),
                _reading(MIG_KEY, states.OK)]
    _report(conf, admin_context, *snapshot, full=True)
    client = placement_client.get_client(conf)
    calls = client.calls
    with _statements(db) as seen:
        assert _report(conf, admin_context, *snapshot,
                       full=True) == {'accepted': 2}
    assert len(seen) == 2, seen
    assert all(s.lstrip().upper().startswith('SELECT') for s in seen)
    assert client.calls == calls


def test_transient_faults_make_a_device_suspect_then_unhealthy(
        conf, db, admin_context, cn, placement):  # noqa: F811
    client = placement_client.get_client(conf)
    calls = client.calls
    _report(conf, admin_context, _reading(GPU_KEY, states.TRANSIENT, 'e1'))
    assert _device_health(db).health == 'suspect'
    # Suspect is still schedulable: Placement was not even asked.
    assert client.calls == calls and _in(placement, GPU)
    _report(conf, admin_context,
            _reading(GPU_KEY, states.TRANSIENT, 'e2'),
            _reading(GPU_KEY, states.TRANSIENT, 'e3'))
    assert _device_health(db).health == 'unhealthy' and _out(placement,
                                                             GPU)


def test_suspect_device_is_healthy_after_a_quiet_window(
        conf, db, admin_context, cn):
    _report(conf, admin_context, _reading(GPU_KEY, states.TRANSIENT, 'e1'))
    _age(db, 301)
    assert health.run_timers(conf, admin_context) == 1
    assert _device_health(db) == ('healthy', None, None)


# -- devices and their deployables ------------------------------------------

def test_device_fault_takes_every_deployable_of_it_out(
        conf, db, admin_context, cn, placement):  # noqa: F811
    _report(conf, admin_context, _reading(MIG_KEY, states.FATAL, 'XID 48'))
    assert all(_out(placement, name) for name in MIGS)
    assert _in(placement, GPU)
    # Each deployable's own record stays healthy: the device is the cause.
    assert _device_health(db, MIG_KEY).health == 'unhealthy'
    assert {_deployable_health(db, n).health for n in MIGS} == {'healthy'}


def test_partition_fault_takes_only_it_out_and_its_device_probe_readmits(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    conf.set_override('hold_down', 0, group='health')
    _report(conf, admin_context, _reading(MIG_KEY, states.FATAL, 'XID 95',
                                          deployable=MIGS[0]))
    assert _out(placement, MIGS[0]) and _in(placement, MIGS[1])
    assert _device_health(db, MIG_KEY).health == 'healthy'
    # A good device-level reading counts for the partition: with no
    # hold-down it is re-probed at once, through its device.
    _report(conf, admin_context, _reading(MIG_KEY, states.OK))
    assert _deployable_health(db, MIGS[0]).health == 'probing'
    _probe_readmits(conf, admin_context, db, agent, placement, MIG_KEY,
                    MIGS[0])


def test_partition_still_faulty_is_not_readmitted_by_its_device(
        conf, db, admin_context, cn, placement):  # noqa: F811
    conf.set_override('hold_down', 0, group='health')
    fault = _reading(MIG_KEY, states.FATAL, 'XID 95', deployable=MIGS[0])
    _report(conf, admin_context, fault)
    _report(conf, admin_context, fault, _reading(MIG_KEY, states.OK))
    assert _deployable_health(db, MIGS[0]).health == 'unhealthy'
    assert _out(placement, MIGS[0])


# -- reports ----------------------------------------------------------------

def test_unknown_devices_are_skipped(conf, db, admin_context, cn):
    reply = _report(conf, admin_context,
                    _reading('PCI:0000:99:00.0', states.FATAL),
                    _reading(GPU_KEY, states.FATAL, deployable='nope'),
                    _reading(GPU_KEY, states.OK))
    assert reply == {'accepted': 1}
    assert health.handle_report(conf, admin_context, 'other-host', {
        'full': True, 'readings': [_reading(GPU_KEY, states.FATAL)]}) == {
        'accepted': 0}
    assert _device_health(db).health == 'healthy'


def test_readings_of_a_newer_agent_apply_what_is_understood(
        conf, db, admin_context, cn, caplog):
    """An unknown severity skips that reading (one WARNING), an unknown
    field is ignored: the rest of the report applies."""
    newer = dict(_reading(GPU_KEY, states.FATAL, 'XID 79'),
                 temperature_c=91)
    reply = _report(conf, admin_context,
                    {'device': GPU_KEY, 'severity': 'degraded-2030'}, newer)
    assert reply == {'accepted': 1}
    assert _device_health(db).health == 'unhealthy'
    warnings = [r for r in caplog.records if r.levelname == 'WARNING'
                and 'degraded-2030' in r.getMessage()]
    assert len(warnings) == 1


def test_a_full_report_re_states_conditions_not_new_events():
    """A full report re-states what holds, except what the agent tells
    for the first time in it: the events it numbered (queued before its
    first report, while the conductor could not be reached) and probe
    verdicts.  An event without a number is its last check re-stated
    (sent before as a change), or an older agent's."""
    event = dict(_reading(GPU_KEY, states.TRANSIENT, 'XID 61'), event=True)
    condition = _reading(GPU_KEY, states.TRANSIENT, 'row remap pending')
    verdict = _reading(GPU_KEY, states.TRANSIENT, 'not yet', source='probe')
    readings = [dict(event, seq=1), dict(condition, seq=2),
                dict(verdict, seq=3), event, condition, verdict]
    full = health.parse_report({'full': True, 'readings': readings})
    assert [r.restated for r in full] == [False, True, False, True, True,
                                          False]
    change = health.parse_report({'full': False, 'readings': readings})
    assert not any(r.restated for r in change)
    # Five such events are five faults, not one (three take it out).
    record = health_machine.step(
        health_machine.Record(),
        health.parse_report({'full': True, 'sender': 'a',
                             'readings': [dict(event, seq=n)
                                          for n in range(1, 6)]}),
        datetime.datetime(2024, 1, 1), health_machine.Settings())
    assert record.health == states.UNHEALTHY
    assert record.reason.startswith('3 transient faults')


@pytest.mark.parametrize('report', [
    None, {'full': True}, {'readings': 'x'},
    {'readings': [{'severity': 'ok'}]},
    {'readings': [_reading(GPU_KEY, states.FATAL), 7]},
    {'readings': [{'device': 3, 'severity': 'ok'}]},
])
def test_malformed_report_is_invalid_and_writes_nothing(
        conf, db, admin_context, cn, report):
    with pytest.raises(exception.Invalid):
        health.handle_report(conf, admin_context, HOST, report)
    assert _device_health(db).health == 'healthy'


def test_endpoint_answers_and_refuses_quietly(conf, db, admin_context, cn):
    endpoint = manager.ConductorManager(conf, 'c1')
    assert endpoint.report_health(admin_context, HOST, {
        'full': False, 'readings': [_reading(GPU_KEY, states.OK)]}) == {
        'accepted': 1}
    with pytest.raises(messaging.ExpectedException):
        endpoint.report_health(admin_context, HOST, {'readings': None})


def test_a_report_of_a_row_moved_on_meanwhile_is_evaluated_again(
        conf, db, admin_context, cn):
    # What a second conductor's guarded write meets when the first one
    # won: the old state is not there any more, nothing is updated.
    uuid = inventory.row_uuid(HOST, GPU_KEY)
    with db_api.writer.using(admin_context):
        assert health_db.write(admin_context, 'devices', [
            {'uuid': uuid, 'old_health': 'suspect', 'old_due_at': None,
             'health': 'unhealthy'}]) == 0
        assert health_db.write(admin_context, 'devices', [
            {'uuid': uuid, 'old_health': 'healthy', 'old_due_at': None,
             'health': 'suspect', 'health_faults': 1}]) == 1
    assert _device_health(db).health == 'suspect'


# -- notifications ------------------------------------------------------------

def _bound_arq(engine, name, instance, project='p1'):
    profile = seed.seed_profile(engine, [{'resources:PGPU': '1'}])
    t = models.Base.metadata.tables
    with engine.begin() as conn:
        profile_id = conn.execute(
            sa.select(t['device_profiles'].c.id)
            .where(t['device_profiles'].c.uuid == profile)).scalar()
        dep_id = conn.execute(sa.select(t['deployables'].c.id).where(
            t['deployables'].c.name == name)).scalar()
        arq = str(uuidlib.uuid4())
        conn.execute(sa.insert(t['extended_accelerator_requests']).values(
            uuid=arq, state='Bound', device_profile_id=profile_id,
            device_profile_group_id=0, project_id=project, hostname=HOST,
            device_rp_uuid=inventory.provider_uuid(name),
            instance_uuid=instance, deployable_id=dep_id))
    return arq


def test_health_change_notifies_with_the_instances_concerned(
        conf, db, admin_context, cn, notifications):
    instance = str(uuidlib.uuid4())
    arq = _bound_arq(db, MIGS[1], instance)
    _report(conf, admin_context, _reading(MIG_KEY, states.FATAL, 'XID 48'))
    (sent,) = notifications()
    event, priority, data = sent
    assert (event, priority) == ('device.health_change', 'ERROR')
    assert data['host'] == HOST and data['device_key'] == MIG_KEY
    assert data['device_uuid'] == inventory.row_uuid(HOST, MIG_KEY)
    assert (data['old_health'], data['health'], data['reason']) == (
        'healthy', 'unhealthy', 'XID 48')
    assert data['deployable_uuid'] is None
    assert [(d['name'], d['health']) for d in data['deployables']] == [
        (MIGS[0], 'unhealthy'), (MIGS[1], 'unhealthy')]
    assert [a['uuid'] for a in data['arqs']] == [arq]
    assert data['instance_uuids'] == [instance]
    assert data['project_ids'] == ['p1']
    # Unchanged: nothing more is said.
    _report(conf, admin_context, _reading(MIG_KEY, states.FATAL, 'XID 48'))
    assert len(notifications()) == 1


def test_nothing_is_notified_when_notifications_are_off(
        conf, db, admin_context, cn):
    notify.reset()
    test_notifier.reset()
    _report(conf, admin_context, _reading(GPU_KEY, states.FATAL, 'x'))
    assert test_notifier.NOTIFICATIONS == []


# -- the periodic job ---------------------------------------------------------

def test_job_intervals_name_their_option_group(conf):
    conf.set_override('tick_interval', 0.5, group='health')
    assert periodics.interval_of(conf, 'health.tick_interval') == 0.5
    assert periodics.interval_of(conf, 'reconcile_interval') == \
        conf.conductor.reconcile_interval
    for _name, option, path in periodics.JOBS:
        assert periodics.interval_of(conf, option) is not None
        assert callable(periodics._load(path))


def test_each_host_s_timers_run_at_its_own_time(
        conf, db, admin_context, cn, placement):  # noqa: F811
    # Two hosts whose suspect devices are due back to healthy: the second
    # host's step is taken, and stamped, when its turn comes, not when
    # the pass began (the hosts before it may take long: a Placement
    # sync each).
    other = 'host2'
    inventory_apply.handle_report(conf, admin_context, other, cf.report(
        [cf.device(other, '0000:81:00.0')]))
    for hostname in (HOST, other):
        health.handle_report(conf, admin_context, hostname, {
            'full': False,
            'readings': [_reading(GPU_KEY, states.TRANSIENT, 'ecc')]})
    _age(db, 301)
    assert health.run_timers(conf, admin_context) == 2
    stamps = {}
    for hostname in (HOST, other):
        row = _health(db, 'devices', uuid=inventory.row_uuid(hostname,
                                                            GPU_KEY))
        assert row.health == 'healthy'
        t = models.Device.__table__
        with db.connect() as conn:
            stamps[hostname] = conn.execute(
                sa.select(t.c.health_updated_at).where(
                    t.c.hostname == hostname,
                    t.c.uuid == inventory.row_uuid(hostname, GPU_KEY))
            ).scalar_one()
    assert stamps[HOST] < stamps[other]


def test_periodic_runner_applies_the_health_timers(
        conf, db, admin_context, cn, placement):  # noqa: F811
    conf.set_override('tick_interval', 0.1, group='health')
    _report(conf, admin_context, _reading(GPU_KEY, states.TRANSIENT, 'e'))
    _age(db, 301)
    jobs = [job for job in periodics.JOBS if job[0] == 'health_timers']
    runner = periodics.PeriodicRunner(conf, jobs)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while _device_health(db).health != 'healthy':
            assert time.monotonic() < deadline, 'the timers did not run'
            time.sleep(0.1)
    finally:
        runner.stop()
        runner.wait()


# -- hardware lost and back ---------------------------------------------------

def test_vanished_allocated_hardware_is_lost_and_comes_back_unhealthy(
        conf, db, admin_context, cn, placement, agent,  # noqa: F811
        notifications, caplog):
    gpu_rp = inventory.provider_uuid(GPU)
    pf.hold_allocation(placement.url, pf.PROJECT, {gpu_rp: {'PGPU': 1}})
    before = {kind: _transitions(kind, 'healthy', 'lost')
              for kind in ('device', 'deployable')}
    with caplog.at_level(logging.INFO):
        inventory_apply.handle_report(conf, admin_context, HOST,
                                      cf.report(_devices()[1:]))
    # The whole device vanished: it is lost, as its deployable is.
    assert _deployable_health(db, GPU).health == 'lost'
    assert _device_health(db)[:2] == ('lost', health_machine.LOST_REASON)
    assert _out(placement, GPU)
    assert {kind: _transitions(kind, 'healthy', 'lost') - before[kind]
            for kind in before} == {'device': 1, 'deployable': 1}
    said = [r.getMessage() for r in caplog.records
            if r.getMessage().startswith('Health of ')]
    assert said == [
        f'Health of device {inventory.row_uuid(HOST, GPU_KEY)} on {HOST}: '
        f'healthy -> lost ({health_machine.LOST_REASON})',
        f'Health of deployable {GPU} on {HOST}: healthy -> lost '
        f'({health_machine.LOST_REASON})']
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    assert _deployable_health(db, GPU)[:2] == ('unhealthy',
                                               'came back; re-probing')
    assert _device_health(db)[:2] == ('unhealthy', 'came back; re-probing')
    assert _out(placement, GPU)
    assert [(e, d['health'], d['deployable_name'])
            for e, _p, d in notifications()] == [
        ('device.health_change', 'lost', None),
        ('device.health_change', 'lost', GPU),
        ('device.health_change', 'unhealthy', None),
        ('device.health_change', 'unhealthy', GPU)]
    # Then it is re-admitted like any failed device: its device's good
    # reading starts the hold-down, the probe decides.
    _report(conf, admin_context, _reading(GPU_KEY, states.OK))
    _age(db, 61)
    health.run_timers(conf, admin_context)
    assert agent.probed.wait(10) and agent.probes == [[GPU_KEY]]
    _report(conf, admin_context,
            _reading(GPU_KEY, states.OK, source='probe'))
    assert _deployable_health(db, GPU).health == 'healthy'
    assert _device_health(db).health == 'healthy'
    assert _in(placement, GPU)
    # Lost and back are told in the shape every health change has.
    changes = [d for e, _p, d in notifications()
               if e == 'device.health_change']
    assert len({frozenset(d) for d in changes}) == 1, changes
    device_lost, lost = changes[:2]
    assert (lost['device_key'], lost['deployable_name'],
            lost['old_health'], lost['health']) == (GPU_KEY, GPU, 'healthy',
                                                    'lost')
    assert [d['health'] for d in lost['deployables']] == ['lost']
    assert (device_lost['device_key'], device_lost['old_health'],
            device_lost['health']) == (GPU_KEY, 'healthy', 'lost')
    assert [(d['name'], d['health'])
            for d in device_lost['deployables']] == [(GPU, 'lost')]


def test_lost_hardware_back_on_a_host_sending_no_readings_is_re_probed(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    # The host's agent has [health]enabled = false: it sends no reading,
    # so none starts the hold-down of hardware that came back.  Its
    # return does, with the conductor's [health] settings, and the
    # re-probe at its end (which such an agent still answers) decides.
    conf.set_override('hold_down', 120, group='health')
    gpu_rp = inventory.provider_uuid(GPU)
    pf.hold_allocation(placement.url, pf.PROJECT, {gpu_rp: {'PGPU': 1}})
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()[1:]))
    assert _device_health(db).health == 'lost'
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    assert _device_health(db)[:2] == ('unhealthy', 'came back; re-probing')
    assert _deployable_health(db, GPU)[:2] == ('unhealthy',
                                               'came back; re-probing')
    assert _out(placement, GPU)
    _age(db, 100)
    assert health.run_timers(conf, admin_context) == 0
    assert not agent.probes
    _age(db, 21)
    assert health.run_timers(conf, admin_context) == 2
    assert _device_health(db).health == 'probing'
    _probe_readmits(conf, admin_context, db, agent, placement, GPU_KEY, GPU)
    assert _device_health(db).health == 'healthy'


def test_a_failed_re_probe_on_a_host_sending_no_readings_is_re_probed(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    """An agent with [health]enabled = false sends no reading: a re-probe
    that gets no verdict (the agent restarting, the broker away, as it
    was asked) is re-probed again by itself, each wait longer than the
    one before, and a good verdict then re-admits the device, no admin
    needed."""
    gpu_rp = inventory.provider_uuid(GPU)
    pf.hold_allocation(placement.url, pf.PROJECT, {gpu_rp: {'PGPU': 1}})
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()[1:]))
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    assert _device_health(db)[:2] == ('unhealthy', 'came back; re-probing')
    _age(db, 61)
    before = _transitions('device', 'unhealthy', 'probing')
    for attempt, wait in enumerate((60, 120), start=1):
        # The device and its deployable (both came back): probed.
        assert health.run_timers(conf, admin_context) == 2
        assert _device_health(db).health == 'probing'
        assert agent.probed.wait(10)
        assert agent.probes == [[GPU_KEY]] * attempt
        agent.probed.clear()
        # No verdict within [health]probe_timeout (30 s): out again.
        _age(db, 31)
        assert health.run_timers(conf, admin_context) == 2
        assert _device_health(db)[:2] == ('unhealthy',
                                          'no re-probe verdict within 30 s')
        assert _out(placement, GPU)
        # Re-probed again after the wait, readings or not.
        _age(db, wait - 1)
        assert health.run_timers(conf, admin_context) == 0
        _age(db, 2)
    assert health.run_timers(conf, admin_context) == 2
    assert agent.probed.wait(10) and agent.probes == [[GPU_KEY]] * 3
    assert _transitions('device', 'unhealthy', 'probing') == before + 3
    # The agent answers this one: the device works.
    _report(conf, admin_context,
            _reading(GPU_KEY, states.OK, source='probe'))
    assert _device_health(db) == ('healthy', None, None)
    assert _deployable_health(db, GPU).health == 'healthy'
    assert _in(placement, GPU)


def _rows_of(engine, table, **where):
    t = models.Base.metadata.tables[table]
    query = sa.select(sa.func.count()).select_from(t)
    for column, value in where.items():
        query = query.where(t.c[column] == value)
    with engine.connect() as conn:
        return conn.execute(query).scalar()


@pytest.mark.parametrize('failing', [False, True])
def test_hardware_seen_vanishing_by_the_health_check_first(
        conf, db, admin_context, cn, placement, failing):  # noqa: F811
    # The agent's health check notices the function went (a gone reading)
    # before its inventory report says so.  A device that was healthy
    # until then goes at once, nothing being allocated; one that was
    # failing is remembered, with why it was failing.
    if failing:
        _report(conf, admin_context,
                _reading(GPU_KEY, states.FATAL, 'XID 79'))
    _report(conf, admin_context, _reading(
        GPU_KEY, states.GONE, 'PCI function 0000:81:00.0 disappeared',
        source='pci'))
    assert _device_health(db).health == 'unhealthy'
    assert _out(placement, GPU)
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()[1:]))
    if not failing:
        assert _rows_of(db, 'deployables', name=GPU) == 0
        assert _rows_of(db, 'devices',
                        uuid=inventory.row_uuid(HOST, GPU_KEY)) == 0
        assert requests.get(
            placement.url + '/resource_providers/'
            + inventory.provider_uuid(GPU), headers=pf.HEADERS,
            timeout=10).status_code == 404
        return
    reason = ('the hardware vanished while not healthy (unhealthy: '
              'XID 79; then the device vanished or its driver was unbound: '
              'PCI function 0000:81:00.0 disappeared)')
    assert _deployable_health(db, GPU)[:2] == ('lost', reason)
    assert _device_health(db)[:2] == ('lost', reason)
    assert _out(placement, GPU)


# -- devices kept across a vanishing, and devices still here ----------------

def _status(engine, uuid):
    d = models.Device.__table__
    with engine.connect() as conn:
        return conn.execute(sa.select(d.c.status)
                            .where(d.c.uuid == uuid)).scalar_one_or_none()


def _forgotten_after_max_hold_down(conf, engine):
    """Time passes: what vanished did so longer than max_hold_down ago."""
    long_ago = clock_db.utcnow() - datetime.timedelta(
        seconds=conf.health.max_hold_down + 1)
    with engine.begin() as conn:
        for table in ('devices', 'deployables'):
            t = models.Base.metadata.tables[table]
            conn.execute(sa.update(t).where(t.c.health == 'lost')
                         .values(health_updated_at=long_ago))


INSTANCE = '5ab2b9a0-1b7e-4d6b-9a5c-2d3c2f0f0a01'


def test_a_still_reported_device_outlives_its_last_gone_deployable(
        conf, db, admin_context, cn, placement, agent):  # noqa: F811
    # An instance holds MIG instance 0; the GPU fails (XID 79) and the
    # operator disables it.
    pf.hold_allocation(placement.url, INSTANCE, {
        inventory.provider_uuid(MIGS[0]): {'CUSTOM_MIG_1G_10GB': 1}})
    _report(conf, admin_context, _reading(MIG_KEY, states.FATAL, 'XID 79'))
    device_status.set_status(conf, admin_context, MIG_DEV,
                             states.MAINTAINING)
    # The GPU is reset: still there, in MIG mode, with no MIG instance
    # (nvidia_gpu then reports no deployable).  The held one is kept.
    gpu, mig = _devices()
    mig.deployables = []
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report([gpu, mig]))
    assert _deployable_health(db, MIGS[0]).health == 'lost'
    # The instance is deleted: its deployable goes, its device does not.
    pf.hold_allocation(placement.url, INSTANCE, {})
    assert placement_sync.drop_released_gone(conf, admin_context) == 1
    assert _rows_of(db, 'deployables', name=MIGS[0]) == 0
    assert _rows_of(db, 'devices', uuid=MIG_DEV) == 1
    assert _device_health(db, MIG_KEY)[:2] == ('unhealthy', 'XID 79')
    assert _status(db, MIG_DEV) == states.MAINTAINING
    placement_sync.reconcile_host(conf, admin_context, HOST)
    assert _rows_of(db, 'devices', uuid=MIG_DEV) == 1
    # Nothing changed for the agent: its readings are still of a device
    # the conductor knows.
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.unchanged([gpu, mig]))
    assert reply['need_full'] is False
    assert _report(conf, admin_context, _reading(
        MIG_KEY, states.FATAL, 'still XID 79')) == {'accepted': 1}
    # MIG instances made again: the GPU is still the failed one under
    # maintenance, not a new, healthy, enabled device.
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    assert _device_health(db, MIG_KEY).health == 'unhealthy'
    assert _status(db, MIG_DEV) == states.MAINTAINING
    assert _out(placement, MIGS[0]) and _out(placement, MIGS[1])


@pytest.mark.parametrize('new_status, operators', [
    (states.ENABLED, states.MAINTAINING),
    (states.MAINTAINING, states.ENABLED)])
def test_a_device_that_drops_off_and_returns_keeps_its_operators_status(
        conf, db, admin_context, cn, placement, agent,  # noqa: F811
        new_status, operators):
    # The operator disabled the GPU for maintenance (or, where new devices
    # wait for an admin, enabled it), then it is reset: a driver reload,
    # a PCI remove and rescan, a reseat.  Nothing holds it, it is healthy.
    conf.set_override('new_device_status', new_status, group='conductor')
    if operators == states.MAINTAINING:
        device_status.set_status(conf, admin_context, GPU_DEV, operators)
    assert _status(db, GPU_DEV) == operators
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()[1:]))
    reason = f'the hardware vanished while its device was {operators}'
    assert _device_health(db)[:2] == ('lost', reason)
    assert _deployable_health(db, GPU)[:2] == ('lost', reason)
    assert _out(placement, GPU)
    # Counted lost; apart, when the operator took it out (a card pulled
    # for repair raises no alert: cyborg-alerts.yaml subtracts them).
    registry = prom.CollectorRegistry()
    registry.register(metrics_collector.ConductorCollector())
    assert registry.get_sample_value('cyborg_conductor_devices',
                                     {'health': 'lost'}) == 1
    assert registry.get_sample_value(
        'cyborg_conductor_maintained_devices', {'health': 'lost'}) == (
        operators == states.MAINTAINING)
    # Kept, though nothing is allocated.
    assert placement_sync.drop_released_gone(conf, admin_context) == 0
    placement_sync.reconcile_host(conf, admin_context, HOST)
    assert _rows_of(db, 'devices', uuid=GPU_DEV) == 1
    # Back: in the operator's status, re-probed before it is trusted.
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    assert _status(db, GPU_DEV) == operators
    assert _device_health(db)[:2] == ('unhealthy', 'came back; re-probing')
    assert _out(placement, GPU)
    # Gone for longer than max_hold_down, it is forgotten, and would come
    # back new.
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()[1:]))
    _forgotten_after_max_hold_down(conf, db)
    assert placement_sync.drop_released_gone(conf, admin_context) == 1
    assert _rows_of(db, 'devices', uuid=GPU_DEV) == 0
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    assert _status(db, GPU_DEV) == new_status
    assert _device_health(db).health == 'healthy'


@pytest.mark.parametrize('why', ['maintaining', 'unhealthy'])
def test_a_device_with_no_deployable_is_remembered_too(
        conf, db, admin_context, cn, placement, agent, why):  # noqa: F811
    # A GPU in MIG mode without MIG instances: a device with no
    # deployable, disabled for maintenance or failing, drops off the bus.
    gpu, mig = _devices()
    mig.deployables = []
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report([gpu, mig]))
    if why == 'maintaining':
        device_status.set_status(conf, admin_context, MIG_DEV,
                                 states.MAINTAINING)
        reason = 'the hardware vanished while its device was maintaining'
    else:
        _report(conf, admin_context,
                _reading(MIG_KEY, states.FATAL, 'XID 79'))
        reason = 'the hardware vanished while not healthy (unhealthy: XID 79)'
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report([gpu]))
    assert _device_health(db, MIG_KEY)[:2] == ('lost', reason)
    assert placement_sync.drop_released_gone(conf, admin_context) == 0
    placement_sync.reconcile_host(conf, admin_context, HOST)
    assert _rows_of(db, 'devices', uuid=MIG_DEV) == 1
    # Back as it was, and re-probed.
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report([gpu, mig]))
    assert _device_health(db, MIG_KEY)[:2] == ('unhealthy',
                                              'came back; re-probing')
    assert _status(db, MIG_DEV) == (
        states.MAINTAINING if why == 'maintaining' else states.ENABLED)
    # Gone for longer than max_hold_down: forgotten.
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report([gpu]))
    _forgotten_after_max_hold_down(conf, db)
    assert placement_sync.drop_released_gone(conf, admin_context) == 0
    assert _rows_of(db, 'devices', uuid=MIG_DEV) == 0
    assert _rows_of(db, 'devices', uuid=GPU_DEV) == 1


# -- two conductors -----------------------------------------------------------

def _engine_for(url):
    from oslo_db.sqlalchemy import exc_filters
    engine = sa.create_engine(url, poolclass=sa.pool.QueuePool, pool_size=4)
    exc_filters.register_engine(engine)
    return engine


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_two_conductors_apply_each_step_once(
        kind, conf, admin_context, placement, agent):  # noqa: F811
    pf.placement_conf(conf, placement.url)
    placement_client.reset_clients()
    requests.post(placement.url + '/resource_providers', json={'name': HOST},
                  headers=pf.HEADERS, timeout=10)
    with databases.throwaway_database(kind) as url:
        databases.create_schema(url)
        engine = _engine_for(url)
        undo = db_api.patch_engine(engine)
        try:
            inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(_devices()))
            fault = _reading(GPU_KEY, states.FATAL, 'XID 79')
            before = _transitions('device', 'healthy', 'unhealthy')
            errors = []
            barrier = threading.Barrier(2, timeout=30)

            def conductor(step):
                try:
                    barrier.wait()
                    step()
                except Exception as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)

            def race(step):
                threads = [threading.Thread(target=conductor, args=(step,))
                           for _ in range(2)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(60)
                assert errors == []

            race(lambda: _report(conf, admin_context, fault))
            assert _transitions('device', 'healthy', 'unhealthy') == \
                before + 1
            _report(conf, admin_context, _reading(GPU_KEY, states.OK))
            _age(engine, 61)
            probing = _transitions('device', 'unhealthy', 'probing')
            race(lambda: health.run_timers(conf, admin_context))
            assert _transitions('device', 'unhealthy', 'probing') == \
                probing + 1
            assert _device_health(engine).health == 'probing'
            assert _out(placement, GPU)
        finally:
            undo()
            engine.dispose()
