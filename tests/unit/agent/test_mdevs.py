"""The mdevs of Bound ARQs, recreated when the agent starts (a reboot
takes them away), before its first report: against the real conductor
(fake:// RPC, a real database, the real Placement), the agent as
``cmd.agent.build_services`` makes it, on a fake sysfs tree whose
privileged writes run in process, the tree doing what the kernel does
with them."""

import json
import logging
import os
import shutil
import uuid as uuidlib

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.agent import manager as agent_manager
from cyborg.agent import mdevs as agent_mdevs
from cyborg.agent import reporter as agent_reporter
from cyborg.cmd import agent as agent_cmd
from cyborg.common import context as cyborg_context
from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from tests.fixtures import privsep as fake_privsep
from tests.fixtures import sysfs as fake_sysfs
from tests.unit.agent import test_reporter

HOST = fake_sysfs.HOST
T4 = ('10de', '1eb8', '030200')
GPU = '0000:0c:00.0'
OTHER_GPU = '0000:0d:00.0'
# A T4's time-sliced types and how many of each it hosts alone.
TYPES = {'nvidia-222': 16, 'nvidia-223': 8}
_wait_for = test_reporter._wait_for


class Kernel:
    """The fake tree as the kernel keeps it: a uuid written to a type's
    ``create`` makes the mdev, after which a time-sliced GPU offers that
    type only (its ``available_instances``, the others 0); a reboot
    takes every mdev away."""

    def __init__(self, tree):
        self.tree = tree
        self.made = []

    def add_gpu(self, address):
        self.tree.add_pci(address, *T4, driver='nvidia')
        for type_id, count in TYPES.items():
            self.tree.add_mdev_type(address, type_id, 'GRID T4-' + type_id,
                                    count)

    def created(self, parent, mdev_type, mdev_uuid):
        self.tree.add_mdev(parent, mdev_uuid, mdev_type)
        self.made.append(mdev_uuid)
        self._offer(parent)

    def mdevs(self, parent=GPU):
        found = os.path.join(self.tree.root, 'bus', 'mdev', 'devices')
        return sorted(name for name in os.listdir(found)
                      if os.path.realpath(os.path.join(found, name))
                      .startswith(self.tree.device_path(parent)))

    def _offer(self, parent):
        held = {}
        for name in self.mdevs(parent):
            link = os.path.join(self.tree.device_path(parent), name,
                                'mdev_type')
            held.setdefault(os.path.basename(os.readlink(link)), 0)
            held[os.path.basename(os.readlink(link))] += 1
        for type_id, count in TYPES.items():
            free = (count if not held else
                    count - held[type_id] if type_id in held else 0)
            self.tree.set_available(parent, type_id, free)

    def reboot(self):
        for parent in (GPU, OTHER_GPU):
            if not os.path.exists(self.tree.device_path(parent)):
                continue
            for name in self.mdevs(parent):
                shutil.rmtree(os.path.join(self.tree.device_path(parent),
                                           name))
                os.unlink(os.path.join(self.tree.root, 'bus', 'mdev',
                                       'devices', name))
                for type_id in TYPES:
                    link = os.path.join(
                        self.tree.device_path(parent), 'mdev_supported_types',
                        type_id, 'devices', name)
                    if os.path.lexists(link):
                        os.unlink(link)
            self._offer(parent)


@pytest.fixture
def kernel(conf, tmp_path, monkeypatch):
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    kernel = Kernel(tree)
    kernel.add_gpu(GPU)
    fake_sysfs.apply_options(conf, {
        'enabled_drivers': ['nvidia_gpu_driver'],
        'enabled_vgpu_types': sorted(TYPES), 'nvml_module': 'no_nvml_here'},
        tree.root, tmp_path / 'state')
    with fake_privsep.in_process(conf) as privileged:
        create = privileged.create_mdev

        def create_mdev(parent, mdev_type, mdev_uuid):
            create(parent, mdev_type, mdev_uuid)
            kernel.created(parent, mdev_type, mdev_uuid)
        monkeypatch.setattr(privileged, 'create_mdev', create_mdev)
        yield kernel


def _agent(conf):
    """The agent's reporter and endpoint as ``cyborg-agent`` makes them
    (not started)."""
    services = agent_cmd.build_services(conf, HOST)
    reporter = next(s for s in services
                    if isinstance(s, agent_reporter.Reporter))
    # The endpoint its RPC server serves.
    manager = next(e for e in services[0]._server.dispatcher.endpoints
                   if isinstance(e, agent_manager.AgentManager))
    return reporter, manager


def _bound(engine, mdev_type, parent=GPU, state='Bound'):
    """What a bind of a vGPU of ``mdev_type`` on ``parent`` leaves: its
    first free handle taken by an ARQ in ``state``; (arq, handle uuid)."""
    deployable = f'{HOST}_{parent}_{mdev_type}'
    with sa.orm.Session(engine) as session, session.begin():
        dep = session.scalars(sa.select(models.Deployable).where(
            models.Deployable.name == deployable)).one()
        handle = session.scalars(
            sa.select(models.AttachHandle)
            .where(models.AttachHandle.deployable_id == dep.id,
                   models.AttachHandle.in_use.is_(False))
            .order_by(models.AttachHandle.id)).first()
        handle.in_use = True
        profile = models.DeviceProfile(
            uuid=str(uuidlib.uuid4()), name='vgpu-' + uuidlib.uuid4().hex,
            profile_json=json.dumps([{'resources:VGPU': '1'}]))
        session.add(profile)
        session.flush()
        arq = models.ExtARQ(
            uuid=str(uuidlib.uuid4()), state=state,
            device_profile_id=profile.id, device_profile_group_id=0,
            project_id='p1', hostname=HOST, device_rp_uuid=dep.rp_uuid,
            instance_uuid=str(uuidlib.uuid4()), attach_handle_id=handle.id,
            deployable_id=dep.id, bind_id=str(uuidlib.uuid4()))
        session.add(arq)
        return arq.uuid, handle.uuid


def _running_host(conf, kernel, conductor, types=('nvidia-223',)):
    """A host reported, then a vGPU of each of ``types`` bound on it and
    made by the agent's endpoint (what a bind asks): {handle: arq}."""
    reporter, manager = _agent(conf)
    reporter.report_now()
    context = cyborg_context.get_admin_context()
    bound = {}
    for mdev_type in types:
        arq, handle = _bound(conductor.engine, mdev_type)
        assert manager.create_vgpu_mdev(context, GPU, mdev_type, handle)
        bound[handle] = arq
    reporter.report_now()
    return bound


def _first_report(reporter):
    """Start the reporter; once its first report is acknowledged, stop
    it."""
    reporter.start()
    try:
        _wait_for(lambda: reporter.reports_acknowledged > 0)
    finally:
        reporter.stop(timeout=10)
    assert reporter.reports_acknowledged >= 1


def test_a_bound_vgpu_is_made_again_before_the_first_report(
        conf, kernel, conductor):
    """The review's T4: time-sliced, types 222 and 223 enabled, an
    instance holding a 223 vGPU.  After a reboot the mdev was gone and
    nothing made it again: the first report offered the GPU's whole
    capacity to 222 (16), and a 222 bind would have left no room for the
    bound 223 vGPU for good.  It is made again before the first report,
    which offers what the host offered before the reboot."""
    bound = _running_host(conf, kernel, conductor)
    (handle, _arq), = bound.items()
    running = conductor.deployables()
    assert running == {f'{HOST}_{GPU}_nvidia-222': 0,
                       f'{HOST}_{GPU}_nvidia-223': 8}
    providers = conductor.providers()

    kernel.reboot()
    assert kernel.mdevs() == []
    reporter, _manager = _agent(conf)
    _first_report(reporter)
    assert conductor.deployables() == running
    assert conductor.providers() == providers
    assert kernel.mdevs() == [handle]


def test_only_the_bound_arqs_mdevs_are_made_and_existing_ones_kept(
        conf, kernel, conductor):
    """An mdev still there (the agent restarted, no reboot) is left as it
    is; an ARQ not Bound (its bind under way, which makes the mdev
    itself) gets none."""
    bound = _running_host(conf, kernel, conductor)
    _bound(conductor.engine, 'nvidia-223', state='BindStarted')
    made = list(kernel.made)
    reporter, manager = _agent(conf)
    _first_report(reporter)
    assert kernel.made == made
    assert kernel.mdevs() == sorted(bound)
    assert manager.mdevs.failed == {}


def test_a_failing_create_is_logged_and_the_agent_goes_on(
        conf, kernel, conductor, caplog):
    """One vGPU cannot be made again (its type's create cannot be
    written): a WARNING names its ARQ and mdev, the others are made and
    the agent reports."""
    kernel.add_gpu(OTHER_GPU)
    reporter, manager = _agent(conf)
    reporter.report_now()
    context = cyborg_context.get_admin_context()
    broken_arq, broken = _bound(conductor.engine, 'nvidia-223',
                                parent=OTHER_GPU)
    _arq, handle = _bound(conductor.engine, 'nvidia-223')
    for parent, mdev in ((OTHER_GPU, broken), (GPU, handle)):
        assert manager.create_vgpu_mdev(context, parent, 'nvidia-223', mdev)
    reporter.report_now()
    running = conductor.deployables()

    kernel.reboot()
    create = os.path.join(kernel.tree.device_path(OTHER_GPU),
                          'mdev_supported_types', 'nvidia-223', 'create')
    os.remove(create)
    os.mkdir(create)        # writing the uuid fails, even as root
    caplog.set_level(logging.INFO, logger='cyborg.agent.mdevs')
    reporter, manager = _agent(conf)
    _first_report(reporter)
    assert kernel.mdevs() == [handle]
    assert kernel.mdevs(OTHER_GPU) == []
    assert list(manager.mdevs.failed) == [broken]
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == 'WARNING' and r.name == agent_mdevs.__name__]
    assert len(warnings) == 1
    assert broken in warnings[0] and broken_arq in warnings[0]
    assert 'cannot be written' in warnings[0]
    # The GPU whose vGPU was made offers what it did before.
    gpu = {k: v for k, v in conductor.deployables().items() if GPU in k}
    assert gpu == {k: v for k, v in running.items() if GPU in k}


class _OldConductor(conductor_manager.ConductorManager):
    """A conductor of the release before: conductor RPC 1.8."""

    target = messaging.Target(version='1.8')


@pytest.mark.parametrize('older', ['capped', 'unsupported'])
def test_an_older_conductor_is_skipped_with_one_line(
        conf, kernel, conductor, caplog, older):
    """``[upgrade_levels]conductor`` capped below 1.9, or a conductor
    that does not serve it (none set, mid-upgrade): nothing is made
    again, one WARNING says so, and the agent reports."""
    _running_host(conf, kernel, conductor)
    kernel.reboot()
    if older == 'capped':
        conf.set_override('conductor', '1.8', group='upgrade_levels')
    else:
        conductor.stop()
        server = rpc.get_server(conf, conductor_rpcapi.TOPIC, 'cond-old',
                                [_OldConductor(conf, 'cond-old')])
        server.start()
    rpc._CAPPED_LOGGED.clear()
    caplog.set_level(logging.WARNING)
    try:
        reporter, manager = _agent(conf)
        _first_report(reporter)
    finally:
        rpc._CAPPED_LOGGED.clear()
        if older != 'capped':
            server.stop()
            server.wait()
    assert kernel.mdevs() == []
    said = [r.getMessage() for r in caplog.records
            if 'bound_mdevs' in r.getMessage()]
    assert len(said) == 1, said
    assert 'not made again at start' in said[0]


def test_the_conductor_away_at_start_is_waited_for(conf, kernel, conductor,
                                                   caplog):
    """No conductor answers when the agent starts: the mdevs are asked
    for again after the report's back-off, and no report goes out
    meanwhile; once one answers, the vGPU is made, then reported."""
    bound = _running_host(conf, kernel, conductor)
    running = conductor.deployables()
    kernel.reboot()
    conductor.stop()
    conf.set_override('rpc_response_timeout', 1)
    caplog.set_level(logging.WARNING, logger='cyborg.agent.reporter')
    reporter, _manager = _agent(conf)
    reporter.start()
    try:
        _wait_for(lambda: any('Recreating the mdevs' in r.getMessage()
                              for r in caplog.records))
        assert reporter.last_report_started is None
        conductor.start()
        _wait_for(lambda: reporter.reports_acknowledged > 0)
    finally:
        reporter.stop(timeout=10)
    assert reporter.reports_acknowledged >= 1
    assert kernel.mdevs() == sorted(bound)
    assert conductor.deployables() == running


def test_a_removal_while_recreating_is_not_undone(conf, kernel, conductor):
    """An unbind's removal that reaches the agent after the conductor
    listed the mdevs, before they were made: that one is not made."""
    bound = _running_host(conf, kernel, conductor)
    (handle, _arq), = bound.items()
    kernel.reboot()
    reporter, manager = _agent(conf)

    listed = []

    class Listing(conductor_rpcapi.ConductorAPI):
        """The conductor's client; the unbind arrives as it answers."""

        def bound_mdevs(self, context, hostname):
            listed.extend(super().bound_mdevs(context, hostname))
            manager.remove_vgpu_mdev(context, GPU, handle, 'nvidia-223')
            return listed

    manager.mdevs._conductor = Listing(conf, timeout=10)
    _first_report(reporter)
    assert [m['mdev_uuid'] for m in listed] == [handle]
    assert kernel.mdevs() == []
    assert manager.mdevs.restored and manager.mdevs.failed == {}


def test_a_host_without_a_driver_making_mdevs_asks_nothing(conf):
    class Unasked:
        def __getattr__(self, name):
            raise AssertionError(f'asked {name}')

    conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
    from cyborg.drivers import loader
    mdevs = agent_mdevs.Mdevs(conf, HOST, loader.load_drivers(conf, HOST),
                              conductor_api=Unasked())
    mdevs.restore()
    assert mdevs.restored
