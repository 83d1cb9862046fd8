"""What a bind hands on of an attach handle, and the control path id,
checked in reports like the rest of a device.

An attach handle's ``physical_network`` (a NIC VF's Neutron physical
network, which Nova reads from the bound ARQ) and ``vgpu_mark`` (which
numbers an mdev handle) were stored whatever they held: a number, a list,
an empty or endless string, a ``vgpu_mark`` on a PCI handle (several free
handles of one function, each passed through whole).  A PCI device's
control path id was any text, though the agent's calls take it for a PCI
address.  Such a device is skipped alone now, as a bad PCI address or
mdev type is (test_hostile_reports.py).

A device stored before these checks, and reported alike since, was kept
as stored at each full report (a skipped device keeps its rows): offered
to the scheduler, failing each bind given it.  A full report now takes
such rows out as it does vanished hardware: deleted when nothing holds
them, kept reserved while allocations do.  Rows that pass the checks are
still kept when the report of them does not (a driver reporting a bad
value for a while loses nothing).
"""

import copy
import logging

import pytest
import requests

from cyborg.conductor import inventory_apply, inventory_plan
from cyborg.conductor import placement_sync
from cyborg.db import models
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from cyborg.drivers import base as driver_base
from cyborg.objects import inventory
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

placement = pf.placement

HOST = 'host1'
GOOD, BAD = '0000:81:00.0', '0000:82:00.0'
PHYSNET = inventory.PHYSICAL_NETWORK_LENGTH
NAME = models.NAME.length


def _nic(address=BAD, physnet='physnet1'):
    """A NIC whose VF handle carries ``physnet`` as a driver reports it."""
    device = cf.device(HOST, address, dev_type='NIC', rc='CUSTOM_NIC')
    device.deployables[0].attach_handles = [
        driver_base.pci_handle(address, physical_network='physnet1')]
    device.deployables[0].attach_handles[0].attach_info[
        inventory.PHYSICAL_NETWORK] = physnet
    return device


def _vgpu(address=BAD, **info):
    """A GPU with one mdev handle, ``info`` changed (None: dropped)."""
    device = cf.device(HOST, address, rc='VGPU')
    handle = driver_base.pci_handle(address, 'MDEV', asked_type='nvidia-35',
                                    vgpu_mark='nvidia-35_0')
    for key, value in info.items():
        if value is None:
            del handle.attach_info[key]
        else:
            handle.attach_info[key] = value
    device.deployables[0].attach_handles = [handle]
    return device


def _pci(**info):
    """A GPU passed through whole, its handle's info with ``info``."""
    device = cf.device(HOST, BAD)
    device.deployables[0].attach_handles[0].attach_info.update(info)
    return device


def _cpid(text):
    """A GPU at BAD whose control path id is ``text``."""
    device = cf.device(HOST, BAD)
    device.controlpath_id = inventory.ControlPathID(text)
    return device


# {case: (the device, the field its reason names)}
CASES = {
    'physical_network a number': (
        _nic(physnet=7), 'PCI attach_info physical_network'),
    'physical_network a list': (
        _nic(physnet=['physnet1']), 'PCI attach_info physical_network'),
    'physical_network None': (
        _nic(physnet=None), 'PCI attach_info physical_network'),
    'physical_network empty': (
        _nic(physnet=''), 'PCI attach_info physical_network'),
    'physical_network longer than Neutron holds': (
        _nic(physnet='p' * (PHYSNET + 1)),
        'PCI attach_info physical_network'),
    'physical_network with a NUL': (
        _nic(physnet='phys\x00net'), 'PCI attach_info physical_network'),
    'physical_network on an mdev handle': (
        _vgpu(physical_network='physnet1'),
        'MDEV attach_info physical_network'),
    'vgpu_mark a number': (
        _vgpu(vgpu_mark=0), 'MDEV attach_info vgpu_mark'),
    'vgpu_mark empty': (_vgpu(vgpu_mark=''), 'MDEV attach_info vgpu_mark'),
    'vgpu_mark longer than a name': (
        _vgpu(vgpu_mark='m' * (NAME + 1)), 'MDEV attach_info vgpu_mark'),
    'vgpu_mark on a PCI handle': (
        _pci(vgpu_mark='0'), 'PCI attach_info vgpu_mark'),
    'control path id not a PCI address': (
        _cpid('nqn.2024-05.org.example:gpu'), 'control path id'),
    'control path id in upper case': (
        _cpid('0000:8A:00.0'), 'control path id'),
    'control path id of function 8': (
        _cpid('0000:82:00.8'), 'control path id'),
}


def _report(device):
    return cf.report([cf.device(HOST, GOOD), device])


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_bad_field_skips_its_device_alone(case):
    device, field = CASES[case]
    parsed = inventory_plan.parse_report(_report(device))
    assert [d.key() for d in parsed.devices] == ['PCI:' + GOOD]
    # Skipped under its own key: a full report still tells it apart
    # from the stored devices.
    (key, reason), = parsed.skipped.items()
    assert key == device.key()
    assert reason.startswith(field) or f'{field} ' in reason, reason
    assert len(reason) < 300, reason
    assert not parsed.unidentified


def test_the_fields_at_their_limits_pass():
    devices = [cf.device(HOST, GOOD), _nic(physnet='p' * PHYSNET),
               _vgpu('0000:83:00.0', vgpu_mark='m' * NAME),
               _vgpu('0000:84:00.0', vgpu_mark=None)]
    devices[1].deployables[0].attach_handles.append(
        inventory.AttachHandle('TEST_PCI', dict(inventory.pci_info(BAD),
                                                physical_network='p')))
    assert inventory_plan.parse_report(cf.report(devices)).complete


def test_every_attach_type_says_what_a_bind_hands_on():
    assert set(inventory_plan.ATTACH_INFO_OPTIONAL) == set(
        models.ATTACH_TYPES)
    assert set(inventory_plan.CPID_SHAPES) == set(models.CPID_TYPES)


# -- rows stored before the checks ------------------------------------------

@pytest.fixture
def host(conf, placement, monkeypatch):
    """A compute node for HOST in the placement fixture; yields it."""
    monkeypatch.setattr(inventory_apply, '_WARNED', {})
    pf.compute_node(conf, placement, HOST)
    return placement


def _older(monkeypatch):
    """This conductor as one from before the checks: neither the fields a
    bind hands on nor the control path id's shape are looked at."""
    monkeypatch.setattr(inventory_plan, '_OPTIONAL_FIELDS', [])
    monkeypatch.setattr(inventory_plan, 'CPID_SHAPES', {})


def _provider(url, name):
    found = requests.get(f'{url}/resource_providers?name={name}',
                         headers=pf.HEADERS, timeout=10).json()[
        'resource_providers']
    if not found:
        return None
    inventories = requests.get(
        f"{url}/resource_providers/{found[0]['uuid']}/inventories",
        headers=pf.HEADERS, timeout=10).json()['inventories']
    return {rc: (inv['total'], inv['reserved'])
            for rc, inv in inventories.items()}


def _names(context):
    return sorted(r['name'] for r in
                  inventory_db.host_providers(context, HOST))


def _stored_by_an_older_conductor(conf, context, host, device):
    with pytest.MonkeyPatch.context() as older:
        _older(older)
        report = _report(device)
        assert inventory_plan.parse_report(report).complete
        inventory_apply.handle_report(conf, context, HOST, report)
    name = device.deployables[0].name
    assert _names(context) == sorted([f'{HOST}_{GOOD}', name])
    assert _provider(host.url, name) is not None
    return report


@pytest.mark.parametrize('case', ['physical_network a number',
                                  'vgpu_mark on a PCI handle',
                                  'control path id in upper case'])
def test_rows_stored_before_the_checks_go_at_the_next_full_report(
        case, conf, db, admin_context, host, caplog):
    device, field = CASES[case]
    device = copy.deepcopy(device)
    report = _stored_by_an_older_conductor(conf, admin_context, host,
                                           device)
    name = device.deployables[0].name

    with caplog.at_level(logging.INFO, logger=inventory_apply.__name__):
        reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                              report)
    assert reply['need_full'] is False
    assert _names(admin_context) == [f'{HOST}_{GOOD}']
    assert _provider(host.url, name) is None
    assert _provider(host.url, f'{HOST}_{GOOD}') is not None
    assert host_db.get(admin_context, HOST)['placement_synced']
    said = [r.getMessage() for r in caplog.records
            if 'taken out as vanished hardware' in r.getMessage()]
    assert len(said) == 1 and device.key() in said[0], said

    # Reported alike again: skipped, nothing stored again.
    inventory_apply.handle_report(conf, admin_context, HOST, report)
    assert _names(admin_context) == [f'{HOST}_{GOOD}']


def test_rows_stored_before_the_checks_are_kept_reserved_while_allocated(
        conf, db, admin_context, host):
    """As hardware that vanished under an instance: kept, gone, its
    provider reserved whole (offered to no one) until the allocation
    ends; then the reconcile removes it."""
    device = copy.deepcopy(CASES['vgpu_mark on a PCI handle'][0])
    report = _stored_by_an_older_conductor(conf, admin_context, host,
                                           device)
    name = device.deployables[0].name
    rp = inventory.provider_uuid(name)
    consumer = '5b1c6f0e-3d2a-4c8b-9e7f-0a1b2c3d4e5f'
    pf.hold_allocation(host.url, consumer, {rp: {'PGPU': 1}})

    inventory_apply.handle_report(conf, admin_context, HOST, report)
    (row,) = [r for r in inventory_db.host_providers(admin_context, HOST)
              if r['name'] == name]
    assert row['gone']
    assert _provider(host.url, name) == {'PGPU': (1, 1)}

    pf.hold_allocation(host.url, consumer, {})
    placement_sync.drop_released_gone(conf, admin_context)
    assert _names(admin_context) == [f'{HOST}_{GOOD}']
    assert _provider(host.url, name) is None


def test_rows_that_pass_are_kept_when_the_report_of_them_does_not(
        conf, db, admin_context, host):
    """A driver that reports a bad value for a while loses nothing."""
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  _report(_nic()))
    before = inventory_db.host_providers(admin_context, HOST)
    bad = copy.deepcopy(CASES['physical_network a number'][0])
    inventory_apply.handle_report(conf, admin_context, HOST, _report(bad))
    assert inventory_db.host_providers(admin_context, HOST) == before
    assert _provider(host.url, f'{HOST}_{BAD}') is not None


def test_a_delta_leaves_them_to_the_full_report(
        conf, db, admin_context, host):
    """A delta loads only what it reports: the skipped device's rows are
    not looked at, and the digest stored asks the agent for the full
    report that takes them out."""
    device = copy.deepcopy(CASES['physical_network a number'][0])
    report = _stored_by_an_older_conductor(conf, admin_context, host,
                                           device)
    delta = cf.report([cf.device(HOST, GOOD), device],
                      base_digest=report['digest'], full=False,
                      changed=[device])
    inventory_apply.handle_report(conf, admin_context, HOST, delta)
    assert host_db.get(admin_context, HOST)['report_digest'] != \
        delta['digest']
    assert _names(admin_context) == sorted([f'{HOST}_{GOOD}',
                                            f'{HOST}_{BAD}'])


def test_a_stored_handle_unreadable_as_an_object_fails_the_check():
    stored = inventory_plan._Stored({
        'devices': [{'id': 1, 'uuid': 'd'}],
        'deployables': [{'id': 2, 'device_id': 1}],
        'attach_handles': [{'deployable_id': 2, 'uuid': 'h',
                            'attach_type': 'PCI', 'attach_info': '[1]'}]})
    problem = inventory_plan.stored_problem(stored, {'id': 1},
                                            'PCI:' + BAD)
    assert 'stored handle h' in problem and 'not an object' in problem
    stored.handles[2][0]['attach_info'] = inventory_plan.to_json(
        inventory.pci_info(BAD))
    assert inventory_plan.stored_problem(stored, {'id': 1},
                                         'PCI:' + BAD) is None
