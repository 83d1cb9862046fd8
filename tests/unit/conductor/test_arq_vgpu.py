"""vGPU binds: MDEV handles make the agent create the mdev at bind (Nova's
or a standalone allocation) and remove it at unbind (the real agent
endpoint on a fake sysfs tree, over an in-process fake:// transport)."""

import os
import threading
import uuid as uuidlib

import pytest

from cyborg.agent import manager as agent_manager
from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.db.api import attach_handles as handle_db
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import privsep as fake_privsep
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http
from tests.fixtures import sysfs as fake_sysfs
from tests.unit.conductor import test_arq_allocation as allocation

HOST = 'gpu-host'
GPU = '0000:0c:00.0'
VGPU_TYPE = 'nvidia-223'

# The real Placement, shared by this module's tests.
placement_url = seed.placement_url
fake_nova = recording_http.fake_nova


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
    with fake_privsep.in_process(vconf), seed.agent_endpoint(vconf, HOST):
        yield


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


class HeldAgent(agent_manager.AgentManager):
    """The agent, each mdev creation held (in the order asked) until the
    test lets it go: a slow driver, to make two binds' order certain."""

    def __init__(self, conf, host):
        super().__init__(conf, host, drivers={})
        self.asked = []                 # (mdev uuid, arrived, go)
        self._lock = threading.Lock()

    def create_vgpu_mdev(self, context, pci_address, asked_type, mdev_uuid):
        arrived, go = threading.Event(), threading.Event()
        with self._lock:
            self.asked.append((mdev_uuid, arrived, go))
        arrived.set()
        assert go.wait(30), 'the held mdev creation was never let go'
        return super().create_vgpu_mdev(context, pci_address, asked_type,
                                        mdev_uuid)

    def creation(self, index):
        """The ``index``-th creation asked, once it is waiting."""
        for _ in range(300):
            with self._lock:
                if len(self.asked) > index:
                    return self.asked[index]
            threading.Event().wait(0.1)
        raise AssertionError(f'mdev creation {index} was never asked')


@pytest.mark.parametrize('stale_ends', ['first', 'last'])
def test_a_bind_unbound_and_bound_again_is_not_ended_by_the_first(
        vconf, db, tree, fake_nova, stale_ends):
    """A vGPU bind, slow in making its mdev, is unbound and the ARQ bound
    again for another instance, which takes the same (only) handle.  The
    first bind's work, ending late, used to pass for the second's: ending
    it Bound with the first instance's event (the second instance's never
    came), or, ending after it, removing the mdev the second had made
    (same handle, same mdev uuid)."""
    vconf.set_override('auth_type', 'none', group='nova')
    vconf.set_override('endpoint_override', fake_nova.url, group='nova')
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    device = seed.seed_device(db, hostname=HOST, handles=1,
                              attach_type='MDEV', asked_type=VGPU_TYPE)
    profile = seed.seed_profile(db, [{'resources:VGPU': '1'}])
    arq = arq_binding.create(ctx, profile, 'p1')[0]['uuid']
    first, second = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    agent = HeldAgent(vconf, HOST)
    with fake_privsep.in_process(vconf), \
            seed.agent_endpoint(vconf, HOST, manager=agent):
        def bind(instance):
            return arq_binding.start_bind(vconf, ctx, {arq: {
                'hostname': HOST, 'device_rp_uuid': device.rp_uuid,
                'instance_uuid': instance}})

        stale = bind(first)
        handle, _arrived, stale_go = agent.creation(0)
        arq_binding.unbind(vconf, ctx, [arq])
        fresh = bind(second)
        again, _arrived, fresh_go = agent.creation(1)
        assert again == handle          # the same handle, the same mdev
        if stale_ends == 'first':
            stale_go.set()
            stale.result(30)
            fresh_go.set()
            fresh.result(30)
        else:
            fresh_go.set()
            fresh.result(30)
            tree.add_mdev(GPU, handle, VGPU_TYPE)  # the kernel's part
            stale_go.set()
            stale.result(30)
    row = seed.arq_rows(db)[arq]
    assert (row.state, row.instance_uuid) == ('Bound', second), \
        row.bind_failure_reason
    assert [(e['server_uuid'], e['tag'], e['status'])
            for e in fake_nova.events] == [(second, arq, 'completed')]
    remove = os.path.join(tree.root, 'bus', 'mdev', 'devices', handle,
                          'remove')
    assert not os.path.exists(remove) or open(remove).read() != '1'
