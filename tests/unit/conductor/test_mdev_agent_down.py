"""vGPU ARQs when the host's agent is down (its host died: Nova
evacuates; or the agent alone stopped, and Nova keeps scheduling there).

A delete by instance waited 30 s for each mdev the dead agent was asked
to remove, one after another: past the API's [api]conductor_timeout, so
Nova's evacuate got a 503 (and the ARQs were deleted after it anyway).
A bind waited for the mdev's creation the whole [DEFAULT]bind_timeout,
holding a bind worker, and [conductor]workers such binds held up every
other slow bind of the conductor.  Now the agent has
[conductor]mdev_timeout, within the API's wait, removals run at once,
and an agent that stopped reporting is not asked at all."""

import datetime
import time
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_binding, silence
from cyborg.db import models
from cyborg.db.api import clock as clock_db
from cyborg.objects import clock as objects_clock
from tests.fixtures import arqs as seed
from tests.fixtures import privsep as fake_privsep
from tests.unit.conductor import agent_endpoint
from tests.unit.conductor import test_arq_vgpu as vgpu

HOST, VGPU_TYPE = vgpu.HOST, vgpu.VGPU_TYPE
fake_nova, placement_url = vgpu.fake_nova, vgpu.placement_url
tree, vconf = vgpu.tree, vgpu.vconf


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


def _bound(conf, db, ctx, count, spare=0):
    """An instance with ``count`` vGPUs bound on HOST (its agent up then),
    on a device of ``spare`` more; returns (instance, [ARQ uuids],
    device)."""
    device = seed.seed_device(db, hostname=HOST, handles=count + spare,
                              attach_type='MDEV', asked_type=VGPU_TYPE)
    profile = seed.seed_profile(db, [{'resources:VGPU': str(count)}])
    arqs = [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]
    instance = str(uuidlib.uuid4())
    with fake_privsep.in_process(conf), seed.agent_endpoint(conf, HOST):
        arq_binding.start_bind(conf, ctx, {arq: {
            'hostname': HOST, 'device_rp_uuid': device.rp_uuid,
            'instance_uuid': instance} for arq in arqs}).result(30)
    assert {seed.arq_rows(db)[a].state for a in arqs} == {'Bound'}
    return instance, arqs, device


def _bind_one(conf, db, ctx, device):
    """A new vGPU ARQ bound on ``device`` for a new instance, its bind
    ended; returns its uuid."""
    profile = seed.seed_profile(db, [{'resources:VGPU': '1'}])
    arq = arq_binding.create(ctx, profile, 'p1')[0]['uuid']
    arq_binding.start_bind(conf, ctx, {arq: {
        'hostname': HOST, 'device_rp_uuid': device.rp_uuid,
        'instance_uuid': str(uuidlib.uuid4())}}).result(60)
    return arq


def _reported(db, ago):
    """HOST's agent last reported ``ago`` (a timedelta) ago."""
    with db.begin() as c:
        c.execute(sa.insert(models.Host).values(
            hostname=HOST, placement_synced=True,
            last_report_at=clock_db.utcnow() - ago))


def _api_context(wait):
    """A context as the API sends it: it stops waiting in ``wait`` s."""
    return cyborg_context.RequestContext(
        project_id='p1', is_service=True,
        answer_by=objects_clock.reference.now() + wait)


def test_an_evacuation_s_delete_answers_in_time(vconf, db, ctx, tree):
    vconf.set_override('mdev_timeout', 3, group='conductor')
    instance, arqs, _device = _bound(vconf, db, ctx, 2)
    # The host died a moment ago: its agent answers nothing.
    with agent_endpoint.serving(vconf, HOST, None):
        began = time.monotonic()
        arq_binding.delete(vconf, _api_context(20), instance_uuid=instance)
        took = time.monotonic() - began
    # The two removals at once, each given 3 s: not 2 x 30 s.
    assert took < 5.5, took
    assert not set(arqs) & set(seed.arq_rows(db))
    assert seed.handles_in_use(db) == 0


def test_a_removal_gives_up_before_the_api_stops_waiting(vconf, db, ctx,
                                                         tree):
    instance, arqs, _device = _bound(vconf, db, ctx, 1)
    with agent_endpoint.serving(vconf, HOST, None):
        began = time.monotonic()
        arq_binding.unbind(vconf, _api_context(6), arqs)
        took = time.monotonic() - began
    # mdev_timeout is 20 s; the API waits 6: the agent gets 3.
    assert took < 5, took
    row = seed.arq_rows(db)[arqs[0]]
    assert row.state == 'UnbindFailed'
    assert 'did not answer' in row.bind_failure_reason


def test_a_silent_agent_is_not_asked(vconf, db, ctx, tree):
    instance, arqs, device = _bound(vconf, db, ctx, 1, spare=1)
    _reported(db, silence.silent_after(vconf.periodic_interval)
              + datetime.timedelta(seconds=5))
    with agent_endpoint.serving(vconf, HOST, None):
        began = time.monotonic()
        arq_binding.unbind(vconf, ctx, arqs)
        row = seed.arq_rows(db)[arqs[0]]
        assert row.state == 'UnbindFailed'
        assert f'the agent on {HOST} has not reported since' in (
            row.bind_failure_reason)
        # A bind there fails at once, not after the bind's whole time.
        arq = _bind_one(vconf, db, ctx, device)
        took = time.monotonic() - began
    row = seed.arq_rows(db)[arq]
    assert row.state == 'BindFailed'
    assert 'has not reported since' in row.bind_failure_reason
    assert took < 3, took
    # Deleting the first goes on without the agent.
    arq_binding.delete(vconf, ctx, instance_uuid=instance)
    assert arqs[0] not in seed.arq_rows(db)


def test_a_bind_whose_agent_does_not_answer_fails_in_mdev_timeout(
        vconf, db, ctx, tree):
    vconf.set_override('mdev_timeout', 2, group='conductor')
    device = seed.seed_device(db, hostname=HOST, handles=1,
                              attach_type='MDEV', asked_type=VGPU_TYPE)
    with agent_endpoint.serving(vconf, HOST, None):
        began = time.monotonic()
        arq = _bind_one(vconf, db, ctx, device)
        took = time.monotonic() - began
    row = seed.arq_rows(db)[arq]
    assert row.state == 'BindFailed'
    # Not [DEFAULT]bind_timeout (240 s by default): the worker is free.
    assert took < 6, took
    assert seed.handles_in_use(db) == 0


def test_a_failed_unbind_leaves_a_newer_bind_alone(vconf, db, ctx, tree,
                                                   monkeypatch):
    """While an unbind waited for the agent to remove the mdev, another
    request unbound the ARQ and bound it again (its own mdev on the same
    handle): the first unbind's failure marked the new bind
    UnbindFailed, and that bind, lost, never told Nova it ended."""
    _instance, arqs, _device = _bound(vconf, db, ctx, 1)
    arq = arqs[0]
    real = arq_binding._release_mdevs

    def meanwhile_bound_again(conf, context, rows):
        failed = real(conf, context, rows)
        with db.begin() as c:
            c.execute(sa.update(models.ExtARQ).where(
                models.ExtARQ.uuid == arq).values(
                bind_id=str(uuidlib.uuid4())))
        return failed
    monkeypatch.setattr(arq_binding, '_release_mdevs',
                        meanwhile_bound_again)
    vconf.set_override('mdev_timeout', 1, group='conductor')
    with agent_endpoint.serving(vconf, HOST, None):
        arq_binding.unbind(vconf, ctx, [arq])
    row = seed.arq_rows(db)[arq]
    assert row.state == 'Bound' and row.bind_failure_reason is None
