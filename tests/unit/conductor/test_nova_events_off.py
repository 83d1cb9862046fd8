"""Events recorded for Nova while they were on, once they are turned off
(``[nova]send_events = False``, or Nova's credentials removed): the
periodic returned before anything, even the expiry, so the rows stayed
for ever, counted pending by the conductor's collector, whose age kept
the ``CyborgNovaEventsUndelivered`` alert firing.  The periodic now
drops them once a conductor with events on would give up on them
(``[nova]event_max_age`` after they were recorded; with it 0, Nova's
default arq_binding_timeout: another conductor, with events on, may
still deliver younger ones), logged once at WARNING."""

import datetime
import logging

import prometheus_client as prom
import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.conductor import metrics_collector
from cyborg.conductor import nova
from cyborg.conductor import periodics
from cyborg.db import models
from cyborg.db.api import nova_events as event_db
from tests.unit.conductor import test_nova

fake_nova = test_nova.fake_nova
nconf = test_nova.nconf


def _recorded_while_on(conf, ctx, db, batches=3):
    assert nova.enabled(conf)
    for _ in range(batches):
        test_nova._record(conf, ctx, db=db, count=2)
    # Recorded a month ago: long past [nova]event_max_age.
    then = timeutils.utcnow() - datetime.timedelta(days=30)
    with db.begin() as c:
        c.execute(sa.update(models.NovaEvent.__table__).values(
            created_at=then, next_attempt_at=then))
    assert event_db.pending(ctx)[0] == 2 * batches


def _gauges():
    registry = prom.CollectorRegistry()
    registry.register(metrics_collector.ConductorCollector())
    return (registry.get_sample_value(
        'cyborg_conductor_nova_events_pending'), registry.get_sample_value(
        'cyborg_conductor_nova_event_oldest_seconds'))


def _turn_off(conf, how):
    if how == 'send_events':
        conf.set_override('send_events', False, group='nova')
    else:
        conf.clear_override('auth_type', group='nova')
    assert not nova.enabled(conf)


@pytest.mark.parametrize('how', ['send_events', 'credentials'])
def test_events_left_when_turned_off_are_dropped(nconf, db, admin_context,
                                                 fake_nova, caplog, how):
    _recorded_while_on(nconf, admin_context, db)
    assert _gauges()[1] > 29 * 24 * 3600
    _turn_off(nconf, how)
    with caplog.at_level(logging.INFO, logger='cyborg.conductor.nova'):
        nova.resend_due(nconf, admin_context)
        nova.resend_due(nconf, admin_context)   # nothing left: silent
    assert test_nova._pending(db) == []
    assert _gauges() == (0, 0)
    assert fake_nova.event_posts() == []
    records = [r for r in caplog.records if r.name == nova.__name__]
    assert [r.getMessage() for r in records] == [
        'Dropped 6 accelerator-request-bound event(s) recorded for Nova '
        'more than 600 s ago: events are off ([nova]send_events, or no '
        '[nova] credentials), so this conductor would never send them']
    assert [r.levelno for r in records] == [logging.WARNING]


def test_the_periodic_job_drops_them(nconf, db, admin_context, fake_nova):
    _recorded_while_on(nconf, admin_context, db, batches=1)
    _turn_off(nconf, 'send_events')
    [(name, _option, path)] = [job for job in periodics.JOBS
                               if job[0] == 'resend_nova_events']
    periodics.run_job(nconf, name, path)
    assert test_nova._pending(db) == []


def test_events_off_keep_what_nova_still_waits_for(nconf, db,
                                                  admin_context, fake_nova):
    """Another conductor, with events on, may still deliver an event
    recorded less than ``[nova]event_max_age`` ago: kept."""
    test_nova._record(nconf, admin_context, db=db, count=2)
    _turn_off(nconf, 'send_events')
    nova.resend_due(nconf, admin_context)
    assert len(test_nova._pending(db)) == 2
    assert fake_nova.event_posts() == []


def test_events_on_keep_what_is_not_due_yet(nconf, db, admin_context,
                                            fake_nova):
    """Turned on again, the periodic drops nothing it may still send."""
    test_nova._record(nconf, admin_context, db=db, count=2,
                      due_at=timeutils.utcnow() + datetime.timedelta(
                          minutes=5))
    nova.resend_due(nconf, admin_context)
    assert len(test_nova._pending(db)) == 2
    assert fake_nova.event_posts() == []


def test_they_are_dropped_a_batch_per_transaction(nconf, db, admin_context,
                                                  fake_nova, monkeypatch):
    """Many left (a long outage of Nova before events were turned off):
    every one goes, a short transaction per batch."""
    monkeypatch.setattr(nova, 'EXPIRE_BATCH', 4)
    transactions = []
    expire = event_db.expire

    def counted(context, created_before, limit=None):
        transactions.append(limit)
        return expire(context, created_before, limit)

    monkeypatch.setattr(event_db, 'expire', counted)
    _recorded_while_on(nconf, admin_context, db, batches=5)   # 10 events
    _turn_off(nconf, 'send_events')
    assert nova.drop_unsendable(nconf, admin_context) == 10
    assert test_nova._pending(db) == []
    assert transactions == [4, 4, 4]


def _recorded_ago(conf, ctx, db, seconds):
    test_nova._record(conf, ctx, db=db, count=1)
    now = timeutils.utcnow()
    then = now - datetime.timedelta(seconds=seconds)
    events = models.NovaEvent.__table__
    with db.begin() as c:
        # The one just recorded.
        c.execute(sa.update(events).where(
            events.c.created_at > now - datetime.timedelta(seconds=60))
            .values(created_at=then, next_attempt_at=then))


@pytest.mark.parametrize('max_age, kept_at, dropped_at', [
    # An operator who raised Nova's arq_binding_timeout (to 1800 s, say)
    # raised this too: an event of 1000 s ago may still be delivered by a
    # conductor with events on; the fixed 300 s dropped it.
    (3600, 1000, 3700),
    # The default (600): what a conductor with events on gives up on.
    (600, 500, 700),
    # 0, never given up: Nova's default wait.
    (0, 200, 400)])
def test_they_are_dropped_when_a_sender_would_give_up(
        nconf, db, admin_context, fake_nova, max_age, kept_at, dropped_at):
    nconf.set_override('event_max_age', max_age, group='nova')
    _recorded_ago(nconf, admin_context, db, kept_at)
    _recorded_ago(nconf, admin_context, db, dropped_at)
    _turn_off(nconf, 'send_events')
    assert nova.drop_unsendable(nconf, admin_context) == 1
    assert len(test_nova._pending(db)) == 1
