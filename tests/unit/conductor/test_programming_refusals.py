"""A programming refused before anything ran on the card is no failed
programming: ``cyborg_conductor_programmings_total`` counts programmings
this conductor ran.  Refused once the image downloaded (another conductor
set the mark meanwhile, a bind took a handle meanwhile) it is not counted
and sends no notification: its start goes out only once the card is its
own.  The agent not reached (the broker away), it is not counted; its
start, sent as the agent was asked, is answered by an error."""

import datetime

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import glance as glance_client
from cyborg.conductor import manager
from cyborg.conductor import programming
from cyborg.db import models
from cyborg.db.api import deployables as deployable_db
from tests.fixtures import notifications
from tests.unit.agent import test_reporter_faults as reporter_faults
from tests.unit.conductor import test_programming as tp

pconf, ctx, glance, agent = tp.pconf, tp.ctx, tp.glance, tp.agent
device, placement_url = tp.device, tp.placement_url
broker = reporter_faults.broker

OUTCOMES = ('programmed', 'failed', 'outcome_unknown')


def _counts():
    return {o: tp._programmings(o) for o in OUTCOMES}


def _program_types(sent):
    return [m['event_type'] for _ctx, m, _p, _r in sent()
            if m['event_type'].startswith('deployable.program.')]


def _while_downloading(monkeypatch, meanwhile):
    download = glance_client.download

    def downloading(conf, meta):
        meanwhile()
        return download(conf, meta)

    monkeypatch.setattr(glance_client, 'download', downloading)


def _another_conductor_marks_it(db, device):
    def mark():
        with db.begin() as c:
            c.execute(sa.update(models.Deployable)
                      .where(models.Deployable.id == device.deployable_id)
                      .values(programming_until=(
                          timeutils.utcnow()
                          + datetime.timedelta(minutes=5))))
    return mark


def _a_bind_takes_a_handle(db, device):
    def take():
        with db.begin() as c:
            c.execute(sa.update(models.AttachHandle)
                      .where(models.AttachHandle.deployable_id ==
                             device.deployable_id)
                      .values(in_use=True))
    return take


@pytest.mark.parametrize('meanwhile, refusal', [
    (_another_conductor_marks_it, exception.Conflict),
    (_a_bind_takes_a_handle, exception.InUse)])
def test_a_programming_refused_after_its_download_is_not_counted(
        pconf, ctx, db, agent, device, glance, monkeypatch, meanwhile,
        refusal):
    image = glance.add_image(b'refused' * 10)
    _while_downloading(monkeypatch, meanwhile(db, device))
    before = _counts()
    with notifications.published(pconf) as sent:
        with pytest.raises(refusal):
            programming.program_deployable(pconf, ctx,
                                           device.deployable_uuid, image)
        # No programming ran: none began, none failed.
        assert _program_types(sent) == []
    assert _counts() == before
    assert tp._loaded(agent) is None
    # A programming that runs is counted and announced all the same.
    monkeypatch.undo()
    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(programming_until=None))
        c.execute(sa.update(models.AttachHandle).values(in_use=False))
    with notifications.published(pconf) as sent:
        programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                       image)
        assert _program_types(sent) == ['deployable.program.start',
                                        'deployable.program.end']
    assert _counts()['programmed'][0] == before['programmed'][0] + 1


@pytest.fixture
def fpga_conf(conf, db, placement_url, glance, tmp_path):
    return tp.pconf.__wrapped__(conf, db, placement_url, glance, tmp_path)


def test_an_agent_not_reached_is_no_failed_programming(
        fpga_conf, db, ctx, glance, broker):
    """The broker away: the call never reached the agent, the card is as
    it was; its start is answered by an error, and no programming is
    counted."""
    transport = rpc._TRANSPORT
    device = tp._reported(fpga_conf, db, handles=1)
    image = glance.add_image(b'never sent' * 10)
    endpoint = manager.ConductorManager(fpga_conf, 'c1')
    before = _counts()
    with notifications.published(fpga_conf) as sent:
        broker.cut()
        try:
            outcome = reporter_faults._outcome(
                lambda: endpoint.deployable_program(
                    ctx, device.deployable_uuid, image), 20)
        finally:
            broker.restore()
        assert _program_types(sent) == ['deployable.program.start',
                                        'deployable.program.error']
    assert isinstance(outcome, messaging.ExpectedException), outcome
    assert isinstance(outcome.exc_info[1], exception.ServiceUnavailable)
    assert _counts() == before
    assert deployable_db.program_target(
        ctx, device.deployable_uuid).programming_until is None
    rpc.wait_reply_queue(transport, 30)
