"""Remote pools: a handle is freed only once the fabric let it go.

Binds cut short (their conductor died, their ARQ deleted meanwhile, their
attach answered with an error), two conductors' reconciles and pool
deletions racing the releases, on SQLite against the real (embedded)
Placement and the fake fabric, whose ``attached.json`` says what is
really attached where.  Its own module: test_remote_pools.py holds the
fixtures and helpers these share."""

import concurrent.futures
import datetime
import json
import threading
import uuid as uuidlib

import pytest

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import states
from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db.api import clock as clock_db
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import calls as fabric_calls
from cyborg.fabric import fake
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.unit.conductor import test_remote_pools as base

placement_url = base.placement_url
fake_nova = base.fake_nova
pconf = base.pconf


class _Died(BaseException):
    """Stands for the conductor's process dying between the fabric's
    attach and the commit of Bound (nothing of the bind's own runs after
    it)."""


def _start(pconf, ctx, db, pool, host):
    """Start binding a new ARQ on ``pool`` for ``host``: (ARQ uuid,
    instance uuid, the bind's future)."""
    profile = seed.seed_profile(db, [{'resources:CUSTOM_REMOTE_GPU': '1'}])
    arq, = arq_binding.create(ctx, profile, 'p1')
    instance = str(uuidlib.uuid4())
    future = arq_binding.start_bind(pconf, ctx, {arq['uuid']: {
        'hostname': host, 'device_rp_uuid': pool.rp_uuid,
        'instance_uuid': instance}})
    return arq['uuid'], instance, future


def _other_host(placement_url):
    host = 'compute-other' + uuidlib.uuid4().hex[:6]
    base._compute_node(placement_url, host)
    return host


def _gated_attach(monkeypatch):
    """Make each fake attach wait, before the fabric attaches, until the
    test lets it go: {hostname: (arrived, go)} events, made on first use."""
    gates = {}
    real = fake.FakeFabricDriver.attach

    def gated(self, handle, hostname, instance_uuid):
        arrived, go = gates.setdefault(hostname, (threading.Event(),
                                                  threading.Event()))
        arrived.set()
        assert go.wait(30), 'the held attach was never let go'
        return real(self, handle, hostname, instance_uuid)
    monkeypatch.setattr(fake.FakeFabricDriver, 'attach', gated)
    return gates


def _gate(gates, host):
    return gates.setdefault(host, (threading.Event(), threading.Event()))


def _cut_short_and_kept(pconf, ctx, db, placement_url, tmp_path, monkeypatch,
                        address):
    """A bind whose conductor died once the fabric attached ``address``,
    failed at the restart while the fabric refused to detach: (host,
    pool), the handle kept out of use, still attached to host."""
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, address)

    def die(*args, **kwargs):
        raise _Died()
    monkeypatch.setattr(arq_binding, '_finish_remote', die)
    _arq, _instance, future = _start(pconf, ctx, db, pool, host)
    with pytest.raises(_Died):
        future.result(30)
    monkeypatch.undo()
    assert fake.attached(str(tmp_path))[address]['hostname'] == host

    (tmp_path / fake.FAIL_DETACH).write_text('')
    assert arq_binding.recover(
        pconf, ctx, clock_db.utcnow() + datetime.timedelta(seconds=5)) == 1
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    # Never Bound: the handle's hostname was never written.
    assert handle.hostname is None
    (tmp_path / fake.FAIL_DETACH).unlink()
    return host, pool


def test_a_bind_cut_short_is_detached_from_its_host(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The handle kept after a refused detach of a bind never Bound has
    no hostname; the reconcile's retry "detached" it from no host (which
    the fabric took for done) and freed it while still attached.  The
    host is recorded with the refusal, and the retry detaches from it."""
    ctx = cyborg_context.get_admin_context()
    host, pool = _cut_short_and_kept(pconf, ctx, db, placement_url,
                                     tmp_path, monkeypatch, 'gpu-x')
    handle, = pool_db.handles(ctx, [pool.id])
    assert json.loads(handle.attach_info)['hostname'] == host

    remote_pools.reconcile(pconf, ctx)
    handle, = pool_db.handles(ctx, [pool.id])
    assert not handle.in_use
    assert fake.attached(str(tmp_path)) == {}
    assert fake.journal(str(tmp_path))[-1]['hostname'] == host


def test_a_kept_handle_with_no_host_recorded_stays_out_of_use(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """A handle kept with no host known (kept by an older release, which
    did not record it): a retry cannot say what to detach it from, so it
    stays out of use rather than freed while attached."""
    ctx = cyborg_context.get_admin_context()
    host, pool = _cut_short_and_kept(pconf, ctx, db, placement_url,
                                     tmp_path, monkeypatch, 'gpu-n')
    handle, = pool_db.handles(ctx, [pool.id])
    info = json.loads(handle.attach_info)
    del info['hostname']
    pool_db.set_attach_info(ctx, handle.id, json.dumps(info))

    remote_pools.reconcile(pconf, ctx)
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert fake.attached(str(tmp_path))['gpu-n']['hostname'] == host
    assert [c for c in fake.journal(str(tmp_path))
            if c['op'] == 'detach' and c['hostname'] is None] == []


def test_a_delete_during_the_attach_keeps_the_handle_for_its_host(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """An ARQ deleted while the fabric attaches its handle, the fabric
    refusing both the delete's detach and the bind's own undo: the handle
    is kept with the ARQ's host, and the reconcile detaches it there."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-y')
    arrived, go = threading.Event(), threading.Event()
    real = fake.FakeFabricDriver.attach

    def attached_first(self, handle, hostname, instance_uuid):
        answer = real(self, handle, hostname, instance_uuid)
        arrived.set()
        assert go.wait(30)
        return answer
    monkeypatch.setattr(fake.FakeFabricDriver, 'attach', attached_first)
    _arq, instance, future = _start(pconf, ctx, db, pool, host)
    assert arrived.wait(30)
    (tmp_path / fake.FAIL_DETACH).write_text('')
    assert arq_binding.delete(pconf, ctx, instance_uuid=instance) == []
    go.set()
    future.result(30)
    (tmp_path / fake.FAIL_DETACH).unlink()
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)

    remote_pools.reconcile(pconf, ctx)
    handle, = pool_db.handles(ctx, [pool.id])
    assert not handle.in_use
    assert fake.attached(str(tmp_path)) == {}


def test_a_refused_undo_of_a_failed_attach_keeps_the_handle(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The fabric attached, then the driver raised (its call timed out),
    and refused the undo's detach: the failed bind freed the handle,
    still attached, and every later bind on another host took that
    (lowest) handle and failed on it.  It is kept out of use, reserved in
    Placement, until the reconcile detaches it."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-w', 'gpu-v')
    real = fake.FakeFabricDriver.attach

    def attach_then_time_out(self, handle, hostname, instance_uuid):
        real(self, handle, hostname, instance_uuid)
        (tmp_path / fake.FAIL_DETACH).write_text('')
        raise TimeoutError('fabric manager did not answer in time')
    monkeypatch.setattr(fake.FakeFabricDriver, 'attach',
                        attach_then_time_out)
    arq, _instance, future = _start(pconf, ctx, db, pool, host)
    future.result(30)
    monkeypatch.undo()
    (tmp_path / fake.FAIL_DETACH).unlink()
    failed = seed.arq_rows(db)[arq]
    assert failed.state == 'BindFailed'
    # The driver's text is the reason: the fabric's, not ours.
    assert failed.bind_failure_reason.endswith(
        f': the fake fabric did not attach gpu-w of remote pool '
        f'{pool.name} to {host}: fabric manager did not answer in time')
    kept = pool_db.handles(ctx, [pool.id])[0]
    assert kept.fabric_address == 'gpu-w'
    assert remote_pools.quarantined(kept)
    assert json.loads(kept.attach_info)['hostname'] == host
    assert base._reserved(placement_url, pool.rp_uuid) == 1

    # The next bind, on another host of the aggregate, gets the other.
    arq2, _i2, future2 = _start(pconf, ctx, db, pool,
                                _other_host(placement_url))
    future2.result(30)
    assert seed.arq_rows(db)[arq2].state == 'Bound'
    assert set(fake.attached(str(tmp_path))) == {'gpu-w', 'gpu-v'}

    remote_pools.reconcile(pconf, ctx)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert set(fake.attached(str(tmp_path))) == {'gpu-v'}


def test_a_lost_bind_whose_undo_is_refused_keeps_the_freed_handle(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """An ARQ deleted before the fabric attached its handle: the delete
    keeps the handle out of use (a detach would find nothing, and free it
    before the attach lands); the attach lands, and the bind (lost) could
    not undo it.  The handle stays out of use until the reconcile
    detaches it."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-l')
    gates = _gated_attach(monkeypatch)
    arrived, go = _gate(gates, host)
    _arq, instance, future = _start(pconf, ctx, db, pool, host)
    assert arrived.wait(30)
    assert arq_binding.delete(pconf, ctx, instance_uuid=instance) == []
    assert remote_pools.quarantined(pool_db.handles(ctx, [pool.id])[0])
    (tmp_path / fake.FAIL_DETACH).write_text('')
    go.set()
    future.result(30)
    (tmp_path / fake.FAIL_DETACH).unlink()
    assert fake.attached(str(tmp_path))['gpu-l']['hostname'] == host
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert base._reserved(placement_url, pool.rp_uuid) == 1

    remote_pools.reconcile(pconf, ctx)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert fake.attached(str(tmp_path)) == {}


def test_a_lost_bind_detaches_its_host_before_another_host_takes_it(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """A bind lost while attaching (its ARQ deleted): the delete freed
    the handle, a bind for another host took it meanwhile, and the
    fabric refused that bind (the address attached to the lost bind's
    host once its attach landed).  The handle is kept out of use until
    the lost bind's undo detached it; the other host's bind, refused
    while it is kept, then gets it."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-s')
    host2 = _other_host(placement_url)
    gates = _gated_attach(monkeypatch)
    _arq, instance, lost = _start(pconf, ctx, db, pool, host)
    assert _gate(gates, host)[0].wait(30)
    assert arq_binding.delete(pconf, ctx, instance_uuid=instance) == []
    assert remote_pools.quarantined(pool_db.handles(ctx, [pool.id])[0])
    assert base._reserved(placement_url, pool.rp_uuid) == 1
    with pytest.raises(exception.BindFailed, match='no free handle'):
        _start(pconf, ctx, db, pool, host2)
    # The lost bind's attach lands, then it finds its ARQ gone: undone.
    _gate(gates, host)[1].set()
    lost.result(30)
    handle, = pool_db.handles(ctx, [pool.id])
    assert not handle.in_use and fake.attached(str(tmp_path)) == {}
    assert base._reserved(placement_url, pool.rp_uuid) == 0
    _gate(gates, host2)[1].set()
    arq2, _i2, holding = _start(pconf, ctx, db, pool, host2)
    holding.result(30)
    row = seed.arq_rows(db)[arq2]
    assert (row.state, row.bind_failure_reason) == ('Bound', None)
    assert fake.attached(str(tmp_path))['gpu-s']['hostname'] == host2


def test_two_reconciles_free_no_handle_a_new_bind_holds(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """Two conductors' reconciles read the same kept handle.  A detaches
    and frees it, a new bind takes it and ends Bound on another host;
    then B's detach (from the old host: nothing there) works, and B freed
    the handle the new bind holds.  B frees it only as it read it."""
    ctx, _host, _pool_uuid, pool, instance = base._bound(
        pconf, db, placement_url, 'gpu-q')
    (tmp_path / fake.FAIL_DETACH).write_text('')
    arq_binding.delete(pconf, ctx, instance_uuid=instance)
    assert remote_pools.quarantined(pool_db.handles(ctx, [pool.id])[0])
    (tmp_path / fake.FAIL_DETACH).unlink()

    host2 = _other_host(placement_url)
    real_detaches = fabric_calls.call_each
    bound = []

    def a_passes_b(*args):
        # B's detach is on its way: A's reconcile runs meanwhile (with
        # the real detach), then Nova binds a new instance on host2.
        monkeypatch.setattr(fabric_calls, 'call_each', real_detaches)
        remote_pools._retry_detaches(pconf, ctx, pool)
        arq2, _i2, future = _start(pconf, ctx, db, pool, host2)
        future.result(30)
        bound.append(arq2)
        return real_detaches(*args)
    monkeypatch.setattr(fabric_calls, 'call_each', a_passes_b)
    remote_pools._retry_detaches(pconf, ctx, pool)   # conductor B
    row = seed.arq_rows(db)[bound[0]]
    assert row.state == 'Bound'
    handle, = pool_db.handles(ctx, [pool.id])
    assert (handle.in_use, handle.hostname) == (True, host2)
    assert row.remote_handle_id == handle.id


def _providers_named(url, name):
    return base._placement(url, 'GET', '/resource_providers?name=' +
                           name)['resource_providers']


def test_a_reconcile_that_read_a_pool_just_deleted_leaves_it_gone(
        pconf, db, placement_url, monkeypatch):
    """The reconcile read the pool (active) just before an admin deleted
    it; its sync created the provider again, with inventory, traits and
    aggregates: Placement offered a pool that no longer exists."""
    ctx = cyborg_context.get_admin_context()
    _host, pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-z')
    real_get_all = pool_db.get_all

    def deleted_once_read(context, name=None):
        pools = real_get_all(context, name=name)
        remote_pools.delete(pconf, ctx, pool_uuid)
        return pools
    monkeypatch.setattr(pool_db, 'get_all', deleted_once_read)
    assert remote_pools.reconcile(pconf, ctx) == 0
    assert pool_db.get(ctx, uuid=pool_uuid) is None
    assert _providers_named(placement_url,
                            remote_pools.provider_name(pool.name)) == []


def test_a_pool_deleted_while_its_provider_is_created_leaves_it_gone(
        pconf, db, placement_url):
    """The deletion runs whole while the sync's creation of the provider
    is on its way (read active just before): the sync removes what it
    created once it finds the pool gone."""
    ctx = cyborg_context.get_admin_context()
    _host, pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-g')
    with placement_fixture.held(pconf, placement_url, 'POST',
                                '/resource_providers') as gate:
        with concurrent.futures.ThreadPoolExecutor(1) as conductor:
            reconciling = conductor.submit(remote_pools.reconcile, pconf,
                                           ctx)
            assert gate.arrived.wait(30)
            remote_pools.delete(pconf, ctx, pool_uuid)
            gate.go.set()
            assert reconciling.result(30) == 0
    assert pool_db.get(ctx, uuid=pool_uuid) is None
    assert _providers_named(placement_url,
                            remote_pools.provider_name(pool.name)) == []


def test_a_pool_with_a_kept_handle_is_not_marked_deleting(
        pconf, db, placement_url, tmp_path):
    """The deletion checked the handles in use, then (in another
    transaction) that no ARQ holds the pool: a release keeping a handle
    out of use in between (the ARQ gone, the handle still attached) let
    the pool and that handle go.  Both are checked under the pool's
    lock."""
    ctx, _host, pool_uuid, pool, instance = base._bound(
        pconf, db, placement_url, 'gpu-d')
    (tmp_path / fake.FAIL_DETACH).write_text('')
    arq_binding.delete(pconf, ctx, instance_uuid=instance)
    assert pool_db.holders(ctx, pool.id) == []
    assert remote_pools.quarantined(pool_db.handles(ctx, [pool.id])[0])
    assert not pool_db.start_deleting(ctx, pool.id)
    assert pool_db.get(ctx, uuid=pool_uuid).state == states.POOL_ACTIVE
