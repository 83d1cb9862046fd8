"""inventory_plan: a pure function, tested with plain data."""

import datetime
import itertools

import pytest

from cyborg.common import exception
from cyborg.common import states
from cyborg.conductor import health_machine
from cyborg.conductor import inventory_plan as ip
from cyborg.objects import inventory
from cyborg.objects.health import Reading
from tests.fixtures import conductor as cf

HOST = 'host1'
NOW = datetime.datetime(2025, 1, 2, 3, 4, 5)
_IDS = itertools.count(1)


def _stored(plan, previous=None):
    """The rows a database would hold after writing ``plan`` (ids made
    up, parents resolved), on top of ``previous``."""
    rows = {t: [dict(r) for r in (previous or {}).get(t, [])]
            for t in ip.TABLES}
    for table in ip.TABLES:
        rows[table] = [r for r in rows[table]
                       if r['uuid'] not in plan.delete[table]]
        for change in plan.update[table]:
            for row in rows[table]:
                if row['uuid'] == change['uuid']:
                    row.update(change)
    ids = {r['uuid']: r['id'] for t in ip.TABLES for r in rows[t]}
    for table in ip.TABLES:
        for added in plan.add[table]:
            row = {k: v for k, v in added.items()
                   if not k.endswith('_uuid') or k == 'rp_uuid'}
            row.update(uuid=added['uuid'], id=next(_IDS))
            for parent, column in (('device_uuid', 'device_id'),
                                   ('deployable_uuid', 'deployable_id'),
                                   ('controlpath_uuid', 'cpid_id')):
                if parent in added:
                    row[column] = ids[added[parent]]
            ids[row['uuid']] = row['id']
            rows[table].append(row)
    return rows


def _devices():
    return [cf.device(HOST, '0000:81:00.0', traits=['CUSTOM_A']),
            cf.device(HOST, '0000:82:00.0', num=4, rc='CUSTOM_ACCEL',
                      handles=4)]


def test_first_report_adds_every_row_with_derived_uuids():
    plan = ip.make_plan(HOST, {}, _devices(), full=True)
    assert len(plan.add['devices']) == 2
    assert len(plan.add['attach_handles']) == 5
    dep = plan.add['deployables'][0]
    assert dep['uuid'] == ip.deployable_uuid(HOST, 'host1_0000:81:00.0')
    assert dep['rp_uuid'] == inventory.provider_uuid('host1_0000:81:00.0')
    assert plan.touched_providers == {
        inventory.provider_uuid('host1_0000:81:00.0'),
        inventory.provider_uuid('host1_0000:82:00.0')}
    # Same input, same rows: what lets two conductors collide, not
    # duplicate.
    assert ip.make_plan(HOST, {}, _devices(), full=True) == plan


def test_same_inventory_again_plans_nothing():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    plan = ip.make_plan(HOST, stored, _devices(), full=True)
    assert plan.empty
    assert not plan.touched_providers


def test_changed_count_and_trait_update_in_place():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    devices = _devices()
    devices[1].deployables[0].num_accelerators = 2
    devices[0].deployables[0].attributes['trait0'] = 'CUSTOM_B'
    plan = ip.make_plan(HOST, stored, devices, full=True)
    assert [u['num_accelerators'] for u in plan.update['deployables']] == [2]
    assert [u['value'] for u in plan.update['attributes']] == ['CUSTOM_B']
    assert not plan.add['deployables'] and not plan.delete['deployables']
    assert len(plan.touched_providers) == 2


def test_vanished_device_is_deleted_when_not_allocated():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True)
    gone_rp = inventory.provider_uuid('host1_0000:82:00.0')
    assert plan.delete['devices'] == [ip.device_uuid(HOST, 'PCI:0000:82:00.0')]
    assert plan.removed_providers == {gone_rp}
    assert plan.removal_candidates == {gone_rp}


def test_vanished_device_with_allocations_is_kept_as_gone_and_lost():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    gone_rp = inventory.provider_uuid('host1_0000:82:00.0')
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True,
                        held_providers={gone_rp}, now=NOW)
    assert not plan.delete['devices'] and not plan.delete['deployables']
    assert plan.update['deployables'] == [
        {'uuid': ip.deployable_uuid(HOST, 'host1_0000:82:00.0'),
         'gone': True, 'health': 'lost', 'health_updated_at': NOW,
         'health_reason': health_machine.LOST_REASON,
         'health_code': health_machine.LOST_CODE}]
    # The whole device vanished: it is lost too (a deployable of a device
    # still reported would be lost alone).
    dev_uuid = ip.device_uuid(HOST, 'PCI:0000:82:00.0')
    assert plan.update['devices'] == [
        {'uuid': dev_uuid, 'health': 'lost', 'health_updated_at': NOW,
         'health_reason': health_machine.LOST_REASON,
         'health_code': health_machine.LOST_CODE}]
    assert plan.touched_providers == {gone_rp}
    assert not plan.removed_providers
    # Reported again: it is back, no longer gone, unhealthy until the
    # health state machine re-probes it.
    stored = _stored(plan, stored)
    later = NOW + datetime.timedelta(seconds=5)
    back = ip.make_plan(HOST, stored, _devices(), full=True, now=later,
                        health_settings=health_machine.Settings(
                            hold_down=90))
    # Its hold-down starts now (a host whose agent watches no health
    # sends no good reading to start it), with the settings given.
    due = later + datetime.timedelta(seconds=90)
    assert back.update['deployables'] == [
        {'uuid': ip.deployable_uuid(HOST, 'host1_0000:82:00.0'),
         'gone': False, 'health': 'unhealthy', 'health_updated_at': later,
         'health_reason': health_machine.CAME_BACK_REASON,
         'health_code': health_machine.CAME_BACK_CODE,
         'health_due_at': due}]
    [device_back] = back.update['devices']
    assert (device_back['uuid'], device_back['health'],
            device_back['health_reason'], device_back['health_due_at']) == (
        dev_uuid, 'unhealthy', health_machine.CAME_BACK_REASON, due)
    assert back.touched_providers == {gone_rp}
    # Still lost while held and absent: nothing more to write.
    again = ip.make_plan(HOST, stored, _devices()[:1], full=True,
                         held_providers={gone_rp}, now=later)
    assert again.empty


@pytest.mark.parametrize('which', ['device', 'deployable'])
def test_vanished_unhealthy_device_is_kept_lost_and_re_probed_on_return(
        which):
    # Not allocated, but not healthy either: were its rows deleted, the
    # same card coming back would be new, and healthy at once.  It is kept
    # as gone and lost, saying how it was, and comes back unhealthy.
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    table = which + 's'
    [row] = [r for r in stored[table] if '82' in (r.get('name') or '')
             or r.get('uuid') == ip.device_uuid(HOST, 'PCI:0000:82:00.0')]
    row.update(health='unhealthy', health_reason='XID 79: fallen off the bus')
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True, now=NOW)
    assert not plan.delete['devices'] and not plan.delete['deployables']
    assert plan.touched_providers == {
        inventory.provider_uuid('host1_0000:82:00.0')}
    reason = ('the hardware vanished while not healthy (unhealthy: XID 79: '
              'fallen off the bus)')
    [deployable] = plan.update['deployables']
    assert (deployable['gone'], deployable['health'],
            deployable['health_reason']) == (True, 'lost', reason)
    [device] = plan.update['devices']
    assert (device['health'], device['health_reason']) == ('lost', reason)
    assert not plan.removed_providers
    stored = _stored(plan, stored)
    later = NOW + datetime.timedelta(minutes=5)
    back = ip.make_plan(HOST, stored, _devices(), full=True, now=later)
    [deployable] = back.update['deployables']
    assert (deployable['gone'], deployable['health'],
            deployable['health_reason']) == (
        False, 'unhealthy', health_machine.CAME_BACK_REASON)


def _seen_going():
    """The stored rows of ``_devices()`` after the agent's health check saw
    the function of 0000:82:00.0 disappear (a gone reading: unhealthy)."""
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    gone = health_machine.apply_reading(
        health_machine.Record(), Reading(
            device='PCI:0000:82:00.0', severity=states.GONE, source='pci',
            reason='PCI function 0000:82:00.0 disappeared'), NOW,
        health_machine.Settings())
    for row in stored['devices']:
        if row['uuid'] == ip.device_uuid(HOST, 'PCI:0000:82:00.0'):
            row.update(health=gone.health, health_reason=gone.reason,
                       health_code=gone.code)
    return stored


@pytest.mark.parametrize('held', [False, True])
def test_vanished_device_whose_only_fault_was_vanishing_is_not_remembered(
        held):
    # The agent's health watcher saw the function disappear (a gone
    # reading: unhealthy) before its inventory report said the device
    # went: it was healthy until it vanished, so it goes as a healthy
    # device does, at once, or when its allocations end.
    stored = _seen_going()
    gone_rp = inventory.provider_uuid('host1_0000:82:00.0')
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True, now=NOW,
                        held_providers={gone_rp} if held else set())
    if not held:
        assert plan.delete['devices'] == [
            ip.device_uuid(HOST, 'PCI:0000:82:00.0')]
        assert plan.removed_providers == {gone_rp}
        return
    [deployable] = plan.update['deployables']
    assert (deployable['gone'], deployable['health'],
            deployable['health_reason']) == (
        True, 'lost', health_machine.LOST_REASON)
    [device] = plan.update['devices']
    assert (device['health'], device['health_reason']) == (
        'lost', health_machine.LOST_REASON)


def test_vanished_device_seen_going_first_keeps_a_failing_deployable():
    # The device is out only because the health check saw it go, but its
    # deployable was suspect before: that is what it is remembered by.
    stored = _seen_going()
    for row in stored['deployables']:
        if row['name'] == 'host1_0000:82:00.0':
            row.update(health='suspect', health_reason='XID 63')
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True, now=NOW)
    reason = 'the hardware vanished while not healthy (suspect: XID 63)'
    assert not plan.delete['devices'] and not plan.delete['deployables']
    [deployable] = plan.update['deployables']
    assert (deployable['gone'], deployable['health'],
            deployable['health_reason']) == (True, 'lost', reason)
    [device] = plan.update['devices']
    assert (device['health'], device['health_reason']) == ('lost', reason)


def test_vanished_healthy_device_of_an_unhealthy_sibling_is_deleted():
    # Only the hardware that was not healthy is remembered.
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    for row in stored['deployables']:
        if row['name'] == 'host1_0000:81:00.0':
            row.update(health='unhealthy', health_reason='XID 79')
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True, now=NOW)
    assert plan.delete['devices'] == [ip.device_uuid(HOST, 'PCI:0000:82:00.0')]


@pytest.mark.parametrize('new_status, operators', [
    ('enabled', 'maintaining'), ('maintaining', 'enabled')])
def test_vanished_device_in_an_operators_status_is_kept_to_keep_it(
        new_status, operators):
    # Healthy and not allocated, but in the status an operator gave it,
    # not the one it would get were it new when it comes back: kept
    # (lost, its deployables gone) so that it comes back in that status.
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True,
                                  new_device_status=new_status))
    dev_uuid = ip.device_uuid(HOST, 'PCI:0000:82:00.0')
    for row in stored['devices']:
        row['status'] = operators
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True, now=NOW,
                        new_device_status=new_status)
    reason = f'the hardware vanished while its device was {operators}'
    assert not plan.delete['devices'] and not plan.delete['deployables']
    [deployable] = plan.update['deployables']
    assert (deployable['gone'], deployable['health'],
            deployable['health_reason']) == (True, 'lost', reason)
    [device] = plan.update['devices']
    assert (device['uuid'], device['health'], device['health_reason']) == (
        dev_uuid, 'lost', reason)
    assert 'status' not in device
    # In the status new devices start in, it goes at once.
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True, now=NOW,
                        new_device_status=operators)
    assert plan.delete['devices'] == [dev_uuid]


@pytest.mark.parametrize('why', ['maintaining', 'unhealthy'])
def test_vanished_device_with_no_deployable_is_kept_like_any(why):
    # A GPU in MIG mode without MIG instances has no deployable: failing
    # or in maintenance when it vanishes, it is kept all the same.
    devices = _devices()
    devices[1].deployables = []
    stored = _stored(ip.make_plan(HOST, {}, devices, full=True))
    dev_uuid = ip.device_uuid(HOST, 'PCI:0000:82:00.0')
    [row] = [r for r in stored['devices'] if r['uuid'] == dev_uuid]
    if why == 'maintaining':
        row['status'] = 'maintaining'
        reason = 'the hardware vanished while its device was maintaining'
    else:
        row.update(health='unhealthy', health_reason='XID 79')
        reason = 'the hardware vanished while not healthy (unhealthy: XID 79)'
    plan = ip.make_plan(HOST, stored, devices[:1], full=True, now=NOW)
    assert not plan.delete['devices']
    [device] = plan.update['devices']
    assert (device['uuid'], device['health'], device['health_reason']) == (
        dev_uuid, 'lost', reason)
    # Still away: nothing more to write.
    stored = _stored(plan, stored)
    assert ip.make_plan(HOST, stored, devices[:1], full=True, now=NOW).empty
    # Healthy and enabled, it goes at once.
    stored = _stored(ip.make_plan(HOST, {}, devices, full=True))
    plan = ip.make_plan(HOST, stored, devices[:1], full=True, now=NOW)
    assert plan.delete['devices'] == [dev_uuid]


def test_added_devices_start_in_the_status_asked_and_keep_theirs():
    plan = ip.make_plan(HOST, {}, _devices(), full=True,
                        new_device_status='maintaining')
    assert {d['status'] for d in plan.add['devices']} == {'maintaining'}
    stored = _stored(plan)
    for row in stored['devices']:
        row['status'] = 'enabled'       # an admin enabled them
    again = ip.make_plan(HOST, stored, _devices(), full=True,
                         new_device_status='maintaining')
    assert again.empty


def test_delta_touches_only_what_it_names():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    new = cf.device(HOST, '0000:83:00.0')
    plan = ip.make_plan(HOST, stored, [new], removed_keys=['PCI:0000:81:00.0'],
                        full=False)
    assert [d['uuid'] for d in plan.add['devices']] == [
        ip.device_uuid(HOST, 'PCI:0000:83:00.0')]
    assert plan.delete['devices'] == [ip.device_uuid(HOST, 'PCI:0000:81:00.0')]
    assert ip.device_uuid(HOST, 'PCI:0000:82:00.0') not in \
        plan.delete['devices']


def test_attributes_made_by_an_operator_survive_reports():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    dep = stored['deployables'][0]
    stored['attributes'].append({'id': 999, 'uuid': 'operator-made',
                                 'deployable_id': dep['id'],
                                 'key': 'trait9', 'value': 'CUSTOM_OP'})
    devices = _devices()
    del devices[0].deployables[0].attributes['trait0']
    plan = ip.make_plan(HOST, stored, devices, full=True)
    assert plan.delete['attributes'] == [
        ip.attribute_uuid(HOST, dep['name'], 'trait0')]


def test_vanished_handle_in_use_is_kept():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    handles = [h for h in stored['attach_handles']
               if h['attach_info'].endswith('"function": "3"}')]
    handles[0]['in_use'] = True
    devices = _devices()
    devices[1].deployables[0].attach_handles = \
        devices[1].deployables[0].attach_handles[:2]
    plan = ip.make_plan(HOST, stored, devices, full=True)
    deleted = set(plan.delete['attach_handles'])
    assert len(deleted) == 1 and handles[0]['uuid'] not in deleted
    assert plan.kept_handles == 1


def test_new_handle_on_existing_deployable_uses_its_control_path():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    devices = _devices()
    devices[0].deployables[0].attach_handles.append(
        inventory.AttachHandle('PCI', inventory.pci_info('0000:81:00.7')))
    plan = ip.make_plan(HOST, stored, devices, full=True)
    assert [h['controlpath_uuid'] for h in plan.add['attach_handles']] == [
        ip.controlpath_uuid(HOST, 'PCI:0000:81:00.0')]


@pytest.mark.parametrize('report, reason', [
    ([], 'an inventory report is an object'),
    ({'digest': 'x', 'full': True, 'devices': []}, "lacks 'removed'"),
    ({'digest': 'x', 'full': True, 'removed': [], 'devices': {}},
     'are lists'),
])
def test_malformed_reports_are_invalid(report, reason):
    with pytest.raises(exception.Invalid, match=reason):
        ip.parse_report(report)


def test_duplicates_are_invalid():
    dup = cf.device(HOST, '0000:81:00.0')
    with pytest.raises(exception.Invalid, match='twice'):
        ip.parse_report(cf.report([dup, dup]))


def test_a_deployable_name_two_devices_give_is_invalid():
    """Two devices (two drivers' views of the same functions) naming one
    deployable: refused at once, rather than two rows with one uuid that
    fail the insert after every retry."""
    first = cf.device(HOST, '0000:81:00.0')
    second = cf.device(HOST, '0000:81:00.1')
    second.deployables[0].name = first.deployables[0].name
    with pytest.raises(exception.Invalid,
                       match='deployable host1_0000:81:00.0 reported twice'):
        ip.parse_report(cf.report([first, second]))


def _newer_report():
    """What an agent newer than this conductor could send: a device of a
    type it does not know, one with an attach type it does not know, one
    with fields it does not know, one it cannot even identify, and a
    plain one."""
    tpu = cf.device(HOST, '0000:84:00.0', dev_type='TPU')
    vfio = cf.device(HOST, '0000:85:00.0')
    vfio.deployables[0].attach_handles[0].attach_type = 'VFIO_USER'
    report = cf.report([cf.device(HOST, '0000:81:00.0'), tpu, vfio,
                        cf.device(HOST, '0000:83:00.0')])
    report['devices'][3]['numa_node'] = 1
    report['devices'][3]['deployables'][0]['partition'] = {'mig': '1g'}
    report['devices'].append({'type': 'GPU', 'vendor': '10de'})
    report['firmware_inventory'] = []
    return report


def test_a_newer_agents_report_keeps_what_this_version_understands():
    parsed = ip.parse_report(_newer_report())
    assert [d.key() for d in parsed.devices] == ['PCI:0000:81:00.0',
                                                  'PCI:0000:83:00.0']
    assert parsed.skipped == {
        'PCI:0000:84:00.0': "unknown device type 'TPU'",
        'PCI:0000:85:00.0': "unknown attach type 'VFIO_USER'",
        '#4': "unreadable: KeyError('controlpath_id')"}
    assert parsed.unknown_fields == {'numa_node', 'deployables.partition'}
    assert not parsed.complete and parsed.unidentified
    assert parsed.kept_keys >= {'PCI:0000:84:00.0', 'PCI:0000:85:00.0'}
    problems = parsed.problems()
    assert 'TPU' in problems and 'numa_node' in problems


def test_a_device_placement_would_refuse_is_skipped_alone():
    """A trait or resource class Placement refuses (an allowlist tag too
    long, a name not upper case) would fail every later sync of the host:
    that device is skipped, saying why, and the others are stored."""
    long_trait = cf.device(HOST, '0000:82:00.0',
                           traits=['CUSTOM_' + 'X' * 250])
    lower_rc = cf.device(HOST, '0000:83:00.0', rc='CUSTOM_fpga')
    parsed = ip.parse_report(cf.report([cf.device(HOST, '0000:81:00.0'),
                                        long_trait, lower_rc]))
    assert [d.key() for d in parsed.devices] == ['PCI:0000:81:00.0']
    assert sorted(parsed.skipped) == ['PCI:0000:82:00.0',
                                      'PCI:0000:83:00.0']
    assert 'attribute trait0 names a trait for Placement' in (
        parsed.skipped['PCI:0000:82:00.0'])
    assert "'CUSTOM_fpga' is neither" in parsed.skipped['PCI:0000:83:00.0']


def test_a_report_this_version_fully_understands_is_complete():
    parsed = ip.parse_report(cf.report(_devices()))
    assert parsed.complete and not parsed.unidentified
    assert len(parsed.devices) == 2


def test_skipped_devices_are_neither_removed_nor_changed():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    # The second device is now reported with a type this version lacks.
    plan = ip.make_plan(HOST, stored, _devices()[:1], full=True,
                        kept_keys={_devices()[1].key()})
    assert plan.empty and not plan.removal_candidates
    # Nor by a delta that says it is gone while also reporting it.
    plan = ip.make_plan(HOST, stored, [], [_devices()[1].key()],
                        kept_keys={_devices()[1].key()})
    assert plan.empty


def test_a_full_report_with_an_unidentified_device_removes_nothing():
    stored = _stored(ip.make_plan(HOST, {}, _devices(), full=True))
    plan = ip.make_plan(HOST, stored, [], full=True,
                        remove_unreported=False)
    assert plan.empty
    assert ip.make_plan(HOST, stored, [], full=True).delete['devices']
