"""``bound_mdevs`` (conductor RPC 1.9): the mdevs an agent makes again
when it starts, on each database: those of its own host's Bound ARQs
only."""

import json
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.unit.conductor import agent_endpoint


@pytest.fixture(params=databases.KINDS)
def engine(request):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _hold(engine, seeded, states):
    """An ARQ in each of ``states`` holding one handle of ``seeded``'s
    deployable, in handle order; [(arq uuid, handle uuid)]."""
    profile = seed.seed_profile(engine, [{'resources:VGPU': '1'}])
    held = []
    with sa.orm.Session(engine) as session, session.begin():
        profile_id = session.scalars(sa.select(models.DeviceProfile.id).where(
            models.DeviceProfile.uuid == profile)).one()
        handles = session.scalars(
            sa.select(models.AttachHandle)
            .where(models.AttachHandle.deployable_id == seeded.deployable_id)
            .order_by(models.AttachHandle.id)).all()
        for state, handle in zip(states, handles):
            handle.in_use = True
            arq = models.ExtARQ(
                uuid=str(uuidlib.uuid4()), state=state,
                device_profile_id=profile_id, device_profile_group_id=0,
                project_id='p1', hostname=seeded.hostname,
                attach_handle_id=handle.id,
                deployable_id=seeded.deployable_id)
            session.add(arq)
            held.append((arq.uuid, handle.uuid))
    return held


def test_the_hosts_bound_mdevs_are_listed(conf, engine):
    vgpus = seed.seed_device(engine, hostname='gpu-1', handles=5,
                             attach_type='MDEV', asked_type='nvidia-223')
    pgpu = seed.seed_device(engine, hostname='gpu-1', handles=1)
    elsewhere = seed.seed_device(engine, hostname='gpu-2', handles=1,
                                 attach_type='MDEV')
    held = _hold(engine, vgpus, ['Bound', 'BindStarted', 'UnbindFailed',
                                 'Bound'])
    _hold(engine, pgpu, ['Bound'])
    _hold(engine, elsewhere, ['Bound'])
    manager = conductor_manager.ConductorManager(conf, 'cond-1')
    context = cyborg_context.get_admin_context()
    assert manager.bound_mdevs(context, 'gpu-1') == [
        {'arq_uuid': arq, 'mdev_uuid': handle, 'pci_address': '0000:0c:00.0',
         'mdev_type': 'nvidia-223'}
        for arq, handle in (held[0], held[3])]
    assert manager.bound_mdevs(context, 'nowhere') == []
    # What an agent asks, through the JSON serialiser.
    assert json.loads(json.dumps(manager.bound_mdevs(context, 'gpu-2'))) \
        == manager.bound_mdevs(context, 'gpu-2')


@pytest.mark.parametrize('cap, can', [
    ('', True), ('1.9', True), ('1.8', False), ('2027.1', False)])
def test_agents_ask_it_only_of_conductors_that_serve_it(conf, cap, can):
    assert 'bound_mdevs' in dict(conductor_rpcapi.HISTORY)['1.9']
    conf.set_override('conductor', cap, group='upgrade_levels')
    with agent_endpoint.serving(conf, 'gpu-1', None):
        api = conductor_rpcapi.ConductorAPI(conf)
        assert api.can_list_bound_mdevs() is can
