"""A Nova that is away is found out once, not by every delivery: after a
delivery's tries all failed, deliveries right after binds leave their
batches to the periodic unsent (a bind worker is not held for three
tries of ``[nova]timeout`` each time), a periodic pass stops at its first
failure (a 5xx, no answer, refused credentials: not a 4xx refusing one
batch, see test_nova_delivery.py), and the first delivery that goes
through ends it."""

import datetime
import time

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.conductor import nova
from cyborg.db import models
from tests.fixtures import recording_http
from tests.unit.conductor import test_nova

fake_nova = recording_http.fake_nova
nconf = test_nova.nconf
_record, _pending = test_nova._record, test_nova._pending


def _all_due(db):
    with db.begin() as c:
        c.execute(sa.update(models.NovaEvent).values(
            next_attempt_at=timeutils.utcnow() - datetime.timedelta(
                seconds=1)))


def test_deliveries_wait_for_the_periodic_while_nova_is_away(
        nconf, db, admin_context, fake_nova):
    nconf.set_override('timeout', 0.3, group='nova')
    fake_nova.statuses = [502, 502, 502]
    first, _ = _record(nconf, admin_context, db=db, count=1)
    assert not nova.deliver_batch(nconf, admin_context, first)
    assert nova.away(nconf)
    posts = len(fake_nova.event_posts())
    assert posts == 3

    # A bind ending now: its events are left to the periodic at once.
    fake_nova.delay = 60
    second, events = _record(nconf, admin_context, db=db, count=1)
    started = time.monotonic()
    try:
        assert not nova.deliver_recorded(nconf, admin_context, second,
                                         events)
        assert not nova.deliver_batch(nconf, admin_context, second)
    finally:
        fake_nova.release()
    fake_nova.delay = 0
    assert time.monotonic() - started < 0.3
    assert len(fake_nova.event_posts()) == posts
    assert len(_pending(db)) == 2

    # The periodic tries: Nova is back, both batches go, and deliveries
    # right after binds go at once again.
    _all_due(db)
    nova.resend_due(nconf, admin_context)
    assert _pending(db) == []
    assert len(fake_nova.events) == 2
    assert not nova.away(nconf)
    third, events = _record(nconf, admin_context, db=db, count=1)
    assert nova.deliver_recorded(nconf, admin_context, third, events)
    assert len(fake_nova.events) == 3


def test_a_periodic_pass_stops_at_its_first_failure(nconf, db,
                                                    admin_context,
                                                    fake_nova, monkeypatch):
    # One batch to a POST (a pass puts due batches together up to it).
    monkeypatch.setattr(nova, 'MAX_EVENTS_PER_POST', 1)
    batches = [_record(nconf, admin_context, db=db, count=1)[0]
               for _ in range(3)]
    _all_due(db)
    fake_nova.statuses = [502, 502, 502]
    nova.resend_due(nconf, admin_context)
    # One batch's three tries; the other two are still due, untouched.
    assert len(fake_nova.event_posts()) == 3
    now = timeutils.utcnow()
    rows = _pending(db)
    due = {r.batch_id for r in rows if r.next_attempt_at <= now}
    assert len(due) == 2 and due < set(batches)
    # The next pass: Nova answers, every batch goes.
    _all_due(db)
    nova.resend_due(nconf, admin_context)
    assert _pending(db) == []
    assert len(fake_nova.events) == 3
