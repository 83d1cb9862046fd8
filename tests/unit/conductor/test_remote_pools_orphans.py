"""Remote pools: the reconcile removes the providers of pools that are
gone.

A pool's provider left in Placement with no pool row naming it (a
registration whose undo could not reach Placement, a conductor that died
between removing the rows and the provider) stayed for good, and
Placement went on offering its inventory.  The pool's row is removed
here behind cyborg's back, as such a failure leaves it; on SQLite
against the real (embedded) Placement, as test_remote_pools.py, whose
fixtures these share."""

import logging
import uuid as uuidlib

from cyborg.common import context as cyborg_context
from cyborg.conductor import remote_pools
from cyborg.db.api import remote_pools as pool_db
from cyborg.placement import client as placement_client
from tests.fixtures import placement as placement_fixture
from tests.unit.conductor import test_remote_pools as base

placement_url = base.placement_url
fake_nova = base.fake_nova
pconf = base.pconf


def _provider(url, rp_uuid):
    providers = base._placement(url, 'GET', '/resource_providers?uuid=' +
                                rp_uuid)['resource_providers']
    return providers[0] if providers else None


def _orphaned(pconf, ctx, placement_url, address):
    """A registered pool whose rows are gone, its provider left: the pool
    row as it was."""
    _host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, address)
    pool_db.delete(ctx, pool.id)
    assert _provider(placement_url, pool.rp_uuid) is not None
    return pool


def test_the_provider_of_a_pool_gone_is_removed(pconf, db, placement_url):
    ctx = cyborg_context.get_admin_context()
    orphan = _orphaned(pconf, ctx, placement_url, 'gpu-o')
    _host, _uuid, kept = base._pool_on_a_new_host(pconf, ctx, placement_url,
                                                  'gpu-k')
    # Not cyborg's pool providers: one named like them but without their
    # traits, one with their traits and another name.
    by_hand = str(uuidlib.uuid4())
    base._placement(placement_url, 'POST', '/resource_providers', {
        'uuid': by_hand, 'name': remote_pools.provider_name('by-hand')})
    other = str(uuidlib.uuid4())
    base._placement(placement_url, 'POST', '/resource_providers', {
        'uuid': other, 'name': 'someone-elses-share'})
    base._placement(placement_url, 'PUT',
                    f'/resource_providers/{other}/traits',
                    {'traits': sorted(remote_pools.desired_traits(kept)),
                     'resource_provider_generation': 0})

    remote_pools.reconcile(pconf, ctx)
    assert _provider(placement_url, orphan.rp_uuid) is None
    for rp_uuid in (kept.rp_uuid, by_hand, other):
        assert _provider(placement_url, rp_uuid) is not None
    # Nothing left to remove.
    assert remote_pools.remove_orphans(pconf, ctx) == 0


def test_a_provider_with_allocations_is_left_until_they_go(
        pconf, db, placement_url, caplog):
    ctx = cyborg_context.get_admin_context()
    orphan = _orphaned(pconf, ctx, placement_url, 'gpu-a')
    consumer = str(uuidlib.uuid4())
    base._placement(placement_url, 'PUT', f'/allocations/{consumer}', {
        'allocations': {orphan.rp_uuid: {
            'resources': {'CUSTOM_REMOTE_GPU': 1}}},
        'project_id': placement_fixture.PROJECT,
        'user_id': placement_fixture.PROJECT, 'consumer_generation': None,
        'consumer_type': 'INSTANCE'})

    with caplog.at_level(logging.WARNING, logger=remote_pools.__name__):
        remote_pools.remove_orphans(pconf, ctx)
    assert _provider(placement_url, orphan.rp_uuid) is not None
    assert any(orphan.rp_uuid in r.getMessage() and
               'allocations' in r.getMessage() for r in caplog.records)

    base._placement(placement_url, 'DELETE', f'/allocations/{consumer}')
    remote_pools.reconcile(pconf, ctx)
    assert _provider(placement_url, orphan.rp_uuid) is None


def _offered(url, rp_uuid):
    """Whether Placement offers ``rp_uuid`` in allocation candidates for
    one unit of the pools' resource class."""
    candidates = base._placement(
        url, 'GET', '/allocation_candidates?resources=CUSTOM_REMOTE_GPU:1')
    return any(rp_uuid in request['allocations']
               for request in candidates['allocation_requests'])


def test_a_provider_left_for_its_allocations_is_offered_to_no_one(
        pconf, db, placement_url):
    """The provider of a pool that is gone, left while an instance's
    allocation holds it, was still offered for its free units: Nova
    scheduled onto a pool cyborg cannot bind, and each such boot failed.
    Its inventory is reserved whole until the allocation goes (which
    stays), then the provider goes."""
    ctx = cyborg_context.get_admin_context()
    _host, _uuid, orphan = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-w1', 'gpu-w2')
    pool_db.delete(ctx, orphan.id)
    consumer = str(uuidlib.uuid4())
    base._placement(placement_url, 'PUT', f'/allocations/{consumer}', {
        'allocations': {orphan.rp_uuid: {
            'resources': {'CUSTOM_REMOTE_GPU': 1}}},
        'project_id': placement_fixture.PROJECT,
        'user_id': placement_fixture.PROJECT, 'consumer_generation': None,
        'consumer_type': 'INSTANCE'})
    assert _offered(placement_url, orphan.rp_uuid)

    remote_pools.reconcile(pconf, ctx)
    assert not _offered(placement_url, orphan.rp_uuid)
    inventory = base._placement(
        placement_url, 'GET', f'/resource_providers/{orphan.rp_uuid}/'
        'inventories')['inventories']['CUSTOM_REMOTE_GPU']
    assert (inventory['total'], inventory['reserved']) == (2, 2)
    # The instance keeps what it holds.
    held = base._placement(placement_url, 'GET',
                           f'/allocations/{consumer}')['allocations']
    assert {rp: a['resources'] for rp, a in held.items()} == {
        orphan.rp_uuid: {'CUSTOM_REMOTE_GPU': 1}}
    # Written once: the next reconcile finds it reserved already.
    generation = _provider(placement_url, orphan.rp_uuid)['generation']
    remote_pools.reconcile(pconf, ctx)
    assert _provider(placement_url,
                     orphan.rp_uuid)['generation'] == generation

    base._placement(placement_url, 'DELETE', f'/allocations/{consumer}')
    remote_pools.reconcile(pconf, ctx)
    assert _provider(placement_url, orphan.rp_uuid) is None


def test_a_provider_adopted_meanwhile_is_not_reserved(
        pconf, db, placement_url, monkeypatch):
    """A registration under the gone pool's name adopted its provider
    between the refused delete and the reserving: the provider is the
    new pool's, whose inventory stays as its sync wrote it."""
    ctx = cyborg_context.get_admin_context()
    host, _uuid, orphan = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-r1', 'gpu-r2')
    pool_db.delete(ctx, orphan.id)
    consumer = str(uuidlib.uuid4())
    base._placement(placement_url, 'PUT', f'/allocations/{consumer}', {
        'allocations': {orphan.rp_uuid: {
            'resources': {'CUSTOM_REMOTE_GPU': 1}}},
        'project_id': placement_fixture.PROJECT,
        'user_id': placement_fixture.PROJECT, 'consumer_generation': None,
        'consumer_type': 'INSTANCE'})
    real = placement_client.PlacementClient.delete_provider

    def adopted_once_refused(self, uuid):
        try:
            return real(self, uuid)
        except placement_client.ProviderInUse:
            remote_pools.create(pconf, ctx, {
                'name': orphan.name, 'resource_class': 'CUSTOM_REMOTE_GPU',
                'aggregates': [base.AGGREGATE], 'fabric_driver': 'fake',
                'handles': [{'fabric_address': 'gpu-r1'},
                            {'fabric_address': 'gpu-r2'}]})
            raise
    monkeypatch.setattr(placement_client.PlacementClient, 'delete_provider',
                        adopted_once_refused)
    remote_pools.remove_orphans(pconf, ctx)
    assert pool_db.get(ctx, rp_uuid=orphan.rp_uuid) is not None
    assert base._reserved(placement_url, orphan.rp_uuid) == 0
    assert _offered(placement_url, orphan.rp_uuid)
    base._placement(placement_url, 'DELETE', f'/allocations/{consumer}')
