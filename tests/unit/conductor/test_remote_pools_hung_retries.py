"""Remote pools: the reconcile's retry of refused detaches against a
fabric manager that hangs waits one ``[fabric]detach_timeout`` for all
the handles a pool keeps out of use, not one for each of them in turn
(four kept handles held the periodic four times that).  The fake fabric
and fixtures of test_remote_pools_hung_fabric.py (SQLite, the real
embedded Placement)."""

import json
import time

from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import fake
from tests.unit.conductor import test_remote_pools as base
from tests.unit.conductor import test_remote_pools_hung_fabric as hung

placement_url = base.placement_url
fake_nova = base.fake_nova
pconf = base.pconf


def test_the_retries_of_several_kept_handles_wait_one_timeout(
        pconf, db, placement_url, tmp_path):
    ctx, host, pool, instance, _addresses = hung.four_bound_handles(
        pconf, db, placement_url, tmp_path, 'gpu-r')
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
