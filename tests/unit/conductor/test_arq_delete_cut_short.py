"""ARQ deletes cut short: the stuck-bind periodic finishes them.

A delete whose ARQs hold something released outside the database (an
MDEV handle's mdev on the agent, a remote pool's handle attached by the
fabric) releases it first, then deletes the rows.  A conductor that died
in between left the ARQ Bound for good, its handle in use, its mdev gone
or its handle detached: Nova does not retry the delete of an instance's
ARQs.  The delete now marks them Deleting, with its conductor and a
deadline, before those releases; the periodic (``fail_stuck``) finishes
a delete left so past its deadline, and a conductor starting again
(``recover``) its own at once: released again (an mdev already removed,
a handle already detached, are no matter), rows deleted, handles free.
A marked ARQ is bound and unbound no more.  A delete with nothing
outside writes no mark.

The death is a BaseException raised where the conductor dies, which
nothing in the delete catches.  Time passing is the mark's deadline
moved back.  On SQLite, MariaDB and PostgreSQL; the agent is the real
endpoint on a fake sysfs tree, the fabric the fake driver."""

import datetime
import os
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import states
from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db import models
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import fake
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.fixtures import privsep as fake_privsep
from tests.fixtures import recording_http
from tests.fixtures import sysfs as fake_sysfs
from tests.unit.conductor import test_arq_vgpu as vgpu
from tests.unit.conductor import test_remote_pools as pools

HOST = 'gpu-host'
GPU = '0000:0c:00.0'
VGPU_TYPE = 'nvidia-223'

placement_url = seed.placement_url
fake_nova = recording_http.fake_nova
_ARQ = models.ExtARQ.__table__


class _Died(BaseException):
    """The conductor's process ending at this step."""


@pytest.fixture(params=['sqlite', 'mysql', 'postgresql'])
def engine(request, conf):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


@pytest.fixture
def tree(tmp_path):
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(GPU, '0x10de', '0x1eb8', '0x030200', driver='nvidia')
    tree.add_mdev_type(GPU, VGPU_TYPE, 'GRID T4-16C', 1)
    return tree


@pytest.fixture
def dconf(conf, engine, placement_url, fake_nova, tree, tmp_path):
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    conf.set_override('sysfs_root', tree.root, group='agent')
    conf.set_override('fake_state_dir', str(tmp_path), group='fabric')
    conf.set_override('host', 'conductor-a')
    placement_client.reset_clients()
    yield conf
    placement_client.reset_clients()


@pytest.fixture
def agent(dconf):
    with fake_privsep.in_process(dconf), seed.agent_endpoint(dconf, HOST):
        yield


def _ctx():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


def _create_file(tree):
    return os.path.join(tree.device_path(GPU), 'mdev_supported_types',
                        VGPU_TYPE, 'create')


def _remove_file(tree, mdev_uuid):
    return os.path.join(tree.root, 'bus', 'mdev', 'devices', mdev_uuid,
                        'remove')


def _bound_vgpu(dconf, engine, tree):
    """(ARQ uuid, instance uuid, mdev uuid) of a Bound vGPU ARQ whose
    mdev the kernel made; the create file emptied after."""
    device = seed.seed_device(engine, hostname=HOST, handles=1,
                              attach_type='MDEV', asked_type=VGPU_TYPE)
    profile = seed.seed_profile(engine, [{'resources:VGPU': '1'}])
    arq = arq_binding.create(_ctx(), profile, 'p1')[0]['uuid']
    instance = str(uuidlib.uuid4())
    arq_binding.start_bind(dconf, _ctx(), {arq: {
        'hostname': HOST, 'device_rp_uuid': device.rp_uuid,
        'instance_uuid': instance}}).result(30)
    row = seed.arq_rows(engine)[arq]
    assert row.state == states.BOUND, row.bind_failure_reason
    mdev = handle_db.get(_ctx(), row.attach_handle_id).uuid
    tree.add_mdev(GPU, mdev, VGPU_TYPE)
    open(_create_file(tree), 'w').close()
    return arq, instance, mdev


def _dies_deleting(dconf, monkeypatch, instance):
    """Nova's delete of the instance's ARQs, its conductor dying once the
    outside releases are done, before the rows are deleted."""
    def die(*_args, **_kwargs):
        raise _Died()
    with monkeypatch.context() as patch:
        patch.setattr(arq_binding, '_delete_released', die)
        with pytest.raises(_Died):
            arq_binding.delete(dconf, _ctx(), instance_uuid=instance)


def _age(engine, arq, conf):
    """Move the ARQ's mark (its delete's start) back past its deadline:
    that much time has passed."""
    back = datetime.timedelta(seconds=arq_binding.delete_time(conf) + 60)
    with engine.begin() as connection:
        started = connection.scalar(
            sa.select(_ARQ.c.bind_started_at).where(_ARQ.c.uuid == arq))
        connection.execute(sa.update(_ARQ).where(_ARQ.c.uuid == arq).values(
            bind_started_at=started - back))


def _read(path):
    with open(path) as f:
        return f.read()


def test_an_mdev_delete_cut_short_is_finished_by_the_periodic(
        dconf, engine, agent, tree, monkeypatch):
    arq, instance, mdev = _bound_vgpu(dconf, engine, tree)
    _dies_deleting(dconf, monkeypatch, instance)
    # The mdev went; the ARQ is marked, holding its handle.
    assert _read(_remove_file(tree, mdev)) == '1'
    row = seed.arq_rows(engine)[arq]
    assert row.state == states.DELETING
    assert row.bind_owner == 'conductor-a'
    assert row.attach_handle_id is not None
    assert seed.handles_in_use(engine) == 1

    # Just marked: a delete that may be running still.
    arq_binding.fail_stuck(dconf, cyborg_context.get_admin_context())
    assert seed.arq_rows(engine)[arq].state == states.DELETING

    open(_remove_file(tree, mdev), 'w').close()
    _age(engine, arq, dconf)
    arq_binding.fail_stuck(dconf, cyborg_context.get_admin_context())
    assert arq not in seed.arq_rows(engine)
    assert seed.handles_in_use(engine) == 0
    # Removed again (no matter that it was gone), never made again.
    assert _read(_remove_file(tree, mdev)) == '1'
    assert _read(_create_file(tree)) == ''


def test_a_conductor_starting_again_finishes_its_own_at_once(
        dconf, engine, agent, tree, monkeypatch):
    arq, instance, mdev = _bound_vgpu(dconf, engine, tree)
    _dies_deleting(dconf, monkeypatch, instance)
    later = (seed.arq_rows(engine)[arq].bind_started_at
             + datetime.timedelta(seconds=1))

    # Another conductor's start leaves it to its own.
    dconf.set_override('host', 'conductor-b')
    arq_binding.recover(dconf, cyborg_context.get_admin_context(), later)
    assert seed.arq_rows(engine)[arq].state == states.DELETING

    dconf.set_override('host', 'conductor-a')
    arq_binding.recover(dconf, cyborg_context.get_admin_context(), later)
    assert arq not in seed.arq_rows(engine)
    assert seed.handles_in_use(engine) == 0
    assert _read(_create_file(tree)) == ''


def test_a_marked_arq_is_bound_and_unbound_no_more(
        dconf, engine, agent, tree, monkeypatch):
    arq, instance, _mdev = _bound_vgpu(dconf, engine, tree)
    _dies_deleting(dconf, monkeypatch, instance)
    handle = seed.arq_rows(engine)[arq].attach_handle_id

    arq_binding.unbind(dconf, _ctx(), [arq])
    row = seed.arq_rows(engine)[arq]
    assert (row.state, row.attach_handle_id) == (states.DELETING, handle)
    device_rp = row.device_rp_uuid
    with pytest.raises(exception.Conflict):
        arq_binding.start_bind(dconf, _ctx(), {arq: {
            'hostname': HOST, 'device_rp_uuid': device_rp,
            'instance_uuid': instance}})
    assert seed.arq_rows(engine)[arq].state == states.DELETING

    # Nova's (or an admin's) delete again finishes it at once.
    assert arq_binding.delete(dconf, _ctx(), [arq]) == []
    assert arq not in seed.arq_rows(engine)
    assert seed.handles_in_use(engine) == 0


def test_a_remote_delete_cut_short_is_finished_by_the_periodic(
        dconf, engine, placement_url, tmp_path, monkeypatch):
    ctx, host, pool_uuid, pool, instance = pools._bound(
        dconf, engine, placement_url, 'gpu-d')
    arq, = seed.arq_rows(engine)
    assert fake.attached(str(tmp_path))['gpu-d']['hostname'] == host
    _dies_deleting(dconf, monkeypatch, instance)
    assert fake.attached(str(tmp_path)) == {}
    assert seed.arq_rows(engine)[arq].state == states.DELETING
    assert pool_db.handles(ctx, [pool.id])[0].in_use

    _age(engine, arq, dconf)
    arq_binding.fail_stuck(dconf, cyborg_context.get_admin_context())
    assert arq not in seed.arq_rows(engine)
    handle, = pool_db.handles(ctx, [pool.id])
    assert not handle.in_use
    assert not remote_pools.quarantined(handle)
    assert fake.attached(str(tmp_path)) == {}
    # Detached twice, never attached again; the pool may go.
    assert [c['op'] for c in fake.journal(str(tmp_path))] == [
        'attach', 'detach', 'detach']
    remote_pools.delete(dconf, ctx, pool_uuid)
    assert pool_db.get(ctx, uuid=pool_uuid) is None


def test_a_delete_with_nothing_outside_writes_no_mark(dconf, engine):
    """Nova's common delete (PCI handles) reads and deletes in one
    transaction, as before: no UPDATE of the ARQs."""
    device = seed.seed_device(engine, hostname=HOST, handles=1)
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    arq = arq_binding.create(_ctx(), profile, 'p1')[0]['uuid']
    instance = str(uuidlib.uuid4())
    arq_binding.start_bind(dconf, _ctx(), {arq: {
        'hostname': HOST, 'device_rp_uuid': device.rp_uuid,
        'instance_uuid': instance}}).result(30)
    assert seed.arq_rows(engine)[arq].state == states.BOUND
    seen = []

    def statement(_conn, _cursor, text, *_args):
        seen.append(' '.join(text.split()).lower())
    sa.event.listen(engine, 'before_cursor_execute', statement)
    try:
        assert arq_binding.delete(dconf, _ctx(),
                                  instance_uuid=instance) == []
    finally:
        sa.event.remove(engine, 'before_cursor_execute', statement)
    assert arq not in seed.arq_rows(engine)
    assert [s for s in seen if s.startswith('update ' + _ARQ.name)] == []


def test_a_bind_under_way_when_marked_ends_with_its_mdev_removed(
        dconf, engine, tree, fake_nova, monkeypatch):
    """A vGPU bind still making its mdev when Nova deletes the instance's
    ARQs, the delete's conductor dying after the removal: the bind,
    ending after, finds its ARQ Deleting, not BindStarted, and does not
    end it Bound (with an mdev, for an instance gone), but removes the
    mdev it made; the periodic then finishes the delete."""
    device = seed.seed_device(engine, hostname=HOST, handles=1,
                              attach_type='MDEV', asked_type=VGPU_TYPE)
    profile = seed.seed_profile(engine, [{'resources:VGPU': '1'}])
    arq = arq_binding.create(_ctx(), profile, 'p1')[0]['uuid']
    instance = str(uuidlib.uuid4())
    agent = vgpu.HeldAgent(dconf, HOST)
    with fake_privsep.in_process(dconf), \
            seed.agent_endpoint(dconf, HOST, manager=agent):
        binding = arq_binding.start_bind(dconf, _ctx(), {arq: {
            'hostname': HOST, 'device_rp_uuid': device.rp_uuid,
            'instance_uuid': instance}})
        mdev, _arrived, go = agent.creation(0)
        tree.add_mdev(GPU, mdev, VGPU_TYPE)
        _dies_deleting(dconf, monkeypatch, instance)
        assert _read(_remove_file(tree, mdev)) == '1'
        open(_remove_file(tree, mdev), 'w').close()
        go.set()
        binding.result(30)
        row = seed.arq_rows(engine)[arq]
        assert row.state == states.DELETING
        # The bind's own undo.
        assert _read(_remove_file(tree, mdev)) == '1'
        assert [e for e in fake_nova.events
                if e['status'] == 'completed'] == []

        _age(engine, arq, dconf)
        arq_binding.fail_stuck(dconf, cyborg_context.get_admin_context())
    assert arq not in seed.arq_rows(engine)
    assert seed.handles_in_use(engine) == 0
