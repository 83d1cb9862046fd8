"""A card of another kind in a slot whose old card an instance still
holds (its resource class changes, PGPU -> FPGA): Placement refuses to
drop the class the allocation holds.  The provider used to keep offering
the old class with nothing reserved and the old traits (the traits PUT
came after the refused one), every report and reconcile failing the same
way: Nova could schedule a GPU flavor on it and the bind would hand out
the FPGA's function.  Now the old class is kept reserved whole, the new
one is written reserved whole too, the traits are written, and the first
sync after the allocation ends writes what the rows say."""

import pytest
import requests

from cyborg.conductor import inventory_apply, placement_sync
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory
from cyborg.placement import provider_tree
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

placement = pf.placement

HOST = 'host1'
SLOT = '0000:81:00.0'
RP = inventory.provider_uuid(f'{HOST}_{SLOT}')


def _call(service, method, path, body=None):
    resp = requests.request(method, service.url + path, json=body,
                            headers=pf.HEADERS, timeout=10)
    assert resp.status_code < 300, resp.text
    return resp.json() if resp.content else None


def _provider(service):
    """(generation, {rc: (total, reserved)}, traits) of the slot's
    provider."""
    invs = _call(service, 'GET', f'/resource_providers/{RP}/inventories')
    traits = _call(service, 'GET', f'/resource_providers/{RP}/traits')
    return (invs['resource_provider_generation'],
            {rc: (v['total'], v['reserved'])
             for rc, v in invs['inventories'].items()},
            set(traits['traits']))


def _devices(kind):
    other = cf.device(HOST, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                      num=4, handles=4)
    if kind == 'gpu':
        return [cf.device(HOST, SLOT, traits=['CUSTOM_GPU_A100']), other]
    return [cf.device(HOST, SLOT, dev_type='FPGA', rc='FPGA',
                      traits=['CUSTOM_FPGA_Y']), other]


@pytest.mark.parametrize('reached_by', ['report', 'reconcile'])
def test_a_card_of_another_kind_is_never_offered_as_the_held_one(
        reached_by, conf, db, admin_context, placement):
    pf.placement_conf(conf, placement.url)
    _call(placement, 'POST', '/resource_providers', {'name': HOST})
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(_devices('gpu')))
    pf.hold_allocation(placement.url, pf.PROJECT, {RP: {'PGPU': 1}})
    swapped = cf.report(_devices('fpga'))
    inventory_apply.handle_report(conf, admin_context, HOST, swapped)
    if reached_by == 'reconcile':
        # Edited back by hand: the reconcile meets the refusal the same
        # way (it compares, then writes what differs).
        generation, _invs, _traits = _provider(placement)
        _call(placement, 'PUT', f'/resource_providers/{RP}/inventories', {
            'resource_provider_generation': generation,
            'inventories': {'PGPU': {'total': 1, 'max_unit': 1}}})
        _call(placement, 'PUT', f'/resource_providers/{RP}/traits', {
            'resource_provider_generation': generation + 1,
            'traits': ['CUSTOM_GPU_A100', 'OWNER_CYBORG']})
        placement_sync.reconcile_all(conf, admin_context)

    generation, invs, traits = _provider(placement)
    # The held class stays, never offered; the new card is not offered
    # either while the instance's request may hold the slot's function.
    assert invs == {'PGPU': (1, 1), 'FPGA': (1, 1)}
    assert traits == {'CUSTOM_FPGA_Y', 'OWNER_CYBORG'}
    assert _call(placement, 'GET', f'/resource_providers/{RP}/allocations'
                 )['allocations'][pf.PROJECT]['resources'] == {'PGPU': 1}
    assert host_db.get(admin_context, HOST)['placement_synced']

    # While the allocation lasts, the agent's reports and the reconcile
    # leave the provider as it is, without failing.
    reply = inventory_apply.handle_report(
        conf, admin_context, HOST, cf.unchanged(_devices('fpga')))
    assert reply['need_full'] is False
    placement_sync.reconcile_all(conf, admin_context)
    assert _provider(placement) == (generation, invs, traits)
    assert host_db.get(admin_context, HOST)['placement_synced']

    # The instance ends: the next reconcile moves it to the new card.
    pf.hold_allocation(placement.url, pf.PROJECT, {})
    placement_sync.reconcile_all(conf, admin_context)
    _generation, invs, traits = _provider(placement)
    assert invs == {'FPGA': (1, 0)}
    assert traits == {'CUSTOM_FPGA_Y', 'OWNER_CYBORG'}
    assert host_db.get(admin_context, HOST)['placement_synced']


def test_bridged_keeps_only_held_classes_and_reserves_all_whole():
    new = {'FPGA': {'total': 4, 'reserved': 0, 'min_unit': 1,
                    'max_unit': 4, 'step_size': 1, 'allocation_ratio': 1.0}}
    old = {'PGPU': {'total': 2, 'reserved': 0, 'min_unit': 1,
                    'max_unit': 2, 'step_size': 1, 'allocation_ratio': 1.0},
           'CUSTOM_X': {'total': 1, 'reserved': 0, 'min_unit': 1,
                        'max_unit': 1, 'step_size': 1,
                        'allocation_ratio': 1.0}}
    bridged = provider_tree.bridged(new, old, {'PGPU'})
    assert {rc: (v['total'], v['reserved'])
            for rc, v in bridged.items()} == {'FPGA': (4, 4),
                                              'PGPU': (2, 2)}
    # Nothing held any more: what the rows say.
    assert provider_tree.bridged(new, old, set()) is new
    assert provider_tree.bridged(new, dict(old, **new), {'FPGA'}) is new
