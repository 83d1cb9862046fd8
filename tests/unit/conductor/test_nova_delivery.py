"""How events reach a recording Nova beyond one batch's POST: on sender
threads of their own (a slow Nova holds no bind worker), batches merged
into POSTs of up to MAX_EVENTS_PER_POST events (after binds and in the
periodic's backlog), Nova's answers read (a redirect followed, a 207 event
by event, anything but Nova's acceptance kept, a merged POST Nova refuses
sent again batch by batch), and events given up on once older than
[nova]event_max_age."""

import datetime
import logging
import time
import uuid as uuidlib

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import context as cyborg_context
from cyborg.common import metrics
from cyborg.conductor import arq_binding
from cyborg.conductor import nova
from cyborg.db import api as db_api
from cyborg.db import models
from tests.fixtures import arqs as seed
from tests.fixtures import recording_http
from tests.unit.conductor import test_arq_vgpu as vgpu
from tests.unit.conductor import test_nova

fake_nova = recording_http.fake_nova
nconf = test_nova.nconf
_arq, _record, _pending = test_nova._arq, test_nova._record, \
    test_nova._pending
# For the vGPU bind (a bind worker's work: its mdev made by the agent).
placement_url, tree, vconf, agent = (vgpu.placement_url, vgpu.tree,
                                     vgpu.vconf, vgpu.agent)


def _ours(record):
    """A record of cyborg's (not one another test's leftovers log in this
    process meanwhile: a broker connection retrying, a pool's debug)."""
    return record.name.startswith('cyborg.')


def _expired():
    return metrics.REGISTRY.get_sample_value(
        'cyborg_conductor_nova_events_expired_total') or 0


def _refused():
    return metrics.REGISTRY.get_sample_value(
        'cyborg_conductor_nova_events_refused_total') or 0


def _age(db, seconds, batch=None):
    """Make events (a batch's, or all) recorded ``seconds`` ago and due."""
    e = models.NovaEvent.__table__
    then = timeutils.utcnow() - datetime.timedelta(seconds=seconds)
    with db.begin() as c:
        c.execute(sa.update(e).where(
            sa.true() if batch is None else e.c.batch_id == batch).values(
            created_at=then, next_attempt_at=then))


# -- sender threads -----------------------------------------------------------

def test_a_slow_nova_holds_no_bind_worker(vconf, db, agent, tree,
                                          fake_nova):
    """Nova answers each POST in 3 s (within [nova]timeout: not away).
    Quick binds' events and a vGPU bind's mdev used to share the
    [conductor]workers pool: the vGPU bind waited behind the POSTs."""
    vconf.set_override('auth_type', 'none', group='nova')
    vconf.set_override('endpoint_override', fake_nova.url, group='nova')
    vconf.set_override('workers', 2, group='conductor')
    arq_binding._EXECUTOR = None
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    pci = seed.seed_device(db, hostname='pci-host', handles=4)
    pci_profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    gpu = seed.seed_device(db, hostname=vgpu.HOST, handles=1,
                           attach_type='MDEV', asked_type=vgpu.VGPU_TYPE)
    gpu_profile = seed.seed_profile(db, [{'resources:VGPU': '1'}])
    vgpu_arq = arq_binding.create(ctx, gpu_profile, 'p1')[0]['uuid']
    quick = [arq_binding.create(ctx, pci_profile, 'p1')[0]['uuid']
             for _ in range(4)]
    fake_nova.delay = 3
    binds = []
    try:
        for arq in quick:
            binds.append(arq_binding.start_bind(vconf, ctx, {arq: {
                'hostname': 'pci-host', 'device_rp_uuid': pci.rp_uuid,
                'instance_uuid': str(uuidlib.uuid4())}}))
        started = time.monotonic()
        binds.append(arq_binding.start_bind(vconf, ctx, {vgpu_arq: {
            'hostname': vgpu.HOST, 'device_rp_uuid': gpu.rp_uuid,
            'instance_uuid': str(uuidlib.uuid4())}}))
        while seed.arq_rows(db)[vgpu_arq].state != 'Bound':
            assert time.monotonic() - started < 30
            time.sleep(0.02)
        bound_after = time.monotonic() - started
    finally:
        fake_nova.release()
    assert bound_after < 2, f'the vGPU bind waited {bound_after:.1f} s'
    # Each bind's future is done once its events are delivered too.
    assert all(bind.result(30) for bind in binds)
    assert sorted(e['tag'] for e in fake_nova.events) == sorted(
        quick + [vgpu_arq])
    assert _pending(db) == []


def test_batches_waiting_for_a_slow_nova_go_together(nconf, db,
                                                     admin_context,
                                                     fake_nova):
    """Every sender thread waits on a slow Nova; the batches that pile up
    meanwhile go together once it answers, not in a POST each."""
    nconf.set_override('timeout', 10, group='nova')
    fake_nova.delay = 30
    recorded = [_record(nconf, admin_context, db=db, count=2)
                for _ in range(10)]
    deliveries = []
    try:
        for n, (batch, events) in enumerate(recorded[:nova.SENDERS]):
            deliveries.append(nova.deliver_later(nconf, admin_context,
                                                 batch))
            fake_nova.wait_for(lambda _requests, n=n: len(
                fake_nova.event_posts()) > n)
        # Read back, or sent as recorded.
        deliveries += [nova.deliver_later(nconf, admin_context, batch)
                       for batch, _events in recorded[nova.SENDERS:6]]
        deliveries += [nova.deliver_later(nconf, admin_context, batch,
                                          events)
                       for batch, events in recorded[6:]]
    finally:
        fake_nova.release()
    assert all(delivery.result(30) for delivery in deliveries)
    assert nova.drain(10)
    posts = fake_nova.event_posts()
    # The waiting batches, in one POST per sender thread at most.
    assert len(posts) <= 2 * nova.SENDERS < len(recorded)
    assert sorted(e['tag'] for e in fake_nova.events) == sorted(
        event[1] for _batch, events in recorded for event in events)
    assert _pending(db) == []


def test_batches_beyond_the_queue_are_left_to_the_periodic(
        nconf, db, admin_context, fake_nova, monkeypatch):
    monkeypatch.setattr(nova, 'QUEUE_LIMIT', 1)
    nconf.set_override('timeout', 10, group='nova')
    fake_nova.delay = 30
    recorded = [_record(nconf, admin_context, db=db, count=1)
                for _ in range(nova.SENDERS + 3)]
    deliveries = []
    try:
        for n, (batch, _events) in enumerate(recorded[:nova.SENDERS]):
            deliveries.append(nova.deliver_later(nconf, admin_context,
                                                 batch))
            fake_nova.wait_for(lambda _requests, n=n: len(
                fake_nova.event_posts()) > n)
        waiting = nova.deliver_later(nconf, admin_context,
                                     recorded[nova.SENDERS][0])
        refused = [nova.deliver_later(nconf, admin_context, batch)
                   for batch, _events in recorded[nova.SENDERS + 1:]]
        # Refused at once, due at the periodic's next pass.
        assert [future.result(0) for future in refused] == [False, False]
    finally:
        fake_nova.release()
    assert all(f.result(30) for f in deliveries + [waiting])
    assert {r.batch_id for r in _pending(db)} == {
        batch for batch, _events in recorded[nova.SENDERS + 1:]}
    _age(db, 1)
    nova.resend_due(nconf, admin_context)
    assert _pending(db) == []


# -- Nova's answers -----------------------------------------------------------

@pytest.mark.parametrize('status', [301, 302, 307, 308])
def test_a_redirect_is_followed(nconf, db, admin_context, fake_nova,
                                status):
    """An endpoint that redirects (http to https at a load balancer, a
    path rewritten): the keep-alive path took the 3xx for Nova's word and
    the events were dropped; keystoneauth follows it."""
    with recording_http.FakeNova() as moved:
        # Every POST there is redirected: the keep-alive one and
        # keystoneauth's.
        fake_nova.statuses = [(status, {
            'Location': moved.url + '/os-server-external-events'}, b'')] * 2
        batch, events = _record(nconf, admin_context, db=db, count=2)
        assert nova.deliver_batch(nconf, admin_context, batch)
        assert fake_nova.events == []
        assert moved.events == nova.payload(events)['events']
    assert _pending(db) == []


@pytest.mark.parametrize('answer', [
    (302, {}, b''),                     # a redirect to nowhere
    (400, {}, {'badRequest': {'message': 'Invalid input'}}),
    (409, {}, {'conflict': {'message': 'busy'}}),
])
def test_any_answer_but_nova_s_acceptance_keeps_the_events(
        nconf, db, admin_context, fake_nova, answer):
    fake_nova.statuses = [answer] * 3
    batch, _events = _record(nconf, admin_context, db=db, count=2)
    errors = metrics.REGISTRY.get_sample_value(
        'cyborg_conductor_nova_errors_total')
    assert not nova.deliver_batch(nconf, admin_context, batch)
    assert fake_nova.events == []
    rows = _pending(db)
    assert len(rows) == 2 and {r.attempts for r in rows} == {1}
    assert metrics.REGISTRY.get_sample_value(
        'cyborg_conductor_nova_errors_total') > errors


def _errors():
    return metrics.REGISTRY.get_sample_value(
        'cyborg_conductor_nova_errors_total') or 0


@pytest.mark.parametrize('answer', [
    (201, {}, b''),
    (202, {}, b''),
    (202, {}, {'events': []}),
    (204, {}, b''),
])
@pytest.mark.parametrize('recorded', [True, False])
def test_any_2xx_answer_delivers_the_events(nconf, db, admin_context,
                                            fake_nova, caplog, answer,
                                            recorded):
    """A whole answer in 2xx but 200 and 207 (202 would suit Nova's
    asynchronous dispatch, a proxy may say 204) was taken for Nova
    away: the events were kept, re-sent until they expired, and every
    delivery right after a bind left to the periodic meanwhile.  Like a
    200, it delivers them, and is no Nova error."""
    batch, events = _record(nconf, admin_context, db=db, count=2)
    fake_nova.statuses = [answer]
    errors = _errors()
    with caplog.at_level(logging.INFO, logger='cyborg.conductor.nova'):
        if recorded:
            assert nova.deliver_recorded(nconf, admin_context, batch,
                                         events)
        else:
            assert nova.deliver_batch(nconf, admin_context, batch)
    assert len(fake_nova.event_posts()) == 1
    assert _pending(db) == []
    assert not nova.away(nconf)
    assert _errors() == errors
    assert [r.getMessage() for r in caplog.records
            if r.levelno >= logging.INFO and _ours(r)] == []


def test_a_207_for_a_deleted_instance_is_no_refusal(nconf, db,
                                                    admin_context,
                                                    fake_nova, caplog):
    """Nova's 207 says 404 for an event whose instance was deleted during
    its build (the usual case), 422 for one not on a host: nobody waits
    for either, and neither is a refusal worth a WARNING.  Nova rewrites
    their status to "failed" (and a 200's to "completed"): matched by
    status, they were found in no answer and taken for codes unknown."""
    batch, events = _record(nconf, admin_context, db=db, count=3)
    sent = nova.payload(events)['events']
    fake_nova.statuses = [(207, {}, {'events': [
        dict(sent[0], code=200), dict(sent[1], code=404, status='failed'),
        dict(sent[2], code=422, status='failed')]})]
    with caplog.at_level(logging.WARNING, logger='cyborg.conductor.nova'):
        assert nova.deliver_batch(nconf, admin_context, batch)
    assert [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and _ours(r)] == []
    assert _pending(db) == []


def _answer_207(codes):
    """Nova's 207 answering each event {(instance, arq, status): code}:
    its status rewritten as Nova does ("completed" for a 200, else
    "failed"), a code of ``_LEFT_OUT`` left out."""
    answers = []
    for event in nova.payload(list(codes))['events']:
        code = codes[event['server_uuid'], event['tag'], event['status']]
        event['status'] = ('completed' if isinstance(code, int)
                           and 200 <= code < 300 else 'failed')
        if code is not _LEFT_OUT:
            event['code'] = code
        answers.append(event)
    return 207, {}, {'events': answers}


_LEFT_OUT = object()


@pytest.mark.parametrize('codes', [
    (500, 503), (500, None), (_LEFT_OUT, 302)],
    ids=['5xx', '5xx-and-none', 'unread'])
def test_a_207_keeping_every_event_is_a_nova_error(nconf, db,
                                                   admin_context,
                                                   fake_nova, codes):
    """A 207 that keeps every event for another try (none taken, none
    refused for good) delivered nothing, as a failed request: it counts
    in cyborg_conductor_nova_errors_total, which missed it."""
    batch, events = _record(nconf, admin_context, db=db, count=2)
    fake_nova.statuses = [_answer_207(dict(zip(events, codes)))]
    errors = _errors()
    assert not nova.deliver_batch(nconf, admin_context, batch)
    assert _errors() == errors + 1
    assert len(_pending(db)) == 2


@pytest.mark.parametrize('codes', [(200, 500), (400, 500), (404, 500),
                                   (400, 409)])
def test_a_207_that_answers_for_some_event_is_no_nova_error(
        nconf, db, admin_context, fake_nova, codes):
    """One event taken, or refused for good: Nova answered the
    request."""
    batch, events = _record(nconf, admin_context, db=db, count=2)
    fake_nova.statuses = [_answer_207(dict(zip(events, codes)))]
    errors = _errors()
    nova.deliver_batch(nconf, admin_context, batch)
    assert _errors() == errors


@pytest.mark.parametrize('recorded', [True, False])
def test_a_207_is_read_event_by_event(nconf, db, admin_context, fake_nova,
                                      caplog, recorded):
    """A 207 with a 500 and a 400 among its codes counted every event as
    delivered, logged only: the 500's event was lost (Nova may take it
    on a retry).  Now its row alone is kept; the 400's event, Nova's
    refusal of it, is dropped with an ERROR naming it."""
    batch, events = _record(nconf, admin_context, db=db, count=4)
    accepted, failing, refused, gone = events
    fake_nova.statuses = [_answer_207({accepted: 200, failing: 500,
                                       refused: 400, gone: 404})]
    counted = _refused()
    with caplog.at_level(logging.WARNING, logger='cyborg.conductor.nova'):
        if recorded:      # sent as recorded: its rows found by batch
            assert not nova.deliver_recorded(nconf, admin_context, batch,
                                             events)
        else:
            assert not nova.deliver_batch(nconf, admin_context, batch)
    rows = _pending(db)
    assert [(r.arq_uuid, r.attempts) for r in rows] == [(failing[1], 1)]
    assert rows[0].next_attempt_at > timeutils.utcnow()
    errors = [r.getMessage() for r in caplog.records
              if r.levelno >= logging.ERROR and _ours(r)]
    assert len(errors) == 1 and refused[1] in errors[0]
    assert 'dropped' in errors[0] and failing[1] not in errors[0]
    assert _refused() == counted + 1
    assert not nova.away(nconf)
    # The periodic re-sends that event alone.
    _age(db, 1)
    nova.resend_due(nconf, admin_context)
    assert fake_nova.event_posts()[-1].json() == nova.payload([failing])
    assert _pending(db) == []


def test_a_207_in_a_merged_post_keeps_only_the_failed_event(
        nconf, db, admin_context, fake_nova):
    """Two batches in one periodic POST: the batch whose events Nova
    answered 200 and 422 for is done, the other keeps its 5xx event."""
    first, (ok, failing) = _record(nconf, admin_context, db=db, count=2)
    second, (refused, gone) = _record(nconf, admin_context, db=db, count=2)
    _age(db, 1)
    fake_nova.statuses = [_answer_207({ok: 200, failing: 503,
                                       refused: 409, gone: 422})]
    counted = _refused()
    nova.resend_due(nconf, admin_context)
    assert len(fake_nova.event_posts()) == 1
    assert [(r.batch_id, r.arq_uuid, r.attempts)
            for r in _pending(db)] == [(first, failing[1], 1)]
    assert _refused() == counted + 1


@pytest.mark.parametrize('code', [
    pytest.param(_LEFT_OUT, id='left_out'), None, '200', 200.0, True,
    100, 302, 600])
@pytest.mark.parametrize('recorded', [True, False])
def test_a_207_code_that_says_nothing_keeps_the_event(
        nconf, db, admin_context, fake_nova, caplog, code, recorded):
    """An event of a 207 without a code, or with one that is no integer
    or no final answer (a 1xx or 3xx), was taken as accepted, logged at
    WARNING: nothing said Nova had it, and its build failed if it had
    not.  It is kept and tried again, like a 5xx's."""
    batch, events = _record(nconf, admin_context, db=db, count=2)
    accepted, unsure = events
    fake_nova.statuses = [_answer_207({accepted: 200, unsure: code})]
    counted = _refused()
    with caplog.at_level(logging.WARNING, logger='cyborg.conductor.nova'):
        if recorded:
            assert not nova.deliver_recorded(nconf, admin_context, batch,
                                             events)
        else:
            assert not nova.deliver_batch(nconf, admin_context, batch)
    assert [(r.arq_uuid, r.attempts) for r in _pending(db)] == [
        (unsure[1], 1)]
    [warning] = [r.getMessage() for r in caplog.records
                 if r.levelno >= logging.WARNING and _ours(r)]
    assert unsure[1] in warning and 'kept' in warning
    assert accepted[1] not in warning
    assert _refused() == counted and not nova.away(nconf)
    # Tried again, it goes.
    _age(db, 1)
    nova.resend_due(nconf, admin_context)
    assert fake_nova.event_posts()[-1].json() == nova.payload([unsure])
    assert _pending(db) == []


def test_a_207_event_missing_from_an_unreadable_body_is_kept(
        nconf, db, admin_context, fake_nova):
    """A 207 whose body lists no event (not JSON) said nothing of any:
    every event was taken as accepted."""
    batch, _events = _record(nconf, admin_context, db=db, count=2)
    fake_nova.statuses = [(207, {}, b'<html>Multi-Status</html>')]
    assert not nova.deliver_batch(nconf, admin_context, batch)
    assert {r.attempts for r in _pending(db)} == {1}
    assert len(_pending(db)) == 2


@pytest.mark.parametrize('code', [201, 202, 204])
def test_any_2xx_code_of_a_207_is_acceptance(nconf, db, admin_context,
                                             fake_nova, caplog, code):
    """Another 2xx than 200 for an event (Nova notes 202 would suit its
    asynchronous dispatch) is Nova taking it, not an unexpected code
    worth a WARNING."""
    batch, (event,) = _record(nconf, admin_context, db=db, count=1)
    fake_nova.statuses = [_answer_207({event: code})]
    with caplog.at_level(logging.WARNING, logger='cyborg.conductor.nova'):
        assert nova.deliver_batch(nconf, admin_context, batch)
    assert [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and _ours(r)] == []
    assert _pending(db) == []


def test_a_207_s_answers_go_to_their_events_in_order(nconf, fake_nova):
    """One request may hold an ARQ's "completed" and, after an unbind
    and a failed bind for the same instance, its "failed": Nova answers
    both with the same instance and tag, their status rewritten; each
    answer goes to the event sent in its place."""
    instance, arq = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    events = [(instance, arq, 'completed'), (instance, arq, 'failed')]
    sent = nova.payload(events)['events']
    fake_nova.statuses = [(207, {}, {'events': [
        dict(sent[0], code=200), dict(sent[1], code=500,
                                      status='completed')]})]
    assert nova.send(nconf, events).kept == {events[1]}


# -- a request Nova refuses ---------------------------------------------------

def _refusing(fake_nova, events):
    """Make ``fake_nova`` refuse with a 400 (a body it rejects) every
    POST holding one of ``events``; others are answered as usual."""
    tags = {event[1] for event in events}
    answer = fake_nova.respond

    def respond(request):
        if request.method == 'POST' and tags & {
                e['tag'] for e in (request.json() or {}).get('events', [])}:
            fake_nova._hold()
            return 400, {}, {'badRequest': {
                'code': 400, 'message': 'Invalid input for field/attribute '
                                        'events.'}}
        return answer(request)

    fake_nova.respond = respond


def _tags(post):
    return {event['tag'] for event in post.json()['events']}


def test_a_batch_nova_refuses_keeps_back_no_other_after_binds(
        nconf, db, admin_context, fake_nova, monkeypatch):
    """Batches waiting for a slow Nova go in one POST: Nova refused it
    (400) for one batch's events, and every batch merged into it waited
    for the periodic, refused again and again until [nova]event_max_age,
    their builds failing.  Each is sent alone now: only that one is
    kept."""
    # One sender thread of this test's own: the batches queued behind
    # its first POST go together in its second.
    monkeypatch.setattr(nova, 'SENDERS', 1)
    monkeypatch.setattr(nova, '_SENDER', nova._Sender())
    nconf.set_override('timeout', 10, group='nova')
    head, _ = _record(nconf, admin_context, db=db, count=1)
    bad, bad_events = _record(nconf, admin_context, db=db, count=1)
    good = [_record(nconf, admin_context, db=db, count=2)
            for _ in range(2)]
    _refusing(fake_nova, bad_events)
    fake_nova.delay = 30
    try:
        first = nova.deliver_later(nconf, admin_context, head)
        fake_nova.wait_for(lambda _r: len(fake_nova.event_posts()) == 1)
        refused = nova.deliver_later(nconf, admin_context, bad, bad_events)
        # Read back, or sent as recorded.
        healthy = [nova.deliver_later(nconf, admin_context, good[0][0]),
                   nova.deliver_later(nconf, admin_context, *good[1])]
    finally:
        fake_nova.release()
    assert first.result(30) and all(f.result(30) for f in healthy)
    assert refused.result(30) is False
    assert nova.drain(10)
    posts = [_tags(post) for post in fake_nova.event_posts()]
    merged = {bad_events[0][1]} | {e[1] for _b, es in good for e in es}
    # The merged POST, then each of its batches alone, once.
    assert posts[1] == merged
    assert sorted(map(sorted, posts[2:])) == sorted(
        [[bad_events[0][1]]] + [sorted(e[1] for e in es)
                                for _b, es in good])
    rows = _pending(db)
    assert {(r.batch_id, r.attempts) for r in rows} == {(bad, 1)}
    # A refusal of some events is not Nova away.
    assert not nova.away(nconf)


def test_a_periodic_pass_goes_on_past_a_batch_nova_refuses(
        nconf, db, admin_context, fake_nova, monkeypatch):
    """A pass stopped at a POST Nova refused (400 for one batch in it):
    the batches merged with that one and every batch due after it waited,
    pass after pass, until [nova]event_max_age."""
    monkeypatch.setattr(nova, 'MAX_EVENTS_PER_POST', 2)
    recorded = [_record(nconf, admin_context, db=db, count=1)
                for _ in range(6)]
    bad, bad_events = recorded[2]
    _refusing(fake_nova, bad_events)
    _age(db, 2)
    _age(db, 1, bad)        # the newest: in the pass's first POST
    counted = _refused()
    nova.resend_due(nconf, admin_context)
    rows = _pending(db)
    assert [(r.batch_id, r.attempts) for r in rows] == [(bad, 1)]
    assert rows[0].next_attempt_at > timeutils.utcnow()
    # Three POSTs of two batches, and the refused one's two alone.
    assert sorted(len(_tags(p)) for p in fake_nova.event_posts()) == [
        1, 1, 2, 2, 2]
    assert sorted(e['tag'] for e in fake_nova.events) == sorted(
        events[0][1] for batch, events in recorded if batch != bad)
    assert not nova.away(nconf)
    # Kept, not dropped: not counted as refused.
    assert _refused() == counted


def test_a_pass_sends_batch_by_batch_within_its_posts(
        nconf, db, admin_context, fake_nova, monkeypatch):
    """An endpoint refusing every POST (a proxy's 404): a pass sends the
    batches of its refused POST alone up to ``PASS_POSTS`` POSTs in all;
    those it did not send are due again, no attempt counted."""
    monkeypatch.setattr(nova, 'PASS_POSTS', 3)
    recorded = [_record(nconf, admin_context, db=db, count=1)
                for _ in range(5)]
    _refusing(fake_nova, [e for _b, events in recorded for e in events])
    _age(db, 1)
    nova.resend_due(nconf, admin_context)
    assert [len(_tags(p)) for p in fake_nova.event_posts()] == [5, 1, 1]
    attempts = {r.batch_id: r.attempts for r in _pending(db)}
    assert sorted(attempts.values()) == [0, 0, 0, 1, 1]


def test_refused_credentials_are_not_sent_batch_by_batch(
        nconf, db, admin_context, fake_nova):
    """A 403 concerns every request: Nova is taken for away, the batches
    of the POST are not sent again one by one."""
    for _ in range(3):
        _record(nconf, admin_context, db=db, count=1)
    _age(db, 1)
    fake_nova.statuses = [403] * 5
    nova.resend_due(nconf, admin_context)
    assert len(fake_nova.event_posts()) == 1
    assert {r.attempts for r in _pending(db)} == {1}
    assert nova.away(nconf)


# -- giving up ----------------------------------------------------------------

def test_events_nova_never_accepts_are_given_up_on(nconf, db, admin_context,
                                                   fake_nova, caplog):
    """Nova refusing for good (here 403: the service user lost its role):
    the events were re-sent every retry interval for ever, long after
    Nova stopped waiting for them."""
    fake_nova.statuses = [403] * 10
    old, old_events = _record(nconf, admin_context, db=db, count=2)
    young, _ = _record(nconf, admin_context, db=db, count=1)
    _age(db, 601, old)
    _age(db, 300, young)
    expired = _expired()
    with caplog.at_level(logging.ERROR, logger='cyborg.conductor.nova'):
        nova.resend_due(nconf, admin_context)
    # Only the young batch was tried (and kept).
    assert [e['tag'] for p in fake_nova.event_posts()
            for e in p.json()['events']] == [
        r.arq_uuid for r in _pending(db)]
    assert {r.batch_id for r in _pending(db)} == {young}
    assert _expired() == expired + 2
    assert 'Gave up on 2 accelerator-request-bound event(s)' in caplog.text
    assert old_events[0][0] in caplog.text

    # 0: never given up on.
    nconf.set_override('event_max_age', 0, group='nova')
    _age(db, 86400)
    nova._AWAY.clear()
    nova.resend_due(nconf, admin_context)
    assert {r.batch_id for r in _pending(db)} == {young}
    assert _expired() == expired + 2


# -- a backlog ----------------------------------------------------------------

def test_a_backlog_goes_in_one_pass_newest_first(nconf, db, admin_context,
                                                 fake_nova):
    """Nova was away during a boot storm: 260 batches are due.  A pass
    sent 50 batches, one POST each, in the order of their uuids, the
    rest waiting for the next passes a retry interval apart."""
    count = 260
    recorded = []
    for n in range(count):
        instance = str(uuidlib.uuid4())
        arq = _arq(db, instance, 'Bound')
        batch = str(uuidlib.UUID(int=(count - n) << 64))  # newest sorts 1st
        with db_api.writer.using(admin_context):
            nova.record(nconf, admin_context, batch,
                        [(instance, arq, 'completed')], timeutils.utcnow())
        recorded.append(arq)
    e = models.NovaEvent.__table__
    with db.begin() as c:    # recorded a second apart, oldest first
        for n, arq in enumerate(recorded):
            c.execute(sa.update(e).where(e.c.arq_uuid == arq).values(
                created_at=timeutils.utcnow() - datetime.timedelta(
                    seconds=count - n)))
    nova.resend_due(nconf, admin_context)
    assert _pending(db) == []
    posts = [[event['tag'] for event in post.json()['events']]
             for post in fake_nova.event_posts()]
    assert [len(p) for p in posts] == [nova.MAX_EVENTS_PER_POST,
                                       count - nova.MAX_EVENTS_PER_POST]
    assert set(posts[0]) == set(recorded[-nova.MAX_EVENTS_PER_POST:])
