"""The Placement client against the real (embedded) Placement."""

import uuid

import pytest

from cyborg.common import exception
from cyborg.placement import client as placement_client
from tests.fixtures import placement as placement_fixture


@pytest.fixture
def client(conf, placement):
    placement_fixture.placement_conf(conf, placement.url)
    return placement_client.PlacementClient(conf)


def _new_uuid():
    return str(uuid.uuid4())


def test_nested_provider_with_inventory_and_traits(client):
    cn = client.create_provider(_new_uuid(), 'cn1', None)
    child = client.create_provider(_new_uuid(), 'cn1_0000:0c:00.0',
                                   cn['uuid'])
    client.ensure_resource_classes(['CUSTOM_ACCEL', 'FPGA'])
    client.ensure_traits(['CUSTOM_FAKE', 'OWNER_CYBORG'])
    inventory = {'CUSTOM_ACCEL': {'total': 4, 'max_unit': 4, 'reserved': 4}}
    gen = client.set_inventories(child['uuid'], inventory)
    gen = client.set_traits(child['uuid'], {'CUSTOM_FAKE', 'OWNER_CYBORG'},
                            generation=gen)
    got_gen, got = client.get_inventories(child['uuid'])
    assert got_gen == gen
    assert got['CUSTOM_ACCEL']['reserved'] == 4
    assert client.get_traits(child['uuid'])[1] == {'CUSTOM_FAKE',
                                                   'OWNER_CYBORG'}
    tree = client.list_tree(cn['uuid'])
    assert {p['uuid'] for p in tree} == {cn['uuid'], child['uuid']}
    owned = client.list_tree(cn['uuid'], required=['OWNER_CYBORG'])
    assert [p['uuid'] for p in owned] == [child['uuid']]
    assert client.get_provider_by_name('cn1')['uuid'] == cn['uuid']
    assert client.get_provider_by_name('nope') is None


def test_create_adopts_and_reparents_an_existing_provider(client):
    cn1 = client.create_provider(_new_uuid(), 'cn1', None)
    cn2 = client.create_provider(_new_uuid(), 'cn2', None)
    rp = _new_uuid()
    client.create_provider(rp, 'dev', cn1['uuid'])
    adopted = client.create_provider(rp, 'dev', cn2['uuid'])
    assert adopted['parent_provider_uuid'] == cn2['uuid']
    assert client.get_provider(rp)['parent_provider_uuid'] == cn2['uuid']


def test_stale_generation_is_retried(client):
    rp = client.create_provider(_new_uuid(), 'cn', None)['uuid']
    client.set_traits(rp, {'HW_CPU_X86_AVX'})
    # Generation 0 is stale now: the client re-reads and succeeds.
    gen = client.set_inventories(rp, {'VCPU': {'total': 2}}, generation=0)
    assert client.get_inventories(rp)[0] == gen


def test_missing_provider_and_tree_raise_not_found(client):
    with pytest.raises(placement_client.ProviderNotFound):
        client.list_tree(_new_uuid())
    with pytest.raises(placement_client.ProviderNotFound):
        client.set_traits(_new_uuid(), set())
    assert client.delete_provider(_new_uuid()) is False


def test_delete_refused_while_allocated(client, placement):
    rp = client.create_provider(_new_uuid(), 'cn', None)['uuid']
    client.set_inventories(rp, {'FPGA': {'total': 1}})
    consumer = _new_uuid()
    placement_fixture.hold_allocation(placement.url, consumer,
                                      {rp: {'FPGA': 1}})
    assert set(client.get_allocations(rp)) == {consumer}
    with pytest.raises(placement_client.ProviderInUse):
        client.delete_provider(rp)


def test_unknown_trait_is_a_clear_error(client):
    rp = client.create_provider(_new_uuid(), 'cn', None)['uuid']
    with pytest.raises(exception.PlacementError, match='CUSTOM_NOT_MADE'):
        client.set_traits(rp, {'CUSTOM_NOT_MADE'})


def test_unreachable_placement_is_a_503(conf):
    placement_fixture.placement_conf(conf, 'http://127.0.0.1:9')
    client = placement_client.PlacementClient(conf)
    with pytest.raises(exception.PlacementError) as err:
        client.get_provider_by_name('x')
    assert err.value.code == 503


def test_get_client_follows_the_configured_endpoint(conf, placement):
    placement_fixture.placement_conf(conf, placement.url)
    first = placement_client.get_client(conf)
    assert placement_client.get_client(conf) is first
    placement_fixture.placement_conf(conf, 'http://127.0.0.1:9')
    assert placement_client.get_client(conf) is not first
