"""Remote pools: a bind's undo does not detach what a newer bind attached.

A bind failed by the stuck-bind check (of another conductor) while the
fabric attached its handle undoes the attach: it read the handle free
(the check detached it, finding nothing yet, and freed it), then
detached.  A bind for the same
host that took the handle in between, and attached it (the fabric found
it attached there already), ended Bound with nothing attached once the
detach landed.  The undo reads the holder again after its detach and
attaches again for such a bind.  Real threads, the fake fabric paused
inside its calls; on SQLite against the real (embedded) Placement, as
test_remote_pools.py, whose fixtures these share."""

import threading

from cyborg.common import context as cyborg_context
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


class _Paused:
    """Holds the next call of the fake fabric's ``op`` before the fabric
    does anything, until ``go``; later calls go through."""

    def __init__(self, monkeypatch, op):
        self.arrived, self.go = threading.Event(), threading.Event()
        real = getattr(fake.FakeFabricDriver, op)
        armed = [True]
        lock = threading.Lock()

        def paused(driver, *args):
            with lock:
                mine = bool(armed) and armed.pop()
            if mine:
                self.arrived.set()
                assert self.go.wait(30), f'the paused {op} was never let go'
            return real(driver, *args)
        monkeypatch.setattr(fake.FakeFabricDriver, op, paused)


def _lost_bind_undoing(pconf, ctx, db, placement_url, tmp_path, monkeypatch,
                       address):
    """A bind failed by the stuck-bind check while the fabric attached
    ``address``, its undo's detach now paused inside the fabric: (host,
    pool, the lost bind's future, the paused detach)."""
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, address)
    attach = _Paused(monkeypatch, 'attach')
    arq, _instance, lost = release._start(pconf, ctx, db, pool, host)
    assert attach.arrived.wait(30)
    # The check's detach finds nothing attached yet, and frees the handle.
    assert arq_binding._fail_abandoned(
        pconf, ctx, {arq: seed.arq_rows(db)[arq].bind_id}, 'stuck') == 1
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    detach = _Paused(monkeypatch, 'detach')
    attach.go.set()
    assert detach.arrived.wait(30)
    assert fake.attached(str(tmp_path))[address]['hostname'] == host
    return host, pool, lost, detach


def test_an_undo_does_not_detach_a_newer_bind_on_the_same_host(
        pconf, db, placement_url, tmp_path, monkeypatch):
    ctx = cyborg_context.get_admin_context()
    host, pool, lost, detach = _lost_bind_undoing(
        pconf, ctx, db, placement_url, tmp_path, monkeypatch, 'gpu-r')
    # Nova binds a new instance on the same host meanwhile: it takes the
    # free handle, and the fabric, which has it attached there, agrees.
    arq2, instance2, newer = release._start(pconf, ctx, db, pool, host)
    newer.result(30)
    assert seed.arq_rows(db)[arq2].state == 'Bound'
    detach.go.set()
    lost.result(30)

    row = seed.arq_rows(db)[arq2]
    assert (row.state, row.bind_failure_reason) == ('Bound', None)
    # Attached, for the bind that holds it.
    assert fake.attached(str(tmp_path))['gpu-r'] == {
        'hostname': host, 'instance_uuid': instance2,
        'handle': pool_db.handles(ctx, [pool.id])[0].uuid}
    handle, = pool_db.handles(ctx, [pool.id])
    assert (handle.in_use, handle.hostname) == (True, host)
    assert not remote_pools.quarantined(handle)


def test_an_attachment_made_again_for_a_bind_gone_since_is_kept(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The newer bind's ARQ is deleted while the undo attaches the handle
    again for it (its detach running first): the handle, free though
    attached, is kept out of use until the reconcile detaches it."""
    ctx = cyborg_context.get_admin_context()
    host, pool, lost, detach = _lost_bind_undoing(
        pconf, ctx, db, placement_url, tmp_path, monkeypatch, 'gpu-t')
    _arq2, instance2, newer = release._start(pconf, ctx, db, pool, host)
    newer.result(30)
    again = _Paused(monkeypatch, 'attach')
    detach.go.set()
    assert again.arrived.wait(30)
    assert arq_binding.delete(pconf, ctx, instance_uuid=instance2) == []
    again.go.set()
    lost.result(30)

    assert fake.attached(str(tmp_path))['gpu-t']['hostname'] == host
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert base._reserved(placement_url, pool.rp_uuid) == 1
    remote_pools.reconcile(pconf, ctx)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert fake.attached(str(tmp_path)) == {}
