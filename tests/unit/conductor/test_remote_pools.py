"""Remote pools in the conductor, on SQLite against the real (embedded)
Placement and a recording Nova: a bind through the fake fabric, a detach
the fabric refuses (the handle stays out of use, the pool cannot go) and
the reconcile that detaches it at last."""

import concurrent.futures
import json
import uuid as uuidlib

import pytest
import requests

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import fake
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http

placement_url = seed.placement_url
fake_nova = recording_http.fake_nova
AGGREGATE = str(uuidlib.uuid4())
HOST = 'compute-rp'


@pytest.fixture
def pconf(conf, db, placement_url, fake_nova, tmp_path):
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    conf.set_override('fake_state_dir', str(tmp_path), group='fabric')
    placement_client.reset_clients()
    return conf


def _placement(url, method, path, body=None):
    response = requests.request(method, url + path, json=body,
                                headers=placement_fixture.HEADERS,
                                timeout=10)
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


def _compute_node(url, name):
    node = str(uuidlib.uuid4())
    _placement(url, 'POST', '/resource_providers', {'name': name,
                                                    'uuid': node})
    _placement(url, 'PUT', f'/resource_providers/{node}/aggregates',
               {'aggregates': [AGGREGATE],
                'resource_provider_generation': 0})
    return node


def _pool_on_a_new_host(pconf, ctx, placement_url, *addresses):
    """(host, pool uuid, pool row): a compute node in AGGREGATE and a fake
    fabric's pool of ``addresses`` for that aggregate."""
    host = HOST + uuidlib.uuid4().hex[:6]
    _compute_node(placement_url, host)
    pool_uuid = remote_pools.create(pconf, ctx, {
        'name': 'pool-' + host, 'resource_class': 'CUSTOM_REMOTE_GPU',
        'aggregates': [AGGREGATE], 'fabric_driver': 'fake',
        'handles': [{'fabric_address': a} for a in addresses]})
    return host, pool_uuid, pool_db.get(ctx, uuid=pool_uuid)


def _reserved(url, rp_uuid):
    return _placement(url, 'GET', f'/resource_providers/{rp_uuid}/'
                      'inventories')['inventories']['CUSTOM_REMOTE_GPU'][
        'reserved']


def _bound(pconf, db, placement_url, address):
    """A pool of one handle at ``address`` on a new host, bound to a new
    instance: (context, host, pool uuid, pool row, instance uuid)."""
    ctx = cyborg_context.get_admin_context()
    host, pool_uuid, pool = _pool_on_a_new_host(pconf, ctx, placement_url,
                                                address)
    profile = seed.seed_profile(db, [{'resources:CUSTOM_REMOTE_GPU': '1'}])
    arq, = arq_binding.create(ctx, profile, 'p1')
    instance = str(uuidlib.uuid4())
    arq_binding.start_bind(pconf, ctx, {arq['uuid']: {
        'hostname': host, 'device_rp_uuid': pool.rp_uuid,
        'instance_uuid': instance}}).result(30)
    return ctx, host, pool_uuid, pool, instance


def test_refused_detach_keeps_the_handle_until_reconciled(
        pconf, db, placement_url, tmp_path):
    ctx, host, pool_uuid, pool, instance = _bound(pconf, db, placement_url,
                                                  'gpu-7')
    assert fake.attached(str(tmp_path)) == {'gpu-7': {
        'hostname': host, 'instance_uuid': instance,
        'handle': pool_db.handles(ctx, [pool.id])[0].uuid}}

    (tmp_path / fake.FAIL_DETACH).write_text('')
    assert arq_binding.delete(pconf, ctx, instance_uuid=instance) == []
    handle, = pool_db.handles(ctx, [pool.id])
    # The ARQ is gone, but the accelerator is still attached to the host:
    # the handle is not given to anyone else, and the pool cannot go.
    assert handle.in_use and handle.hostname == host
    assert json.loads(handle.attach_info)['detach_failed'] == 'true'
    # Nor does Placement offer it once Nova lets the instance's
    # allocation go: reserved, from the delete on.
    assert _reserved(placement_url, pool.rp_uuid) == 1
    with pytest.raises(exception.InUse):
        remote_pools.delete(pconf, ctx, pool_uuid)
    remote_pools.reconcile(pconf, ctx)
    assert pool_db.handles(ctx, [pool.id])[0].in_use
    assert _reserved(placement_url, pool.rp_uuid) == 1

    (tmp_path / fake.FAIL_DETACH).unlink()
    assert remote_pools.reconcile(pconf, ctx) == 1
    handle, = pool_db.handles(ctx, [pool.id])
    assert not handle.in_use and handle.hostname is None
    assert json.loads(handle.attach_info) == {'fabric_address': 'gpu-7'}
    assert fake.attached(str(tmp_path)) == {}
    assert _reserved(placement_url, pool.rp_uuid) == 0
    remote_pools.delete(pconf, ctx, pool_uuid)
    assert pool_db.get(ctx, uuid=pool_uuid) is None


def test_the_host_is_checked_outside_the_bind_transaction(
        pconf, db, placement_url, monkeypatch):
    """Whether the host is in one of the pool's aggregates is asked of
    Placement before the bind's transaction opens (then one that holds its
    ARQs, handles and the pool row), and asked again for no other reason."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = _pool_on_a_new_host(pconf, ctx, placement_url,
                                                 'gpu-1', 'gpu-2')
    profile = seed.seed_profile(db, [{'resources:CUSTOM_REMOTE_GPU': '2'}])
    arqs = [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]
    instance = str(uuidlib.uuid4())
    asked = []
    with databases.transactions(db) as seen:
        for name in ('get_provider_by_name', 'get_aggregates'):
            real = getattr(placement_client.PlacementClient, name)

            def asking(self, *args, _name=name, _real=real):
                asked.append((_name, seen.open()))
                return _real(self, *args)
            monkeypatch.setattr(placement_client.PlacementClient, name,
                                asking)
        arq_binding.start_bind(pconf, ctx, {arq: {
            'hostname': host, 'device_rp_uuid': pool.rp_uuid,
            'instance_uuid': instance} for arq in arqs}).result(30)
    # Once for the pool and host both ARQs name, with no transaction open.
    assert asked == [('get_provider_by_name', False),
                     ('get_aggregates', False)]
    assert {row.state for row in seed.arq_rows(db).values()} == {'Bound'}


def test_reconcile_repairs_the_provider(pconf, db, placement_url):
    ctx = cyborg_context.get_admin_context()
    pool_uuid = remote_pools.create(pconf, ctx, {
        'name': 'drift', 'resource_class': 'FPGA', 'traits': ['CUSTOM_X'],
        'aggregates': [AGGREGATE], 'fabric_driver': 'fake',
        'handles': [{'fabric_address': 'a'}, {'fabric_address': 'b'}]})
    rp = pool_db.get(ctx, uuid=pool_uuid).rp_uuid
    # Someone takes the provider out of its aggregate and its traits.
    generation = _placement(placement_url, 'GET',
                            f'/resource_providers/{rp}')['generation']
    _placement(placement_url, 'PUT', f'/resource_providers/{rp}/traits',
               {'traits': [], 'resource_provider_generation': generation})
    _placement(placement_url, 'PUT', f'/resource_providers/{rp}/aggregates',
               {'aggregates': [],
                'resource_provider_generation': generation + 1})
    remote_pools.reconcile(pconf, ctx)
    traits = set(_placement(placement_url, 'GET', f'/resource_providers/'
                            f'{rp}/traits')['traits'])
    assert traits == {'CUSTOM_X', 'MISC_SHARES_VIA_AGGREGATE',
                      'OWNER_CYBORG'}
    assert _placement(placement_url, 'GET', f'/resource_providers/{rp}/'
                      'aggregates')['aggregates'] == [AGGREGATE]
    inventory = _placement(placement_url, 'GET', f'/resource_providers/'
                           f'{rp}/inventories')['inventories']
    assert (inventory['FPGA']['total'], inventory['FPGA']['max_unit']) == (
        2, 2)


def test_a_sync_that_read_the_handles_first_does_not_undo_a_release(
        pconf, db, placement_url, tmp_path):
    """A pool's sync read its handles (one held after a refused detach),
    then the provider's inventory; a reconcile that detached the handle
    and synced between the two left the sync 'correcting' the inventory
    back to reserved: the free handle out of the schedule until the next
    reconcile.  The inventory (its generation) is read first now."""
    ctx, _host, _pool_uuid, pool, instance = _bound(pconf, db,
                                                    placement_url, 'gpu-8')
    (tmp_path / fake.FAIL_DETACH).write_text('')
    arq_binding.delete(pconf, ctx, instance_uuid=instance)
    assert _reserved(placement_url, pool.rp_uuid) == 1
    (tmp_path / fake.FAIL_DETACH).unlink()
    with placement_fixture.held(
            pconf, placement_url, 'GET',
            f'/resource_providers/{pool.rp_uuid}/inventories') as gate:
        with concurrent.futures.ThreadPoolExecutor(1) as pool_sync:
            syncing = pool_sync.submit(remote_pools.sync, pconf, ctx, pool)
            assert gate.arrived.wait(30)
            assert remote_pools.reconcile(pconf, ctx) == 1
            assert not pool_db.handles(ctx, [pool.id])[0].in_use
            gate.go.set()
            syncing.result(30)
    assert _reserved(placement_url, pool.rp_uuid) == 0


def test_a_provider_name_taken_in_placement_is_a_409(pconf, db,
                                                      placement_url):
    """A provider another service (or an operator) made holds the pool's
    provider name: a conflict to resolve, not Placement being away (it
    answered 503), and nothing is left behind."""
    ctx = cyborg_context.get_admin_context()
    _placement(placement_url, 'POST', '/resource_providers', {
        'name': remote_pools.provider_name('taken')})
    with pytest.raises(exception.Conflict) as caught:
        remote_pools.create(pconf, ctx, {
            'name': 'taken', 'resource_class': 'FPGA',
            'aggregates': [AGGREGATE], 'fabric_driver': 'fake',
            'handles': [{'fabric_address': 'a'}]})
    assert caught.value.code == 409
    assert 'remote_pool_taken' in str(caught.value)
    assert pool_db.get(ctx, name='taken') is None


# -- the handle is taken in the PATCH ----------------------------------------

def test_a_remote_bind_that_finds_no_free_handle_is_refused(
        pconf, db, placement_url, fake_nova, tmp_path):
    """A remote pool with no free handle refuses the PATCH (400, nothing
    written), as a device with no free attach handle does: answered 202
    and failed right after, Nova booted the instance without its device
    (it takes every resolved ARQ for done without reading its state)."""
    ctx, host, _pool_uuid, pool, first = _bound(pconf, db, placement_url,
                                                'gpu-1')
    fake_nova.wait_for_events(1)
    profile = seed.seed_profile(db, [{'resources:CUSTOM_REMOTE_GPU': '1'}])
    arq, = arq_binding.create(ctx, profile, 'p1')
    with pytest.raises(exception.BindFailed) as e:
        arq_binding.start_bind(pconf, ctx, {arq['uuid']: {
            'hostname': host, 'device_rp_uuid': pool.rp_uuid,
            'instance_uuid': str(uuidlib.uuid4())}})
    assert e.value.code == 400
    assert str(e.value) == (f'Binding failed: no free handle in remote '
                            f'pool {pool.name}')
    row = seed.arq_rows(db)[arq['uuid']]
    assert (row.state, row.hostname, row.instance_uuid, row.remote_pool_id,
            row.remote_handle_id, row.bind_id) == (
        'Initial', None, None, None, None, None)
    # The first bind's handle alone is in use, attached for it.
    assert [h.in_use for h in pool_db.handles(ctx, [pool.id])] == [True]
    assert [a['instance_uuid'] for a in
            fake.attached(str(tmp_path)).values()] == [first]
    assert [e['server_uuid'] for e in fake_nova.events] == [first]


class _HeldWork:
    """Stands for the bind workers: keeps the background work of a bind
    until the test runs it (``run``)."""

    def __init__(self):
        self.calls = []

    def submit(self, fn, *args):
        future = concurrent.futures.Future()
        self.calls.append((future, fn, args))
        return future

    def run(self):
        for future, fn, args in self.calls:
            future.set_result(fn(*args))


def test_a_remote_bind_holds_its_handle_from_the_patch_on(
        pconf, db, placement_url, fake_nova, tmp_path, monkeypatch):
    """The handle is taken in the PATCH's transaction: its ARQ holds it in
    BindStarted before any attach; the attach, in the background, uses
    that handle and ends Bound."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = _pool_on_a_new_host(pconf, ctx, placement_url,
                                                 'gpu-1')
    held = _HeldWork()
    monkeypatch.setattr(arq_binding, '_executor', lambda conf: held)
    profile = seed.seed_profile(db, [{'resources:CUSTOM_REMOTE_GPU': '1'}])
    arq, = arq_binding.create(ctx, profile, 'p1')
    instance = str(uuidlib.uuid4())
    future = arq_binding.start_bind(pconf, ctx, {arq['uuid']: {
        'hostname': host, 'device_rp_uuid': pool.rp_uuid,
        'instance_uuid': instance}})
    handle, = pool_db.handles(ctx, [pool.id])
    row = seed.arq_rows(db)[arq['uuid']]
    assert (row.state, row.remote_handle_id) == ('BindStarted', handle.id)
    assert handle.in_use and fake.attached(str(tmp_path)) == {}

    held.run()
    future.result(30)
    fake_nova.wait_for_events(1)
    row = seed.arq_rows(db)[arq['uuid']]
    assert (row.state, row.remote_handle_id) == ('Bound', handle.id)
    assert fake.attached(str(tmp_path)) == {'gpu-1': {
        'hostname': host, 'instance_uuid': instance, 'handle': handle.uuid}}
    assert pool_db.handles(ctx, [pool.id])[0].hostname == host
    assert [e['server_uuid'] for e in fake_nova.events] == [instance]


def test_an_unbind_before_the_attach_frees_the_handle_unattached(
        pconf, db, placement_url, fake_nova, tmp_path, monkeypatch):
    """An ARQ unbound between the PATCH and its attach: the handle the
    PATCH took is kept out of use while the bind's attach may still land;
    the attach, when its turn comes, finds the handle no longer its
    bind's, attaches nothing and frees it."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = _pool_on_a_new_host(pconf, ctx, placement_url,
                                                 'gpu-1')
    held = _HeldWork()
    monkeypatch.setattr(arq_binding, '_executor', lambda conf: held)
    attaches = []
    real = fake.FakeFabricDriver.attach

    def counted(self, *args):
        attaches.append(args)
        return real(self, *args)
    monkeypatch.setattr(fake.FakeFabricDriver, 'attach', counted)
    profile = seed.seed_profile(db, [{'resources:CUSTOM_REMOTE_GPU': '1'}])
    arq, = arq_binding.create(ctx, profile, 'p1')
    future = arq_binding.start_bind(pconf, ctx, {arq['uuid']: {
        'hostname': host, 'device_rp_uuid': pool.rp_uuid,
        'instance_uuid': str(uuidlib.uuid4())}})
    arq_binding.unbind(pconf, ctx, [arq['uuid']])
    assert remote_pools.quarantined(pool_db.handles(ctx, [pool.id])[0])

    held.run()
    future.result(30)
    row = seed.arq_rows(db)[arq['uuid']]
    assert (row.state, row.remote_handle_id) == ('Unbound', None)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert fake.attached(str(tmp_path)) == {} and attaches == []
    assert fake_nova.events == []
