"""A device carrying a value its rows or Placement would refuse is skipped
alone, like a device of a type this conductor does not know
(doc/source/upgrade.rst): an ``rc`` that is not a string, attributes that
are not an object, a deployable named by a number, a missing vendor...
Each used to fail the host's whole report every period (a TypeError in
the check, in the plan's row uuids, an IntegrityError at the INSERT, or
Placement refusing the provider), so nothing of the host was stored."""

import copy
import logging

import pytest
import requests

from cyborg.conductor import inventory_apply, inventory_plan
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from cyborg.objects import inventory
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

placement = pf.placement

HOST = 'host1'
GOOD, BAD = '0000:81:00.0', '0000:82:00.0'


def _devices(trait='CUSTOM_A'):
    return [cf.device(HOST, GOOD, traits=[trait]),
            cf.device(HOST, BAD, dev_type='FPGA', rc='FPGA', num=2,
                      handles=2)]


def _set(path, value):
    """A change to the second device's entry of a report: ``path`` from
    the device (``()``: the entry itself) to the field set to ``value``."""
    def change(entry):
        if not path:
            return value
        target = entry
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        return entry
    return change


_DEPLOYABLE = ('deployables', 0)
_ATTRIBUTES = _DEPLOYABLE + ('attributes',)

# {case: (change to the second device, whether the device can still be
# told apart from the stored ones)}: the malformed inputs a review
# fuzzed reports with, and values too long for their columns.
CASES = {
    'rc None': (_set(_ATTRIBUTES + ('rc',), None), True),
    'rc a number': (_set(_ATTRIBUTES + ('rc',), 5), True),
    'trait a list': (_set(_ATTRIBUTES + ('trait0',), ['x']), True),
    'attributes a list': (_set(_ATTRIBUTES, ['x']), True),
    'descriptive attribute None': (_set(_ATTRIBUTES + ('x',), None), True),
    'name None': (_set(_DEPLOYABLE + ('name',), None), True),
    'name a number': (_set(_DEPLOYABLE + ('name',), 7), True),
    'name too long for Placement': (
        _set(_DEPLOYABLE + ('name',), 'x' * 201), True),
    'type a list': (_set(('type',), ['GPU']), True),
    'deployables an object': (_set(('deployables',), {'a': 1}), False),
    'attach_info a string': (
        _set(_DEPLOYABLE + ('attach_handles', 0, 'attach_info'), 'x'),
        True),
    'attach_handles None': (
        _set(_DEPLOYABLE + ('attach_handles',), None), False),
    'control path id None': (
        _set(('controlpath_id', 'cpid_info'), None), False),
    'control path type unknown': (
        _set(('controlpath_id', 'cpid_type'), 'NVME'), False),
    'vendor None': (_set(('vendor',), None), True),
    'vendor too long': (_set(('vendor',), 'v' * 256), True),
    'model a number': (_set(('model',), 3), True),
    'bitstream_id a number': (_set(_DEPLOYABLE + ('bitstream_id',), 5),
                              True),
    'driver_name a list': (_set(_DEPLOYABLE + ('driver_name',), ['d']),
                           True),
    'num_accelerators a boolean': (
        _set(_DEPLOYABLE + ('num_accelerators',), True), True),
    'num_accelerators beyond an Integer': (
        _set(_DEPLOYABLE + ('num_accelerators',), 10 ** 12), True),
    'num_accelerators negative': (
        _set(_DEPLOYABLE + ('num_accelerators',), -1), True),
    'std_board_info a list': (_set(('std_board_info',), [1]), True),
    'vendor_board_info None': (_set(('vendor_board_info',), None), True),
    'device not an object': (_set((), 'abc'), False),
}


def _malformed(case, trait='CUSTOM_A'):
    """A full report of both devices, the second one malformed."""
    report = cf.report(_devices(trait))
    change, _identified = CASES[case]
    report['devices'][1] = change(copy.deepcopy(report['devices'][1]))
    return report


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_malformed_device_is_skipped_at_the_check(case):
    parsed = inventory_plan.parse_report(_malformed(case))
    assert [d.key() for d in parsed.devices] == ['PCI:' + GOOD]
    (key, reason), = parsed.skipped.items()
    assert key == ('PCI:' + BAD if CASES[case][1] else '#1')
    assert reason
    # Nothing of it reaches the plan: its rows are built from what the
    # check let through only.
    plan = inventory_plan.make_plan(HOST, {}, parsed.devices, full=True,
                                    kept_keys=parsed.kept_keys)
    assert [d['name'] for d in plan.add['deployables']] == [
        f'{HOST}_{GOOD}']


def _providers(service, cn_uuid):
    """{name: traits} of the providers under the compute node."""
    found = {}
    listed = requests.get(
        f'{service.url}/resource_providers?in_tree={cn_uuid}',
        headers=pf.HEADERS, timeout=10).json()['resource_providers']
    for rp in listed:
        if rp['uuid'] != cn_uuid:
            found[rp['name']] = set(requests.get(
                f"{service.url}/resource_providers/{rp['uuid']}/traits",
                headers=pf.HEADERS, timeout=10).json()['traits'])
    return found


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_malformed_device_leaves_the_rest_of_the_host_stored_and_synced(
        case, conf, db, admin_context, placement, caplog, monkeypatch):
    """The device stored before keeps its rows and provider as they were;
    the other device's change is stored and reaches Placement; the host
    is in sync; one WARNING names what was left out and why."""
    monkeypatch.setattr(inventory_apply, '_WARNED', {})
    pf.placement_conf(conf, placement.url)
    cn_uuid = requests.post(
        placement.url + '/resource_providers', json={'name': HOST},
        headers=pf.HEADERS, timeout=10).json()['uuid']
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices()))
    before = inventory_db.host_providers(admin_context, HOST)

    report = _malformed(case, trait='CUSTOM_B')
    with caplog.at_level(logging.WARNING):
        reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                              report)
    assert reply == {'digest': report['digest'], 'need_full': False}
    after = {r['name']: r for r in
             inventory_db.host_providers(admin_context, HOST)}
    assert set(after) == {f'{HOST}_{GOOD}', f'{HOST}_{BAD}'}
    assert after[f'{HOST}_{BAD}'] == [
        r for r in before if r['name'] == f'{HOST}_{BAD}'][0]
    assert after[f'{HOST}_{GOOD}']['attributes']['trait0'] == 'CUSTOM_B'
    assert host_db.get(admin_context, HOST)['placement_synced']
    providers = _providers(placement, cn_uuid)
    assert set(providers) == {f'{HOST}_{GOOD}', f'{HOST}_{BAD}'}
    assert 'CUSTOM_B' in providers[f'{HOST}_{GOOD}']
    assert providers[f'{HOST}_{BAD}'] == {'OWNER_CYBORG'}
    assert inventory.provider_uuid(f'{HOST}_{BAD}') == after[
        f'{HOST}_{BAD}']['rp_uuid']
    skipped = inventory_plan.parse_report(report).skipped
    # cyborg's own: another test's transport may still be logging its
    # reconnections from a thread of its own.
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING
                and r.name.startswith('cyborg')]
    assert len(warnings) == 1, warnings
    assert all(reason in warnings[0] for reason in skipped.values())
