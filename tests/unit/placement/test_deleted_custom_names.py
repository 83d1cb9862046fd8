"""A custom trait or resource class deleted in Placement after this
process made it (an operator's clean-up, a rebuilt Placement database)
is made again by the next write that names it, against the real
(embedded) Placement: the client remembers the custom names it made, and
used to skip them for the life of the process, so every sync and
reconcile failed 400 until the conductor restarted."""

import uuid

import pytest
import requests

from cyborg.common import exception
from cyborg.conductor import inventory_apply, placement_sync
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

HOST = 'host1'
GPU = 'host1_0000:81:00.0'
ACCEL = 'host1_0000:82:00.0'


def _call(placement, method, path, body=None):
    resp = requests.request(method, placement.url + path, json=body,
                            headers=pf.HEADERS, timeout=10)
    assert resp.status_code < 300, resp.text
    return resp.json() if resp.content else None


def _report(conf, admin_context, placement, devices):
    pf.compute_node(conf, placement, HOST)
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(devices))


def _provider(placement, name, what):
    rp = inventory.provider_uuid(name)
    return rp, _call(placement, 'GET', f'/resource_providers/{rp}/{what}')


def test_a_deleted_custom_trait_is_made_again_by_the_reconcile(
        conf, db, admin_context, placement):
    _report(conf, admin_context, placement,
            [cf.device(HOST, '0000:81:00.0', traits=['CUSTOM_A'])])
    rp, traits = _provider(placement, GPU, 'traits')
    assert set(traits['traits']) == {'CUSTOM_A', 'OWNER_CYBORG'}
    # Drift: the trait taken off the provider and deleted.
    _call(placement, 'PUT', f'/resource_providers/{rp}/traits', {
        'resource_provider_generation':
            traits['resource_provider_generation'],
        'traits': ['OWNER_CYBORG']})
    _call(placement, 'DELETE', '/traits/CUSTOM_A')

    placement_sync.reconcile_all(conf, admin_context)

    _rp, traits = _provider(placement, GPU, 'traits')
    assert set(traits['traits']) == {'CUSTOM_A', 'OWNER_CYBORG'}


def test_a_deleted_custom_resource_class_is_made_again_by_the_reconcile(
        conf, db, admin_context, placement):
    _report(conf, admin_context, placement,
            [cf.device(HOST, '0000:82:00.0', dev_type='FPGA',
                       rc='CUSTOM_ACCEL', num=2)])
    rp, _inventories = _provider(placement, ACCEL, 'inventories')
    _call(placement, 'DELETE', f'/resource_providers/{rp}/inventories')
    _call(placement, 'DELETE', '/resource_classes/CUSTOM_ACCEL')

    placement_sync.reconcile_all(conf, admin_context)

    _rp, inventories = _provider(placement, ACCEL, 'inventories')
    assert inventories['inventories']['CUSTOM_ACCEL']['total'] == 2


def test_a_reshape_naming_a_deleted_class_makes_it_again(conf, placement):
    """The first inventories of new providers go in one reshape."""
    pf.placement_conf(conf, placement.url)
    client = placement_client.PlacementClient(conf)
    rp = client.create_provider(str(uuid.uuid4()), 'cn', None)
    client.ensure_resource_classes(['CUSTOM_ACCEL'])
    _call(placement, 'DELETE', '/resource_classes/CUSTOM_ACCEL')

    assert client.reshape_inventories({rp['uuid']: (rp['generation'], {
        'CUSTOM_ACCEL': {'total': 2, 'max_unit': 2}})})

    assert client.get_inventories(rp['uuid'])[1]['CUSTOM_ACCEL'][
        'total'] == 2


def test_an_unknown_standard_trait_is_neither_made_nor_sent_again(
        conf, placement):
    """A standard trait Placement does not know (os-traits newer than
    Placement) is not ours to make: the 400 stands."""
    pf.placement_conf(conf, placement.url)
    client = placement_client.PlacementClient(conf)
    rp = client.create_provider(str(uuid.uuid4()), 'cn', None)['uuid']
    calls = client.calls
    with pytest.raises(exception.PlacementError) as info:
        client.set_traits(rp, {'HW_NO_SUCH_TRAIT'})
    assert placement_client.unknown_names(info.value), info.value
    assert client.calls - calls == 2  # the generation read, the PUT
