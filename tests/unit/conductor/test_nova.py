"""Event delivery to a recording Nova endpoint: retries, 207s, a Nova that
is down, the periodic re-send."""

import datetime
import uuid as uuidlib

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.conductor import nova
from cyborg.db import api as db_api
from cyborg.db import models
from tests.fixtures import recording_http


fake_nova = recording_http.fake_nova


@pytest.fixture
def nconf(conf, db, fake_nova):
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    conf.set_override('nova_event_retry_interval', 1, group='conductor')
    return conf


def _record(conf, ctx, count=2, due_at=None):
    batch = str(uuidlib.uuid4())
    events = [(str(uuidlib.uuid4()), str(uuidlib.uuid4()), 'completed')
              for _ in range(count)]
    with db_api.writer.using(ctx):
        nova.record(conf, ctx, batch, events,
                    due_at or timeutils.utcnow() + datetime.timedelta(
                        minutes=5))
    return batch, events


def _pending(db):
    with db.connect() as c:
        return c.execute(sa.select(models.NovaEvent.__table__)).all()


def test_batch_goes_in_one_request_and_is_forgotten(nconf, db,
                                                    admin_context,
                                                    fake_nova):
    batch, events = _record(nconf, admin_context, count=3)
    assert nova.deliver_batch(nconf, admin_context, batch)
    posts = fake_nova.event_posts()
    assert len(posts) == 1
    assert posts[0].json() == nova.payload(events)
    assert posts[0].headers['OpenStack-API-Version'] == 'compute 2.82'
    assert _pending(db) == []


def test_5xx_is_retried_with_backoff(nconf, db, admin_context, fake_nova):
    fake_nova.statuses = [500, 503]
    batch, _ = _record(nconf, admin_context)
    assert nova.deliver_batch(nconf, admin_context, batch)
    assert len(fake_nova.event_posts()) == 3
    assert len(fake_nova.events) == 2
    assert _pending(db) == []


def test_207_with_every_instance_gone_is_delivered(nconf, db, admin_context,
                                                   fake_nova):
    fake_nova.statuses = [207]
    batch, _ = _record(nconf, admin_context)
    assert nova.deliver_batch(nconf, admin_context, batch)
    assert len(fake_nova.event_posts()) == 1
    assert _pending(db) == []


def test_nova_down_keeps_events_until_the_periodic_delivers(
        nconf, db, admin_context, fake_nova):
    fake_nova.statuses = [502, 502, 502]
    batch, events = _record(nconf, admin_context)
    assert not nova.deliver_batch(nconf, admin_context, batch)
    rows = _pending(db)
    assert len(rows) == 2
    assert {r.attempts for r in rows} == {1}
    assert all(r.next_attempt_at > timeutils.utcnow() for r in rows)
    nova.resend_due(nconf, admin_context)  # not due yet
    assert len(fake_nova.event_posts()) == 3
    with db.begin() as c:
        c.execute(sa.update(models.NovaEvent).values(
            next_attempt_at=timeutils.utcnow()))
    nova.resend_due(nconf, admin_context)
    assert sorted(e['tag'] for e in fake_nova.events) == sorted(
        e[1] for e in events)
    assert _pending(db) == []


def test_unreachable_nova_keeps_events(conf, db, admin_context):
    with recording_http.FakeNova() as gone:
        url = gone.url
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', url, group='nova')
    batch, _ = _record(conf, admin_context, count=1)
    assert not nova.deliver_batch(conf, admin_context, batch)
    assert len(_pending(db)) == 1


def test_recorded_events_become_due_for_the_periodic(nconf, db,
                                                     admin_context,
                                                     fake_nova):
    """A conductor killed between commit and POST: the periodic sends."""
    _record(nconf, admin_context,
            due_at=timeutils.utcnow() - datetime.timedelta(seconds=1))
    nova.resend_due(nconf, admin_context)
    assert len(fake_nova.event_posts()) == 1
    assert len(fake_nova.events) == 2
    assert _pending(db) == []


def test_nothing_recorded_or_sent_without_nova(conf, db, admin_context):
    assert not nova.enabled(conf)
    batch, _ = _record(conf, admin_context)
    assert _pending(db) == []
    assert nova.deliver_batch(conf, admin_context, batch)
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('send_events', False, group='nova')
    assert not nova.enabled(conf)
