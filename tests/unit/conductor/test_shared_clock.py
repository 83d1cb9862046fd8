"""The times one conductor writes and another compares with are told by
the database server's clock (``cyborg.db.api.clock.reference``), not each
host's: a conductor whose clock is two hours off neither fails another's
bind as stuck the moment it started, nor takes out a card another is
programming, nor holds back a Nova batch that is due, nor stamps the rows
it makes with its own wrong time."""

import datetime
import time
import uuid as uuidlib

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import clock
from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_binding, nova, programming
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import clock as clock_db
from tests.fixtures import arqs as seed
from tests.fixtures import recording_http
from tests.unit.db import test_reference_clock

fake_nova = recording_http.fake_nova

OFF = 2 * 3600


server_db = test_reference_clock.server_db


@pytest.fixture
def host_clock_off(monkeypatch):
    """Set this host's clock ``off`` seconds from the true time: what the
    reference clock reads, and what oslo's ``timeutils.utcnow()`` says."""
    true_utcnow = timeutils.utcnow

    def move(off):
        monkeypatch.setattr(clock, 'host_clock', lambda: time.time() + off)
        monkeypatch.setattr(timeutils, 'utcnow', lambda **kw: true_utcnow(
            **kw) + datetime.timedelta(seconds=off))
        clock_db.reference.forget()
    yield move
    monkeypatch.undo()
    clock_db.reference.forget()


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', user_id='u1',
                                         is_service=True)


def _server_now(engine):
    """The database server's time, as a naive UTC datetime."""
    query = {'mysql': 'SELECT UTC_TIMESTAMP(6)',
             'postgresql': "SELECT timezone('UTC', clock_timestamp())"}
    with engine.connect() as c:
        return c.scalar(sa.text(query[engine.dialect.name]))


def _started(engine, uuid, at):
    """The ARQ in BindStarted since ``at``, as a conductor leaves it."""
    with engine.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == uuid).values(
            state='BindStarted', bind_started_at=at,
            bind_id=str(uuidlib.uuid4()), instance_uuid=str(uuidlib.uuid4()),
            hostname='host1'))


def _state(engine, uuid):
    return seed.arq_rows(engine)[uuid]


def test_a_conductor_ahead_fails_only_binds_that_are_stuck(
        conf, server_db, ctx, host_clock_off):
    conf.set_override('bind_timeout', 60)
    host_clock_off(OFF)
    profile = seed.seed_profile(server_db, [{'resources:FPGA': '2'}])
    fresh, old = [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]
    now = _server_now(server_db)
    # Rows it makes are stamped by the shared clock, not its own.
    created = _state(server_db, fresh).created_at
    assert abs((created - now).total_seconds()) < 60
    # Another conductor started one bind just now, and one long ago.
    _started(server_db, fresh, now)
    _started(server_db, old, now - datetime.timedelta(seconds=600))
    assert arq_binding.fail_stuck(conf, ctx) == 1
    assert _state(server_db, fresh).state == 'BindStarted'
    assert _state(server_db, old).state == 'BindFailed'


def test_a_conductor_behind_sends_a_due_batch(conf, server_db, ctx,
                                              fake_nova, host_clock_off):
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    host_clock_off(-OFF)
    profile = seed.seed_profile(server_db, [{'resources:FPGA': '1'}])
    arq, = [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]
    _started(server_db, arq, _server_now(server_db))
    with server_db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == arq).values(state='Bound'))
    instance = _state(server_db, arq).instance_uuid
    # Recorded by another conductor, due a second ago by the true time.
    with db_api.writer.using(ctx):
        nova.record(conf, ctx, str(uuidlib.uuid4()),
                    [(instance, arq, 'completed')],
                    _server_now(server_db) - datetime.timedelta(seconds=1))
    nova.resend_due(conf, ctx)
    assert [e['tag'] for e in fake_nova.events] == [arq]


def test_a_conductor_ahead_leaves_another_s_programming_alone(
        conf, server_db, ctx, host_clock_off):
    """Another conductor is programming a card, its mark good for five
    more minutes by the true time: a conductor two hours ahead does not
    take the card out as abandoned."""
    device = seed.seed_device(server_db, handles=1)
    until = (_server_now(server_db) + datetime.timedelta(minutes=5)
             ).replace(microsecond=0)
    with server_db.begin() as c:
        c.execute(sa.update(models.Deployable).where(
            models.Deployable.id == device.deployable_id).values(
            bitstream_id=str(uuidlib.uuid4()), programming_until=until))
    host_clock_off(OFF)
    assert programming.take_out_overdue(conf, ctx) == 0
    with server_db.connect() as c:
        assert c.scalar(sa.select(models.Deployable.programming_until).where(
            models.Deployable.id == device.deployable_id)) == until


def test_a_start_time_is_told_by_the_shared_clock(server_db, ctx,
                                                  host_clock_off):
    """A conductor takes its start time before its database answers (it
    must not wait for it to start): the moment is told by the database
    server's clock once the start-up jobs reach it, not by this host's
    (the recovery compares it with the binds the last run stamped)."""
    host_clock_off(OFF)
    told = clock_db.this_moment()
    started_at = told(ctx)
    assert abs((started_at - _server_now(server_db)).total_seconds()) < 60
