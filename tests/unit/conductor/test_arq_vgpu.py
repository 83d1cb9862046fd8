"""vGPU binds: MDEV handles make the agent create the mdev at bind (Nova's
or a standalone allocation) and remove it at unbind (the real agent
endpoint on a fake sysfs tree, over an in-process fake:// transport)."""

import os
import uuid as uuidlib

import pytest

from cyborg.agent import privileged
from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.db.api import attach_handles as handle_db
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.fixtures import sysfs as fake_sysfs
from tests.unit.conductor import test_arq_allocation as allocation

HOST = 'gpu-host'
GPU = '0000:0c:00.0'
VGPU_TYPE = 'nvidia-223'

# The real Placement, shared by this module's tests.
placement_url = seed.placement_url


@pytest.fixture
def tree(tmp_path):
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(GPU, '0x10de', '0x1eb8', '0x030200', driver='nvidia')
    tree.add_mdev_type(GPU, VGPU_TYPE, 'GRID T4-16C', 1)
    return tree


@pytest.fixture
def vconf(conf, db, placement_url, tree):
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('sysfs_root', tree.root, group='agent')
    placement_client.reset_clients()
    return conf


@pytest.fixture
def agent(vconf):
    privileged.default.set_client_mode(False)
    with seed.agent_endpoint(vconf, HOST):
        yield
    privileged.default.set_client_mode(True)


def _create_file(tree):
    with open(os.path.join(tree.device_path(GPU), 'mdev_supported_types',
                           VGPU_TYPE, 'create')) as f:
        return f.read()


def _bind_vgpu(conf, db, ctx, asked_type):
    device = seed.seed_device(db, hostname=HOST, handles=1,
                              attach_type='MDEV', asked_type=asked_type)
    profile = seed.seed_profile(db, [{'resources:VGPU': '1'}])
    arq = arq_binding.create(ctx, profile, 'p1')[0]['uuid']
    arq_binding.start_bind(conf, ctx, {arq: {
        'hostname': HOST, 'device_rp_uuid': device.rp_uuid,
        'instance_uuid': str(uuidlib.uuid4())}}).result(30)
    return arq, seed.arq_rows(db)[arq]


def test_mdev_created_at_bind_and_removed_at_unbind(vconf, db, agent, tree):
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    arq, row = _bind_vgpu(vconf, db, ctx, VGPU_TYPE)
    assert row.state == 'Bound', row.bind_failure_reason
    # The mdev is named after the attach handle.
    handle_uuid = handle_db.get(ctx, row.attach_handle_id).uuid
    assert _create_file(tree) == handle_uuid

    tree.add_mdev(GPU, handle_uuid, VGPU_TYPE)  # what the kernel does
    arq_binding.unbind(vconf, ctx, [arq])
    remove = os.path.join(tree.root, 'bus', 'mdev', 'devices', handle_uuid,
                          'remove')
    with open(remove) as f:
        assert f.read() == '1'
    assert seed.arq_rows(db)[arq].state == 'Unbound'
    assert seed.handles_in_use(db) == 0


def test_a_standalone_allocation_creates_the_mdev(vconf, db, agent, tree):
    """No Nova: Placement picks the vGPU, the conductor claims it and the
    agent of the GPU's host makes the mdev of the handle taken."""
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    trait = 'CUSTOM_T_' + uuidlib.uuid4().hex.upper()
    device = allocation._provide(vconf, db, trait, total=1, hostname=HOST,
                                 resource_class='VGPU', attach_type='MDEV',
                                 asked_type=VGPU_TYPE)
    arq, = allocation._arqs(db, ctx, {'resources:VGPU': '1',
                                      'trait:' + trait: 'required'})
    assert arq_allocation.allocate(vconf, ctx, arq, 'pod-1', 'k8s-pod') == {
        'uuid': arq, 'device_rp_uuid': device.rp_uuid, 'hostname': HOST}
    row = seed.arq_rows(db)[arq]
    assert row.state == 'Bound', row.bind_failure_reason
    assert _create_file(tree) == handle_db.get(ctx,
                                               row.attach_handle_id).uuid


def test_mdev_creation_failure_fails_the_bind(vconf, db, agent, tree):
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    _arq, row = _bind_vgpu(vconf, db, ctx, 'nvidia-999')
    assert row.state == 'BindFailed'
    assert 'nvidia-999' in row.bind_failure_reason
    assert seed.handles_in_use(db) == 0


def test_mdev_removal_failure_ends_unbind_failed(vconf, db, agent, tree,
                                                 caplog):
    """The agent cannot remove the mdev: UnbindFailed with the reason, the
    handle kept (the mdev may still serve the instance); an unbind that
    works ends it, and an UnbindFailed ARQ can always be deleted."""
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    arq, row = _bind_vgpu(vconf, db, ctx, VGPU_TYPE)
    handle_uuid = handle_db.get(ctx, row.attach_handle_id).uuid
    tree.add_mdev(GPU, handle_uuid, VGPU_TYPE)
    remove = os.path.join(tree.root, 'bus', 'mdev', 'devices', handle_uuid,
                          'remove')
    os.remove(remove)
    os.mkdir(remove)  # writing '1' to it fails, even as root

    arq_binding.unbind(vconf, ctx, [arq])
    row = seed.arq_rows(db)[arq]
    assert row.state == 'UnbindFailed'
    assert handle_uuid in row.bind_failure_reason
    assert f'agent on {HOST} could not remove' in row.bind_failure_reason
    assert seed.handles_in_use(db) == 1
    # One WARNING, once the state is committed.
    assert [r.getMessage() for r in caplog.records
            if r.levelname == 'WARNING' and 'Unbinding' in r.getMessage()
            ] == [f'Unbinding accelerator request {arq} failed: '
                  f'{row.bind_failure_reason}']

    os.rmdir(remove)
    open(remove, 'w').close()
    arq_binding.unbind(vconf, ctx, [arq])
    assert seed.arq_rows(db)[arq].state == 'Unbound'
    assert seed.handles_in_use(db) == 0

    # Failed again, then deleted: the row and the handle go.
    arq, row = _bind_vgpu(vconf, db, ctx, VGPU_TYPE)
    handle_uuid = handle_db.get(ctx, row.attach_handle_id).uuid
    os.makedirs(os.path.join(tree.root, 'bus', 'mdev', 'devices',
                             handle_uuid, 'remove'), exist_ok=True)
    arq_binding.unbind(vconf, ctx, [arq])
    assert seed.arq_rows(db)[arq].state == 'UnbindFailed'
    assert arq_binding.delete(vconf, ctx, [arq]) == []
    assert arq not in seed.arq_rows(db)
    assert seed.handles_in_use(db) == 0
