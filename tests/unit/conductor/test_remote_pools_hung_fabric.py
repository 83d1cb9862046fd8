"""Remote pools: a fabric manager that hangs holds no conductor thread.

The fake fabric hangs while its ``hang`` file is there (every call waits,
unanswered; removed, the calls go on and do what they were asked).  A
bind against it ends BindFailed by its deadline, its handle kept out of
use (the attach may land yet) until, the fabric back, the reconcile
detaches it; an unbind or delete stops waiting after
``[fabric]detach_timeout``.  On SQLite against the real (embedded)
Placement, as test_remote_pools.py, whose fixtures these share."""

import concurrent.futures
import json
import time
import uuid as uuidlib

import pytest

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import fake
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_remote_pools as base
from tests.unit.conductor import test_remote_pools_release as release

placement_url = base.placement_url
fake_nova = base.fake_nova
pconf = base.pconf

BIND_TIMEOUT = 10       # the least [DEFAULT]bind_timeout allows
DETACH_TIMEOUT = 2
# Seconds past a deadline a call may take to give up and record it.
SLACK = 2.5


def _hung(pconf, tmp_path):
    pconf.set_override('bind_timeout', BIND_TIMEOUT)
    pconf.set_override('detach_timeout', DETACH_TIMEOUT, group='fabric')
    (tmp_path / fake.HANG).write_text('')


def _calls(tmp_path, op):
    return [c for c in fake.journal(str(tmp_path)) if c['op'] == op]


def test_a_bind_against_a_hung_fabric_fails_by_its_deadline(
        pconf, db, placement_url, tmp_path):
    """The attach never returned: the bind worker waited for good and the
    ARQ stayed BindStarted until the stuck-bind periodic.  It fails by
    the bind's deadline with the reason; the handle, perhaps attached,
    goes to no other bind until a detach works."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-h')
    _hung(pconf, tmp_path)
    try:
        began = time.monotonic()
        arq, _instance, future = release._start(pconf, ctx, db, pool, host)
        future.result(BIND_TIMEOUT + 20)
        took = time.monotonic() - began
        failed = seed.arq_rows(db)[arq]
        assert failed.state == 'BindFailed'
        assert took < BIND_TIMEOUT + SLACK, took
        assert (f'the fake fabric driver did not answer the attach of '
                f'gpu-h of remote pool {pool.name} to {host} within '
                in failed.bind_failure_reason)
        # Its undo could not detach (the fabric hangs still): kept out
        # of use, attached to the host as far as cyborg knows, reserved.
        kept, = pool_db.handles(ctx, [pool.id])
        assert remote_pools.quarantined(kept)
        assert json.loads(kept.attach_info)['hostname'] == host
        assert base._reserved(placement_url, pool.rp_uuid) == 1

        # No other bind gets it (its PATCH is refused, nothing written),
        # and the fabric is not asked again.
        asked = len(fake.journal(str(tmp_path)))
        with pytest.raises(exception.BindFailed,
                           match='no free handle') as refused:
            release._start(pconf, ctx, db, pool, host)
        assert refused.value.code == 400
        assert {r.state for r in seed.arq_rows(db).values()
                if r.uuid != arq} == {'Initial'}
        # A reconcile while the fabric hangs gives up on its detach too.
        began = time.monotonic()
        remote_pools.reconcile(pconf, ctx)
        assert time.monotonic() - began < DETACH_TIMEOUT + SLACK
        assert remote_pools.quarantined(pool_db.handles(ctx, [pool.id])[0])
        assert len(fake.journal(str(tmp_path))) == asked
    finally:
        (tmp_path / fake.HANG).unlink()

    # The fabric is back: the attach that hung lands, and the reconcile's
    # detach (which waits for it) frees the handle.
    remote_pools.reconcile(pconf, ctx)
    handle, = pool_db.handles(ctx, [pool.id])
    assert not handle.in_use
    assert fake.attached(str(tmp_path)) == {}
    assert base._reserved(placement_url, pool.rp_uuid) == 0
    arq3, _i3, future3 = release._start(pconf, ctx, db, pool, host)
    future3.result(30)
    assert seed.arq_rows(db)[arq3].state == 'Bound'
    assert fake.attached(str(tmp_path))['gpu-h']['hostname'] == host


def test_a_delete_against_a_hung_fabric_keeps_the_handle(
        pconf, db, placement_url, tmp_path):
    """Deleting an instance's ARQ waited for the detach for good (and the
    API answered 503 meanwhile).  After ``[fabric]detach_timeout`` the
    detach counts as refused: the ARQ goes, the handle stays out of use
    until the reconcile detaches it."""
    ctx, host, _pool_uuid, pool, instance = base._bound(
        pconf, db, placement_url, 'gpu-e')
    _hung(pconf, tmp_path)
    api = concurrent.futures.ThreadPoolExecutor(1)
    try:
        began = time.monotonic()
        deleting = api.submit(arq_binding.delete, pconf, ctx,
                              instance_uuid=instance)
        assert deleting.result(DETACH_TIMEOUT + 20) == []
        assert time.monotonic() - began < DETACH_TIMEOUT + SLACK
        assert seed.arq_rows(db) == {}
        kept, = pool_db.handles(ctx, [pool.id])
        assert remote_pools.quarantined(kept)
        assert json.loads(kept.attach_info)['hostname'] == host
    finally:
        (tmp_path / fake.HANG).unlink()
        api.shutdown()
    remote_pools.reconcile(pconf, ctx)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert fake.attached(str(tmp_path)) == {}
    assert [c['hostname'] for c in _calls(tmp_path, 'detach')] == [host,
                                                                    host]


def four_bound_handles(pconf, db, placement_url, tmp_path, prefix):
    """(context, host, pool, instance, addresses): a pool of four handles
    (``prefix``0..3) on a new host, all attached to one instance through
    four ARQs."""
    ctx = cyborg_context.get_admin_context()
    addresses = [f'{prefix}{i}' for i in range(4)]
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, *addresses)
    profile = seed.seed_profile(db, [{'resources:CUSTOM_REMOTE_GPU': '4'}])
    arqs = [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]
    instance = str(uuidlib.uuid4())
    arq_binding.start_bind(pconf, ctx, {arq: {
        'hostname': host, 'device_rp_uuid': pool.rp_uuid,
        'instance_uuid': instance} for arq in arqs}).result(30)
    assert sorted(fake.attached(str(tmp_path))) == addresses
    return ctx, host, pool, instance, addresses


def test_a_release_of_several_hung_handles_waits_one_timeout(
        pconf, db, placement_url, tmp_path):
    """An instance's ARQs on four handles, deleted while the fabric
    hangs: the detaches went one after the other, each waiting
    ``[fabric]detach_timeout``, and the delete took four times it (past
    the API's own time with a few more).  They go at once now: the
    delete takes about one, and every handle is kept out of use."""
    ctx, host, pool, instance, addresses = four_bound_handles(
        pconf, db, placement_url, tmp_path, 'gpu-s')
    _hung(pconf, tmp_path)
    try:
        began = time.monotonic()
        assert arq_binding.delete(pconf, ctx, instance_uuid=instance) == []
        took = time.monotonic() - began
        assert took < DETACH_TIMEOUT + SLACK, took
        assert seed.arq_rows(db) == {}
        kept = pool_db.handles(ctx, [pool.id])
        assert [remote_pools.quarantined(h) for h in kept] == [True] * 4
        assert {json.loads(h.attach_info)['hostname'] for h in kept} == {
            host}
        assert sorted(c['fabric_address']
                      for c in _calls(tmp_path, 'detach')) == addresses
    finally:
        (tmp_path / fake.HANG).unlink()
    remote_pools.reconcile(pconf, ctx)
    assert not any(h.in_use for h in pool_db.handles(ctx, [pool.id]))
    assert fake.attached(str(tmp_path)) == {}
