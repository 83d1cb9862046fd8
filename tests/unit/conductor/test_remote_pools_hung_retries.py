"""Remote pools: the reconcile's retry of refused detaches against a
fabric manager that hangs waits one ``[fabric]detach_timeout`` for all
the handles a pool keeps out of use, not one for each of them in turn
(four kept handles held the periodic four times that).  The fake fabric
and fixtures of test_remote_pools_hung_fabric.py (SQLite, the real
embedded Placement)."""

import json
import time
import uuid as uuidlib

from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import fake
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_remote_pools as base
from tests.unit.conductor import test_remote_pools_hung_fabric as hung

placement_url = base.placement_url
fake_nova = base.fake_nova
pconf = base.pconf


def test_the_retries_of_several_kept_handles_wait_one_timeout(
        pconf, db, placement_url, tmp_path):
    ctx = cyborg_context.get_admin_context()
    addresses = [f'gpu-r{i}' for i in range(4)]
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, *addresses)
    profile = seed.seed_profile(db, [{'resources:CUSTOM_REMOTE_GPU': '4'}])
    arqs = [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]
    instance = str(uuidlib.uuid4())
    arq_binding.start_bind(pconf, ctx, {arq: {
        'hostname': host, 'device_rp_uuid': pool.rp_uuid,
        'instance_uuid': instance} for arq in arqs}).result(30)
    assert sorted(fake.attached(str(tmp_path))) == addresses

    hung._hung(pconf, tmp_path)
    try:
        # The delete's detaches hang: the four handles are kept.
        assert arq_binding.delete(pconf, ctx, instance_uuid=instance) == []
        kept = pool_db.handles(ctx, [pool.id])
        assert [remote_pools.quarantined(h) for h in kept] == [True] * 4
        # The reconcile's retries, the fabric hanging still: each waits
        # for its address's hung detach, all at once.
        began = time.monotonic()
        remote_pools.reconcile(pconf, ctx)
        took = time.monotonic() - began
        assert took < hung.DETACH_TIMEOUT + hung.SLACK, took
        kept = pool_db.handles(ctx, [pool.id])
        assert [remote_pools.quarantined(h) for h in kept] == [True] * 4
        assert {json.loads(h.attach_info)['hostname'] for h in kept} == {
            host}
    finally:
        (tmp_path / fake.HANG).unlink()
    # The fabric back: one reconcile frees them all.
    remote_pools.reconcile(pconf, ctx)
    assert not any(h.in_use for h in pool_db.handles(ctx, [pool.id]))
    assert fake.attached(str(tmp_path)) == {}
    assert base._reserved(placement_url, pool.rp_uuid) == 0
