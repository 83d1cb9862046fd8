"""Remote pools: a release racing a bind's attach, and attachments the
fabric keeps while another bind holds the handle.

An ARQ unbound (or deleted) while the fabric attaches its handle: the
release's detach found nothing attached, freed the handle, and the
attach landed after it, on a free handle; the next bind for another host
was refused by the fabric (attached to the old host).  The handle is
kept out of use until the bind's undo detached it.

A bind's undo whose detach the fabric refuses while another bind holds
the handle: the attachment was recorded nowhere, the handle freed by
that bind's failure, attached for good.  It is owed the detach: whoever
lets it go keeps it out of use for the reconcile.

Real threads, the fake fabric held inside its calls; on SQLite against
the real (embedded) Placement, as test_remote_pools.py, whose fixtures
these share."""

import datetime
import json
import types

import pytest

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db.api import clock as clock_db
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import fake
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_remote_pools as base
from tests.unit.conductor import test_remote_pools_release as release

placement_url = base.placement_url
fake_nova = base.fake_nova
pconf = base.pconf


def _refuse_detach_from(monkeypatch, hosts):
    """The fake fabric refuses to detach from the hosts in ``hosts`` (a
    set the test empties to let it)."""
    real = fake.FakeFabricDriver.detach

    def refusing(self, handle, hostname, instance_uuid):
        if hostname in hosts:
            raise fake.FakeFabricError('fabric manager busy')
        return real(self, handle, hostname, instance_uuid)
    monkeypatch.setattr(fake.FakeFabricDriver, 'detach', refusing)


def test_an_unbind_during_the_attach_keeps_the_handle_until_the_undo(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """Unbound while the fabric attaches: the handle stays out of use
    (reserved, the reconcile leaving it while the attach may land) until
    the bind's undo detached it; a bind for another host then gets it."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-u')
    host2 = release._other_host(placement_url)
    gates = release._gated_attach(monkeypatch)
    arq, _instance, lost = release._start(pconf, ctx, db, pool, host)
    assert release._gate(gates, host)[0].wait(30)
    arq_binding.unbind(pconf, ctx, [arq])
    assert seed.arq_rows(db)[arq].state == 'Unbound'
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert json.loads(handle.attach_info)['hostname'] == host
    assert base._reserved(placement_url, pool.rp_uuid) == 1
    # No detach was asked for: it would find nothing attached yet.
    assert [c for c in fake.journal(str(tmp_path))
            if c['op'] == 'detach'] == []
    # The reconcile leaves it while the attach may still land.
    remote_pools.reconcile(pconf, ctx)
    assert pool_db.handles(ctx, [pool.id])[0].in_use
    with pytest.raises(exception.BindFailed, match='no free handle'):
        release._start(pconf, ctx, db, pool, host2)

    release._gate(gates, host)[1].set()
    lost.result(30)
    assert fake.attached(str(tmp_path)) == {}
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert base._reserved(placement_url, pool.rp_uuid) == 0
    release._gate(gates, host2)[1].set()
    arq2, _i2, future = release._start(pconf, ctx, db, pool, host2)
    future.result(30)
    row = seed.arq_rows(db)[arq2]
    assert (row.state, row.bind_failure_reason) == ('Bound', None)
    assert fake.attached(str(tmp_path))['gpu-u']['hostname'] == host2


def test_an_unbind_before_a_refused_undo_keeps_the_handle_for_the_reconcile(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """Unbound while the fabric attaches, and the undo's detach refused:
    the handle stays kept for the host; the reconcile, the attach over,
    detaches it there and frees it."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-e')
    gates = release._gated_attach(monkeypatch)
    arq, _instance, lost = release._start(pconf, ctx, db, pool, host)
    assert release._gate(gates, host)[0].wait(30)
    arq_binding.unbind(pconf, ctx, [arq])
    refused = {host}
    _refuse_detach_from(monkeypatch, refused)
    release._gate(gates, host)[1].set()
    lost.result(30)
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert not remote_pools.may_still_land(handle)
    assert fake.attached(str(tmp_path))['gpu-e']['hostname'] == host

    refused.clear()
    remote_pools.reconcile(pconf, ctx)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert fake.attached(str(tmp_path)) == {}


def _lost_undo_refused_while_held(pconf, ctx, db, placement_url, tmp_path,
                                  monkeypatch, address):
    """A bind failed by the stuck-bind check while the fabric attaches
    ``address`` to host A (the check's detach found nothing and freed the
    handle), a bind for host B taking the handle meanwhile, the lost
    bind's undo refused by the fabric: (pool, A, B, B's ARQ, B's future,
    B's gate, the set of hosts the fabric refuses to detach from)."""
    host_a, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, address)
    host_b = release._other_host(placement_url)
    gates = release._gated_attach(monkeypatch)
    arq1, _i1, lost = release._start(pconf, ctx, db, pool, host_a)
    assert release._gate(gates, host_a)[0].wait(30)
    assert arq_binding._fail_abandoned(
        pconf, ctx, {arq1: seed.arq_rows(db)[arq1].bind_id}, 'stuck') == 1
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    arq2, _i2, holding = release._start(pconf, ctx, db, pool, host_b)
    assert release._gate(gates, host_b)[0].wait(30)
    refused = {host_a}
    _refuse_detach_from(monkeypatch, refused)
    release._gate(gates, host_a)[1].set()
    lost.result(30)
    assert fake.attached(str(tmp_path))[address]['hostname'] == host_a
    return pool, host_a, host_b, arq2, holding, release._gate(
        gates, host_b), refused


def test_an_attachment_left_while_another_host_holds_it_is_not_forgotten(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The other host's bind is refused by the fabric (attached to A):
    its failure keeps the handle out of use for A rather than free it,
    and the reconcile detaches it there; the next bind gets it."""
    ctx = cyborg_context.get_admin_context()
    pool, host_a, _host_b, arq2, holding, gate_b, refused = (
        _lost_undo_refused_while_held(pconf, ctx, db, placement_url,
                                      tmp_path, monkeypatch, 'gpu-k'))
    gate_b[1].set()
    holding.result(30)
    row = seed.arq_rows(db)[arq2]
    assert row.state == 'BindFailed'
    assert f'attached to {host_a}' in row.bind_failure_reason
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert json.loads(handle.attach_info)['hostname'] == host_a

    refused.clear()
    remote_pools.reconcile(pconf, ctx)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert fake.attached(str(tmp_path)) == {}
    assert base._reserved(placement_url, pool.rp_uuid) == 0
    host_c = release._other_host(placement_url)
    monkeypatch.undo()
    arq3, _i3, future = release._start(pconf, ctx, db, pool, host_c)
    future.result(30)
    assert seed.arq_rows(db)[arq3].state == 'Bound'
    assert fake.attached(str(tmp_path))['gpu-k']['hostname'] == host_c


def _bound_elsewhere_on_a_sharing_fabric(pconf, ctx, db, placement_url,
                                         tmp_path, monkeypatch, address):
    """``_lost_undo_refused_while_held`` on a fabric that attaches one
    accelerator to two hosts: the other host's bind ends Bound, the
    detach from the first still owed.  Returns (pool, host A, host B,
    the Bound ARQ, the hosts the fabric refuses detaches from)."""
    real_attach = fake.FakeFabricDriver.attach

    def sharing(self, handle, hostname, instance_uuid):
        # Records the newest host only, as a fabric that does not refuse
        # an address attached elsewhere would show it.
        attached = fake.attached(str(tmp_path))
        attached.pop(handle.fabric_address, None)
        self._write(str(tmp_path), attached)
        return real_attach(self, handle, hostname, instance_uuid)
    monkeypatch.setattr(fake.FakeFabricDriver, 'attach', sharing)
    pool, host_a, host_b, arq2, holding, gate_b, refused = (
        _lost_undo_refused_while_held(pconf, ctx, db, placement_url,
                                      tmp_path, monkeypatch, address))
    gate_b[1].set()
    holding.result(30)
    assert seed.arq_rows(db)[arq2].state == 'Bound'
    return pool, host_a, host_b, arq2, refused


def test_an_owed_detach_outlives_the_holders_bind(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """On a fabric that attaches one accelerator to two hosts, the other
    host's bind ends Bound: the detach from A stays owed through it, and
    its unbind keeps the handle out of use for A, for the reconcile."""
    ctx = cyborg_context.get_admin_context()
    pool, host_a, host_b, arq2, refused = (
        _bound_elsewhere_on_a_sharing_fabric(
            pconf, ctx, db, placement_url, tmp_path, monkeypatch, 'gpu-o'))
    handle, = pool_db.handles(ctx, [pool.id])
    assert (handle.in_use, handle.hostname) == (True, host_b)
    assert json.loads(handle.attach_info)[pool_db.DETACH_OWED][0][0] \
        == host_a

    arq_binding.unbind(pconf, ctx, [arq2])
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert json.loads(handle.attach_info)['hostname'] == host_a
    refused.clear()
    remote_pools.reconcile(pconf, ctx)
    handle, = pool_db.handles(ctx, [pool.id])
    assert not handle.in_use
    detaches = [c['hostname'] for c in fake.journal(str(tmp_path))
                if c['op'] == 'detach']
    assert detaches[-1] == host_a and host_b in detaches


def test_a_handle_is_kept_until_its_own_binds_deadline(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """Unbound by a conductor with a shorter ``bind_timeout`` than the
    one carrying the bind: the handle is kept until the bind's own
    deadline (its start plus the ``bind_timeout`` recorded with it), not
    the releasing conductor's from now, which let the reconcile free it
    while the attach was still on its way."""
    ctx = cyborg_context.get_admin_context()
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-m')
    gates = release._gated_attach(monkeypatch)
    pconf.set_override('bind_timeout', 600)
    arq, _instance, lost = release._start(pconf, ctx, db, pool, host)
    assert release._gate(gates, host)[0].wait(30)
    row = seed.arq_rows(db)[arq]
    assert row.bind_timeout == 600
    pconf.set_override('bind_timeout', 60)
    arq_binding.unbind(pconf, ctx, [arq])
    handle, = pool_db.handles(ctx, [pool.id])
    assert json.loads(handle.attach_info)[remote_pools.ATTACH_UNTIL] == (
        row.bind_started_at + datetime.timedelta(seconds=600)).isoformat()
    later = clock_db.utcnow() + datetime.timedelta(minutes=2)
    with monkeypatch.context() as patch:
        patch.setattr(remote_pools.clock_db, 'utcnow', lambda: later)
        remote_pools.reconcile(pconf, ctx)
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert base._reserved(placement_url, pool.rp_uuid) == 1

    release._gate(gates, host)[1].set()
    lost.result(30)
    assert fake.attached(str(tmp_path)) == {}
    assert not pool_db.handles(ctx, [pool.id])[0].in_use


def test_landing_until_is_the_binds_deadline_never_before_now(pconf):
    now = clock_db.utcnow()
    pconf.set_override('bind_timeout', 60)

    def until(state, started, seconds):
        return datetime.datetime.fromisoformat(remote_pools.landing_until(
            pconf, types.SimpleNamespace(state=state, bind_started_at=started,
                                         bind_timeout=seconds)))
    ago = now - datetime.timedelta(seconds=30)
    # The bind's own: its conductor's bind_timeout, longer or shorter.
    assert until('BindStarted', ago, 600) == ago + datetime.timedelta(
        seconds=600)
    assert until('BindStarted', ago, 40) == ago + datetime.timedelta(
        seconds=40)
    # None recorded (a conductor of the previous release): this one's.
    assert until('BindStarted', ago, None) == ago + datetime.timedelta(
        seconds=60)
    # Past: now, never before.
    long_ago = now - datetime.timedelta(hours=1)
    assert now <= until('BindStarted', long_ago, 600) <= clock_db.utcnow()
    # Deleting: the mark's times are the delete's, not the bind's; at
    # least this conductor's bind_timeout from now.
    assert until('Deleting', long_ago, 600) >= now + datetime.timedelta(
        seconds=60)
    assert until('Deleting', now, 900) == now + datetime.timedelta(
        seconds=900)


def test_a_handle_kept_for_an_owed_detach_is_reserved_at_once(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The holder's unbind keeps a handle owed a detach out of use
    (``pool_db.release``): its pool's provider reserves it once the
    unbind commits, not at the reconcile's next sync."""
    ctx = cyborg_context.get_admin_context()
    pool, host_a, _host_b, arq2, _refused = (
        _bound_elsewhere_on_a_sharing_fabric(
            pconf, ctx, db, placement_url, tmp_path, monkeypatch, 'gpu-r'))
    assert base._reserved(placement_url, pool.rp_uuid) == 0
    arq_binding.unbind(pconf, ctx, [arq2])
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert json.loads(handle.attach_info)['hostname'] == host_a
    assert base._reserved(placement_url, pool.rp_uuid) == 1


def test_a_handle_a_failed_bind_keeps_for_an_owed_detach_is_reserved(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The same through the holder's bind failing (``_fail``)."""
    ctx = cyborg_context.get_admin_context()
    pool, _host_a, _host_b, arq2, holding, gate_b, _refused = (
        _lost_undo_refused_while_held(pconf, ctx, db, placement_url,
                                      tmp_path, monkeypatch, 'gpu-f'))
    gate_b[1].set()
    holding.result(30)
    assert seed.arq_rows(db)[arq2].state == 'BindFailed'
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert base._reserved(placement_url, pool.rp_uuid) == 1
