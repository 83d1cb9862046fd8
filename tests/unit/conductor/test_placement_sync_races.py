"""Placement syncs racing changes of other writers, and hosts sharing a
compute node provider.

- A change committed between another change's transaction and its sync
  (another conductor's device disabled, whose own sync failed) must
  keep the host unsynced: the sync takes the serial its own transaction
  left, not one read after it, which may already count the other change
  that it neither touches nor, trusting its memory, compares.
- Two host rows resolving to one compute node provider (a host renamed,
  in case only) must not take each other's providers for orphans.
- The periodic drop of released vanished hardware goes on with the
  other hosts when one fails, and leaves that one unsynced.
"""

import requests

from cyborg.conductor import device_status, inventory_apply, placement_sync
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf
from tests.fixtures.placement import placement  # noqa: F401

HOST = 'host1'
GPU_DEVICE = inventory.row_uuid(HOST, 'PCI:0000:81:00.0')
FPGA_DEVICE = inventory.row_uuid(HOST, 'PCI:0000:82:00.0')
FPGA = inventory.provider_uuid('host1_0000:82:00.0')
AWAY = 'http://127.0.0.1:9'


def _devices(**gpu):
    return [cf.device(HOST, '0000:81:00.0', **gpu),
            cf.device(HOST, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                      num=4)]


def _inventories(placement, rp_uuid):  # noqa: F811
    resp = requests.get(
        f'{placement.url}/resource_providers/{rp_uuid}/inventories',
        headers=pf.HEADERS, timeout=10)
    if resp.status_code == 404:
        return None
    return {rc: (v['total'], v['reserved'])
            for rc, v in resp.json()['inventories'].items()}


def _reported(conf, context, placement):  # noqa: F811
    pf.compute_node(conf, placement, HOST)
    first = inventory_apply.handle_report(conf, context, HOST,
                                          cf.report(_devices()))
    assert host_db.get(context, HOST)['placement_synced']
    assert _inventories(placement, FPGA)['FPGA'] == (4, 0)
    return first


def _in_the_gap(monkeypatch, conf, context, placement, name):  # noqa: F811
    """Run ``placement_sync.<name>`` the first time after another
    conductor disabled the FPGA and failed to sync it (Placement away
    for it): its change commits between the caller's transaction and
    its sync."""
    real = getattr(placement_sync, name)
    raced = []

    def racing(*args, **kwargs):
        if not raced:
            raced.append(True)
            pf.placement_conf(conf, AWAY)
            try:
                device_status.set_status(conf, context, FPGA_DEVICE,
                                         'maintaining')
            finally:
                pf.placement_conf(conf, placement.url)
        return real(*args, **kwargs)

    monkeypatch.setattr(placement_sync, name, racing)
    return raced


def _left_unsynced_then_repaired(
        conf, context, placement, monkeypatch, raced):  # noqa: F811
    """The change in the gap happened, its sync failed and the racing
    sync left the host unsynced (the FPGA still schedulable); the
    periodic reconcile then puts the disabled FPGA out of the schedule."""
    assert raced
    assert _inventories(placement, FPGA)['FPGA'] == (4, 0)
    assert not host_db.get(context, HOST)['placement_synced']
    monkeypatch.undo()
    placement_sync.reconcile_all(conf, context)
    assert _inventories(placement, FPGA)['FPGA'] == (4, 4)
    assert host_db.get(context, HOST)['placement_synced']


def test_a_report_sync_does_not_mark_a_change_committed_before_it(
        conf, db, admin_context, placement, monkeypatch):  # noqa: F811
    first = _reported(conf, admin_context, placement)
    raced = _in_the_gap(monkeypatch, conf, admin_context, placement,
                        'sync_after_report')
    # A delta changing the GPU only; its sync writes the GPU's provider.
    gpu = _devices(traits=['CUSTOM_NEW'])[0]
    inventory_apply.handle_report(conf, admin_context, HOST, cf.report(
        _devices(traits=['CUSTOM_NEW']), base_digest=first['digest'],
        full=False, changed=[gpu]))
    _left_unsynced_then_repaired(conf, admin_context, placement,
                                 monkeypatch, raced)


def test_a_status_sync_does_not_mark_a_change_committed_before_it(
        conf, db, admin_context, placement, monkeypatch):  # noqa: F811
    _reported(conf, admin_context, placement)
    raced = _in_the_gap(monkeypatch, conf, admin_context, placement,
                        'sync_providers')
    device_status.set_status(conf, admin_context, GPU_DEVICE, 'maintaining')
    _left_unsynced_then_repaired(conf, admin_context, placement,
                                 monkeypatch, raced)


def test_the_reconcile_does_not_trust_a_host_unsynced_since_its_listing(
        conf, db, admin_context, placement, monkeypatch):  # noqa: F811
    # reconcile_all listed the host as synced; the change commits before
    # the host's own reconcile starts.
    _reported(conf, admin_context, placement)
    raced = _in_the_gap(monkeypatch, conf, admin_context, placement,
                        'reconcile_host')
    placement_sync.reconcile_all(conf, admin_context)
    assert raced
    assert _inventories(placement, FPGA)['FPGA'] == (4, 4)
    assert host_db.get(admin_context, HOST)['placement_synced']


def _renamed(conf, context, placement):  # noqa: F811
    """Two host rows (Compute-1, renamed compute-1) whose devices hang
    under the one compute node provider; returns the new one's
    provider."""
    pf.compute_node(conf, placement, 'compute-1')
    for host in ('Compute-1', 'compute-1'):
        report = cf.report([cf.device(host, '0000:81:00.0')])
        report['resource_provider_name'] = 'compute-1'
        inventory_apply.handle_report(conf, context, host, report)
    return inventory.provider_uuid('compute-1_0000:81:00.0')


def test_a_reconcile_keeps_the_providers_of_a_host_sharing_its_node(
        conf, db, admin_context, placement):  # noqa: F811
    new_rp = _renamed(conf, admin_context, placement)
    old_rp = inventory.provider_uuid('Compute-1_0000:81:00.0')
    placement_sync.reconcile_host(conf, admin_context, 'Compute-1')
    placement_sync.reconcile_host(conf, admin_context, 'compute-1')
    # Neither deleted (and made again by its own host's next sync); both
    # reserved whole while they share the node (placement_sync).
    assert _inventories(placement, new_rp)['PGPU'] == (1, 1)
    assert _inventories(placement, old_rp)['PGPU'] == (1, 1)


def test_a_reconcile_does_not_remove_an_allocated_provider_of_another_host(
        conf, db, admin_context, placement):  # noqa: F811
    pf.compute_node(conf, placement, 'compute-1')
    report = cf.report([cf.device('Compute-1', '0000:81:00.0')])
    report['resource_provider_name'] = 'compute-1'
    inventory_apply.handle_report(conf, admin_context, 'Compute-1', report)
    old_rp = inventory.provider_uuid('Compute-1_0000:81:00.0')
    pf.hold_allocation(placement.url, pf.PROJECT, {old_rp: {'PGPU': 1}})
    report = cf.report([cf.device('compute-1', '0000:81:00.0')])
    report['resource_provider_name'] = 'compute-1'
    inventory_apply.handle_report(conf, admin_context, 'compute-1', report)
    placement_sync.reconcile_host(conf, admin_context, 'compute-1')
    assert _inventories(placement, old_rp)['PGPU'] == (1, 1)
    assert pf.PROJECT in placement_client.get_client(conf).get_allocations(
        old_rp)


def _gone_released(conf, context, placement, host):  # noqa: F811
    """A host whose FPGA vanished under an allocation since released:
    the drop removes it at its next run.  Returns its provider."""
    pf.compute_node(conf, placement, host)
    devices = [cf.device(host, '0000:81:00.0'),
               cf.device(host, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                         num=4)]
    first = inventory_apply.handle_report(conf, context, host,
                                          cf.report(devices))
    rp = inventory.provider_uuid(f'{host}_0000:82:00.0')
    pf.hold_allocation(placement.url, pf.PROJECT, {rp: {'FPGA': 2}})
    inventory_apply.handle_report(conf, context, host, cf.report(
        devices[:1], base_digest=first['digest'], full=False, changed=[],
        removed=['PCI:0000:82:00.0']))
    pf.hold_allocation(placement.url, pf.PROJECT, {})
    assert host_db.get(context, host)['placement_synced']
    return rp


def _provider(placement, method, path, body=None):  # noqa: F811
    resp = requests.request(method, placement.url + path, json=body,
                            headers=pf.HEADERS, timeout=10)
    assert resp.status_code < 300, resp.text
    return resp


def test_the_drop_goes_on_after_a_host_whose_sync_fails(
        conf, db, admin_context, placement):  # noqa: F811
    a_rp = _gone_released(conf, admin_context, placement, 'host-a')
    b_rp = _gone_released(conf, admin_context, placement, 'host-b')
    # Someone hung a provider under host-a's: Placement refuses to delete
    # it, after its rows are deleted.
    child = _provider(placement, 'POST', '/resource_providers', {
        'name': 'hung-under-a', 'parent_provider_uuid': a_rp}).json()
    assert placement_sync.drop_released_gone(conf, admin_context) == 2
    assert _inventories(placement, b_rp) is None
    assert host_db.get(admin_context, 'host-b')['placement_synced']
    # Its rows gone, its provider still there: host-a is not synced.
    assert _inventories(placement, a_rp) is not None
    assert not host_db.get(admin_context, 'host-a')['placement_synced']
    _provider(placement, 'DELETE', f"/resource_providers/{child['uuid']}")
    placement_sync.reconcile_all(conf, admin_context)
    assert _inventories(placement, a_rp) is None
    assert host_db.get(admin_context, 'host-a')['placement_synced']


def test_the_drop_survives_placement_away(
        conf, db, admin_context, placement):  # noqa: F811
    _gone_released(conf, admin_context, placement, 'host-a')
    _gone_released(conf, admin_context, placement, 'host-b')
    pf.placement_conf(conf, AWAY)
    assert placement_sync.drop_released_gone(conf, admin_context) == 0
    pf.placement_conf(conf, placement.url)
    assert placement_sync.drop_released_gone(conf, admin_context) == 2
