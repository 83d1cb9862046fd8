"""Remote pools: the stuck-bind check against binds that were only slow.

The check (``arq_binding.fail_stuck``) fails binds left in BindStarted
past ``[DEFAULT]bind_timeout`` and detaches the handles they may have
attached.  It detached first and failed then: a bind that was only slow,
its attach answered, could end Bound in between and keep a handle no
longer attached (the instance got a device that was not there).  It now
fails first, keeping the handle out of use, then detaches and frees it;
a bind that ended Bound first keeps its attachment.  Real bind threads,
held after the fake fabric attached; on SQLite against the real
(embedded) Placement, as test_remote_pools.py, whose fixtures these
share."""

import json
import threading
import time

import pytest

from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import fake
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_bind_deadlines as deadlines
from tests.unit.conductor import test_remote_pools as base
from tests.unit.conductor import test_remote_pools_release as release

placement_url = base.placement_url
fake_nova = base.fake_nova
pconf = base.pconf


def _age(db, arq_uuid):
    """Make the ARQ's bind look started an hour ago, its deadline long
    passed, so that the check takes it for stuck whatever its bind is
    doing."""
    deadlines.passed(db, arq_uuid, 3600)


def _slow_bind(pconf, ctx, db, placement_url, monkeypatch, address,
               aged=True):
    """A bind held once the fabric answered its attach of ``address``,
    before it ends Bound, and (``aged``) taken for stuck: (host, pool,
    ARQ uuid, the bind's future, the event that lets it go on)."""
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, address)
    arrived, go = threading.Event(), threading.Event()
    real = remote_pools.attach

    def answered_then_held(*args, **kwargs):
        info = real(*args, **kwargs)
        arrived.set()
        assert go.wait(30), 'the held bind was never let go'
        return info
    monkeypatch.setattr(remote_pools, 'attach', answered_then_held)
    arq_uuid, _instance, future = release._start(pconf, ctx, db, pool, host)
    assert arrived.wait(30)
    assert fake.attached(str(pconf.fabric.fake_state_dir))[address][
        'hostname'] == host
    if aged:
        _age(db, arq_uuid)
    return host, pool, arq_uuid, future, go


def _wait_left_bind_started(db, arq_uuid, seconds=20):
    """Wait until the ARQ has left BindStarted (its bind ended Bound, or
    the check failed it), ``seconds`` at most."""
    until = time.monotonic() + seconds
    while (seconds_left := until - time.monotonic()) > 0:
        if seed.arq_rows(db)[arq_uuid].state != 'BindStarted':
            return
        time.sleep(min(0.02, seconds_left))


def _settle(future):
    """The held bind's end, whatever it was (a bind failed under it
    may say so)."""
    try:
        future.result(30)
    except Exception:  # noqa: BLE001 - its outcome is read from the rows
        pass


def test_a_slow_bind_is_its_conductor_s_until_its_own_deadline(
        pconf, db, placement_url, monkeypatch):
    """The fabric answered a minute after the bind started (its
    conductor's bind_timeout: 240 s): a conductor whose bind_timeout is
    30 s checks meanwhile and leaves it be; it ends Bound, its deadline
    gone with BindStarted, its handle attached."""
    ctx = cyborg_context.get_admin_context()
    quick = deadlines.conductor('conductor-b', 30, placement_url)
    host, pool, arq_uuid, future, go = _slow_bind(
        pconf, ctx, db, placement_url, monkeypatch, 'gpu-dl', aged=False)
    row = seed.arq_rows(db)[arq_uuid]
    assert row.bind_timeout == pconf.bind_timeout
    deadlines.passed(db, arq_uuid, 60)
    assert arq_binding.fail_stuck(quick, ctx) == 0
    go.set()
    future.result(30)
    row = seed.arq_rows(db)[arq_uuid]
    assert (row.state, row.bind_timeout) == ('Bound', None)
    handle, = pool_db.handles(ctx, [pool.id])
    assert (handle.in_use, handle.hostname) == (True, host)


def test_a_slow_bind_ending_bound_as_the_check_detaches_is_failed(
        pconf, db, placement_url, tmp_path, monkeypatch, fake_nova):
    """The slow bind's commit of Bound lands just after the check's
    detach: it used to end Bound with its handle detached from the host.
    Failed first, its commit finds the ARQ failed: it ends BindFailed,
    nothing attached, its handle free again."""
    ctx = cyborg_context.get_admin_context()
    host, pool, arq_uuid, future, go = _slow_bind(
        pconf, ctx, db, placement_url, monkeypatch, 'gpu-sd')
    real_detach = fake.FakeFabricDriver.detach
    checks = []

    def detach_then_bind_ends(driver, *args):
        real_detach(driver, *args)
        if not checks:
            # The check's detach: the slow bind commits now.
            checks.append(seed.arq_rows(db)[arq_uuid].state)
            go.set()
            _wait_left_bind_started(db, arq_uuid)
    monkeypatch.setattr(fake.FakeFabricDriver, 'detach',
                        detach_then_bind_ends)

    assert arq_binding.fail_stuck(pconf, ctx) == 1
    _settle(future)
    row = seed.arq_rows(db)[arq_uuid]
    assert (row.state, row.remote_handle_id) == ('BindFailed', None)
    # It had failed before anything was detached.
    assert checks == ['BindFailed']
    assert 'did not finish' in row.bind_failure_reason
    assert fake.attached(str(tmp_path)) == {}
    handle, = pool_db.handles(ctx, [pool.id])
    assert (handle.in_use, handle.hostname) == (False, None)
    assert json.loads(handle.attach_info) == {'fabric_address': 'gpu-sd'}
    assert base._reserved(placement_url, pool.rp_uuid) == 0
    assert (arq_uuid, 'failed') in [(e['tag'], e['status'])
                                    for e in fake_nova.events]


def test_a_slow_bind_ending_bound_before_it_is_failed_stays_attached(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The check read the ARQ in BindStarted; the slow bind then ended
    Bound.  The check's failure moves nothing, and the handle stays in
    use, attached to the host for the instance (it used to be detached
    before the failure was tried)."""
    ctx = cyborg_context.get_admin_context()
    host, pool, arq_uuid, future, go = _slow_bind(
        pconf, ctx, db, placement_url, monkeypatch, 'gpu-sb')
    read = arq_db.get_to_change
    ended = []

    def then_bound(context, uuids, *args, **kwargs):
        rows = read(context, uuids, *args, **kwargs)
        if not ended and arq_uuid in (uuids or ()):
            ended.append(True)
            go.set()
            future.result(30)
        return rows
    monkeypatch.setattr(arq_db, 'get_to_change', then_bound)

    arq_binding.fail_stuck(pconf, ctx)
    assert ended
    row = seed.arq_rows(db)[arq_uuid]
    assert (row.state, row.bind_failure_reason) == ('Bound', None)
    handle, = pool_db.handles(ctx, [pool.id])
    assert (handle.in_use, handle.hostname) == (True, host)
    assert not remote_pools.quarantined(handle)
    assert row.remote_handle_id == handle.id
    assert fake.attached(str(tmp_path))['gpu-sb'] == {
        'hostname': host, 'instance_uuid': row.instance_uuid,
        'handle': handle.uuid}
    assert [c for c in fake.journal(str(tmp_path))
            if c['op'] == 'detach'] == []


def _dead_bind(pconf, ctx, db, placement_url, monkeypatch, address):
    """A bind whose conductor died once the fabric attached ``address``,
    before Bound, taken for stuck: (host, pool, ARQ uuid)."""
    host, _pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, address)

    def die(*args, **kwargs):
        raise release._Died()
    monkeypatch.setattr(arq_binding, '_finish_remote', die)
    arq_uuid, _instance, future = release._start(pconf, ctx, db, pool, host)
    with pytest.raises(release._Died):
        future.result(30)
    monkeypatch.undo()
    assert seed.arq_rows(db)[arq_uuid].state == 'BindStarted'
    _age(db, arq_uuid)
    return host, pool, arq_uuid


def test_a_dead_conductor_s_bind_is_failed_detached_and_freed(
        pconf, db, placement_url, tmp_path, monkeypatch, fake_nova):
    ctx = cyborg_context.get_admin_context()
    host, pool, arq_uuid = _dead_bind(pconf, ctx, db, placement_url,
                                      monkeypatch, 'gpu-sx')
    assert fake.attached(str(tmp_path))['gpu-sx']['hostname'] == host

    assert arq_binding.fail_stuck(pconf, ctx) == 1
    row = seed.arq_rows(db)[arq_uuid]
    assert (row.state, row.remote_handle_id) == ('BindFailed', None)
    assert fake.attached(str(tmp_path)) == {}
    detach = fake.journal(str(tmp_path))[-1]
    assert (detach['op'], detach['hostname']) == ('detach', host)
    handle, = pool_db.handles(ctx, [pool.id])
    assert (handle.in_use, handle.hostname) == (False, None)
    assert json.loads(handle.attach_info) == {'fabric_address': 'gpu-sx'}
    assert base._reserved(placement_url, pool.rp_uuid) == 0
    assert [(e['tag'], e['status']) for e in fake_nova.events] == [
        (arq_uuid, 'failed')]


def test_a_refused_detach_keeps_the_failed_bind_s_handle(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The fabric refuses the check's detach: the handle stays out of
    use, reserved, for the host it stays attached to, until the
    reconcile detaches it."""
    ctx = cyborg_context.get_admin_context()
    host, pool, arq_uuid = _dead_bind(pconf, ctx, db, placement_url,
                                      monkeypatch, 'gpu-sr')
    (tmp_path / fake.FAIL_DETACH).write_text('')
    assert arq_binding.fail_stuck(pconf, ctx) == 1
    assert seed.arq_rows(db)[arq_uuid].state == 'BindFailed'
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert json.loads(handle.attach_info)['hostname'] == host
    assert base._reserved(placement_url, pool.rp_uuid) == 1

    (tmp_path / fake.FAIL_DETACH).unlink()
    remote_pools.reconcile(pconf, ctx)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert fake.attached(str(tmp_path)) == {}
    assert base._reserved(placement_url, pool.rp_uuid) == 0


def test_a_check_dying_after_the_failure_leaves_the_handle_kept(
        pconf, db, placement_url, tmp_path, monkeypatch):
    """The check's conductor dies once the failure is committed, before
    its detach: the handle, still attached, is not free for another
    bind; the reconcile detaches and frees it."""
    ctx = cyborg_context.get_admin_context()
    host, pool, arq_uuid = _dead_bind(pconf, ctx, db, placement_url,
                                      monkeypatch, 'gpu-sk')

    def die(*args, **kwargs):
        raise release._Died()
    monkeypatch.setattr(remote_pools, 'detach_kept', die)
    with pytest.raises(release._Died):
        arq_binding.fail_stuck(pconf, ctx)
    monkeypatch.undo()
    assert seed.arq_rows(db)[arq_uuid].state == 'BindFailed'
    handle, = pool_db.handles(ctx, [pool.id])
    assert remote_pools.quarantined(handle)
    assert fake.attached(str(tmp_path))['gpu-sk']['hostname'] == host

    remote_pools.reconcile(pconf, ctx)
    assert not pool_db.handles(ctx, [pool.id])[0].in_use
    assert fake.attached(str(tmp_path)) == {}
    assert base._reserved(placement_url, pool.rp_uuid) == 0


def test_nova_hears_of_the_failure_before_the_detach(
        pconf, db, placement_url, tmp_path, monkeypatch, fake_nova):
    """The check tells Nova of the binds it failed before it detaches
    their handles: a fabric slow to detach (up to ``[fabric]
    detach_timeout``) held the event back, past Nova's own
    ``arq_binding_timeout`` with the default timeouts."""
    ctx = cyborg_context.get_admin_context()
    host, pool, arq_uuid = _dead_bind(pconf, ctx, db, placement_url,
                                      monkeypatch, 'gpu-sn')
    heard = []
    real = remote_pools.detach_kept

    def detach_kept(*args, **kwargs):
        heard.append([(e['tag'], e['status']) for e in fake_nova.events])
        return real(*args, **kwargs)

    monkeypatch.setattr(remote_pools, 'detach_kept', detach_kept)
    assert arq_binding.fail_stuck(pconf, ctx) == 1
    assert heard == [[(arq_uuid, 'failed')]]
    assert fake.attached(str(tmp_path)) == {}
