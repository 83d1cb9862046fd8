"""Telling Nova how binds ended: ``accelerator-request-bound`` events.

Delivery is at least once (doc/source/contract.rst, "Every bind outcome
reaches Nova"): the bind state machine records an event row in the SAME
transaction as the ARQ's final state (``record``), then hands the batch
over for delivery (``deliver_later``): one
``POST /os-server-external-events`` (compute microversion 2.82) per PATCH,
retried with backoff on 5xx and connection errors.  Deliveries run on
``SENDERS`` threads of their own, never on the bind workers, which a slow
Nova would otherwise hold up (binds that make mdevs or program cards
waiting behind POSTs); batches waiting for them go together, up to
``MAX_EVENTS_PER_POST`` events in one POST.  A PATCH whose binds all ended
in the transaction that started them sends what that transaction recorded
without reading it back.  Rows are deleted once Nova has answered for
them for good; rows left behind (Nova down or refusing, conductor killed
between commit and POST) are re-sent by the periodic ``resend_due``, and
at once by their conductor (``owner``) when it starts again
(``resend_owned``).  A periodic pass sends the due batches most recently
recorded first, several in one POST, until none is due or ``PASS_POSTS``
POSTs went.  After Nova did not answer a delivery (5xx, no answer) or
refused every request (see below), it is taken for away for a retry
interval (``away``): deliveries right after binds leave their batches to
the periodic unsent, and a periodic pass stops there.

Nova has accepted events when it answers a 2xx other than 207 (Nova's
is 200; another, such as 202 or 204, says the same) or its own 404 "No
instances found for any event".  A 207 is read event by event (Nova
lists the events as sent, each with a ``code`` and its ``status``
rewritten): a 2xx (Nova's is 200), 404 or 422 (the instance is gone or
not on a host: nobody waits) ends an event; a 5xx keeps that event (its
row alone) for later; another 4xx (Nova's is 400) is Nova's refusal of
that event, which no retry changes: it is dropped, logged at ERROR and
counted in ``cyborg_conductor_nova_events_refused_total``.  An event
the 207 gives no integer code for (left out, no ``code``, a string) or
a code that is no final answer (1xx, 3xx) may not have reached Nova: it
is kept like a 5xx's, logged at WARNING (at least once, not at most).
Any other answer keeps the POST's events for later.  A 5xx, no answer,
401/403 (credentials), 408/429 (try later) or a 3xx keystoneauth could
not follow concern every request: Nova is taken for away.
Any other 4xx (a body Nova rejects, 400, or finds too large, 413; a
proxy's; an endpoint missing its /v2.1) refuses that request only: a
POST of several batches so refused is sent again batch by batch (each
once), so that one batch Nova refuses keeps back none of the others,
and a periodic pass goes on after such a refusal.  A batch refused
alone is kept, not dropped (a wrong endpoint or a proxy refuses every
request alike), and not counted as refused.  Events are not kept for
ever: those recorded more than ``[nova]event_max_age`` seconds ago (past
Nova's own ``[compute]arq_binding_timeout``: their builds have failed)
are dropped by the periodic, logged at ERROR and counted in
``cyborg_conductor_nova_events_expired_total``.

What is sent is exactly how each bind ended: an event read back from the
database goes out only while its ARQ still exists, is still bound to the
event's instance and is still in the state the event reports (Bound for
``completed``, BindFailed for ``failed``).  An event re-sent after the
process died between Nova's answer and the row's delete, for an ARQ
deleted since (the instance is gone), or for a binding undone since, is
dropped with its row; the same event recorded twice goes out once.

Nova is reached with keystoneauth from ``[nova]`` (plus a service token
from ``[service_user]`` when ``send_service_user_token`` is set); the POST
itself usually goes over a keep-alive connection of the sending thread
with keystoneauth's headers (``cyborg.common.keepalive``), through
keystoneauth where Nova redirects.  With neither ``[nova] auth_type``
nor ``auth_section`` (all-in-one, standalone use), or with
``send_events = False``, nothing is recorded or sent, and binding works
the same; the periodic then drops the events recorded while they were on
once a conductor with them on would give up on them too
(``drop_unsendable``): left there they would count as pending for ever.

Each POST is timed in ``cyborg_conductor_nova_request_seconds``; those
that leave all their events undelivered count in
``cyborg_conductor_nova_errors_total``: any answer but a 2xx or Nova's
own 404, or none, and a 207 that keeps every event for another try
(none taken, none refused for good).
"""

import collections
from concurrent import futures
import datetime
import socket
import threading
import time

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import service_token
from oslo_log import log as logging

from cyborg.common import keepalive
from cyborg.common import metrics
from cyborg.common import states
from cyborg.common import timing
from cyborg.common import wording
from cyborg.conf import ksa
from cyborg.db import api as db_api
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import clock as clock_db
from cyborg.db.api import nova_events as event_db

LOG = logging.getLogger(__name__)

EVENT_NAME = 'accelerator-request-bound'
EVENTS_URL = '/os-server-external-events'
MICROVERSION = '2.82'
# Of the POSTs made over our own connections (``keepalive``).
USER_AGENT = 'cyborg-nova-client'
# Immediate attempts per delivery; then the periodic takes over.
_TRIES = 3
# Events in one POST: about 160 bytes each, well under the 112 KiB Nova
# takes in a request body by default (oslo.middleware's sizelimit).
MAX_EVENTS_PER_POST = 200
# What Nova's 404 says when none of the events' instances exists (the
# events are then delivered: nobody waits for them); any other 404 is
# not Nova's answer to them.
_NO_INSTANCES = 'No instances found for any event'
_FIRST_BACKOFF = 0.5
# Nova's [compute]arq_binding_timeout by default: a build whose
# accelerator requests' outcomes have not reached Nova by then fails.
NOVA_ARQ_BINDING_TIMEOUT = 300
# Longest wait between two periodic attempts of one batch.
_MAX_POSTPONE = 300

# Threads delivering the events of finished binds (``deliver_later``),
# and batches waiting for them at most: beyond, a batch is left to the
# periodic (due at its next pass).
SENDERS = 2
QUEUE_LIMIT = 1000
# A periodic pass: due batches read at once, and POSTs at most.
_DUE_READ = 1000
PASS_POSTS = 25
# Per-event codes of a 207 that are no refusal: accepted (200; any 2xx
# is), or nobody waits for the event: its instance is gone (404, deleted
# during its build) or not on a host (422).
_USUAL_CODES = (200, 404, 422)
# What a 207's per-event code says of its event (``_verdict``).
_DONE = 'done'
_DROPPED = 'dropped'
_KEPT = 'kept'
_UNREAD = 'unread'
# Answers to a whole request that say nothing of its body: Nova's
# credentials or rate limits, a request timeout.  Every request gets the
# same: Nova is taken for away (``_NOVA_AWAY``), not sent batch by batch.
_EVERY_REQUEST = (401, 403, 408, 429)

# Why a request's events were all kept (``_Outcome.failure``): Nova away
# (no answer, a 5xx, an answer every request gets), or this request
# refused (any other 4xx: its body may hold one batch Nova rejects).
_NOVA_AWAY = 'away'
_REFUSED = 'refused'

# The ARQ state each event status reports.
_OUTCOME = {'completed': states.BOUND, 'failed': states.BIND_FAILED}

_ADAPTERS = {}
_ADAPTERS_LOCK = threading.Lock()

# {_key(conf): time.monotonic() until which that Nova is taken for away}:
# set when a delivery's tries all failed (``_NOVA_AWAY``; not by a 4xx
# refusing one request), cleared by one that goes through.  Meanwhile a
# delivery right after a bind leaves its batch to the periodic at once,
# instead of holding a sender thread for ``delivery_time()`` to find Nova
# away again (the batches queued behind it would wait), and a periodic
# pass stops there.
_AWAY = {}


def enabled(conf):
    """Whether events go to Nova at all."""
    return bool(conf.nova.send_events and ksa.has_credentials(conf.nova))


def _adapter(conf):
    """(keystoneauth Adapter, KeepAlive) for the compute API, one pair per
    conf."""
    with _ADAPTERS_LOCK:
        pair = _ADAPTERS.get(_key(conf))
        if pair is None:
            auth = ks_loading.load_auth_from_conf_options(conf, 'nova')
            if conf.service_user.send_service_user_token:
                service_auth = ks_loading.load_auth_from_conf_options(
                    conf, 'service_user')
                auth = service_token.ServiceTokenAuthWrapper(
                    user_auth=auth, service_auth=service_auth)
            session = ks_loading.load_session_from_conf_options(
                conf, 'nova', auth=auth)
            adapter = ks_loading.load_adapter_from_conf_options(
                conf, 'nova', session=session, auth=auth)
            pair = _ADAPTERS[_key(conf)] = (adapter, keepalive.KeepAlive(
                adapter, session, auth,
                api_version=f'compute {MICROVERSION}',
                user_agent=USER_AGENT,
                # The compute API's older header, as keystoneauth sends.
                headers={'X-OpenStack-Nova-API-Version': MICROVERSION}))
        return pair


def record(conf, context, batch_id, events, due_at):
    """Record ``events`` [(instance_uuid, arq_uuid, status)] of a batch in
    the caller's transaction.  ``due_at`` is when the periodic may re-send
    them if ``deliver_batch`` has not delivered them by then."""
    rows = [{'batch_id': batch_id, 'instance_uuid': instance_uuid,
             'arq_uuid': arq_uuid, 'status': status, 'attempts': 0,
             'next_attempt_at': due_at, 'owner': conf.host}
            for instance_uuid, arq_uuid, status in events if instance_uuid]
    if rows and enabled(conf):
        event_db.create_many(context, rows)


class _Batch:
    """A batch's events to send ([(instance, arq, status)]), its rows
    [(id, event)] (None: forgotten by batch id, as recorded) and the
    attempts made."""

    __slots__ = ('batch_id', 'events', 'rows', 'attempts')

    def __init__(self, batch_id, events, rows=None, attempts=0):
        self.batch_id = batch_id
        self.events = events
        self.rows = rows
        self.attempts = attempts


# What became of a ``_deliver``'s batches: ``kept``, the ids of those
# with events kept for later (postponed, or left unsent); ``away``,
# whether Nova was found away; ``posts``, the requests made.
_Delivery = collections.namedtuple('_Delivery', 'kept away posts')


def deliver_batch(conf, context, batch_id, probe=False):
    """Send a batch's recorded events in one request; forget them once
    Nova has accepted them, else postpone them for the periodic.  While
    Nova is taken for away (``away``) the batch is postponed unsent,
    unless ``probe`` (the periodic's try)."""
    if not enabled(conf):
        return True
    batches = _read(context, [batch_id])
    return not batches or not _deliver(conf, context, batches, probe).kept


def deliver_recorded(conf, context, batch_id, events):
    """``deliver_batch`` for a batch whose events are exactly ``events``
    [(instance, arq, status)], just recorded and committed by this caller
    (a quick bind): they say how the binds ended, so they are sent without
    being read back; the rows are forgotten by batch once Nova has
    accepted them, else postponed for the periodic like any other
    batch."""
    events = [event for event in events if event[0]]
    if not enabled(conf) or not events:
        return True
    return not _deliver(conf, context, [_Batch(batch_id, events)]).kept


def deliver_later(conf, context, batch_id, events=None):
    """Hand a batch over to the sender threads (``deliver_batch``, or
    ``deliver_recorded`` with ``events``); returns a future of whether
    Nova accepted it.  With too many batches waiting already, it is left
    to the periodic's next pass."""
    job = _Job(conf, context, batch_id, events)
    if not enabled(conf) or (events is not None and
                             not any(event[0] for event in events)):
        job.future.set_result(True)
    elif not _SENDER.put(job):
        if _SENDER.refused == 1:
            LOG.warning('%d batches of Nova events wait for delivery: '
                        'batch %s and those after it are left to the '
                        'periodic until they are sent', QUEUE_LIMIT,
                        batch_id)
        db_api.write_retrying(context, event_db.postpone_batch, context,
                              batch_id, _next_attempt(conf, 0))
        job.future.set_result(False)
    return job.future


def drain(timeout=None):
    """Wait until the batches handed to ``deliver_later`` so far are
    delivered or postponed; False when ``timeout`` seconds passed
    first."""
    return _SENDER.drain(timeout)


def _deliver(conf, context, batches, probe=False, budget=None):
    """Send the events of ``batches`` in one request (none: nothing left
    to say) and forget the rows of those Nova answered for (accepted, or
    refused one by one for good); postpone each batch with events kept,
    after its earlier attempts.  When Nova refuses the request of several
    batches (``_REFUSED``), each is sent alone (``_one_by_one``), at most
    ``budget`` requests made in all.  Returns a ``_Delivery``."""
    events, seen = [], set()
    for batch in batches:
        for event in batch.events:
            if event not in seen:
                seen.add(event)
                events.append(event)
    posts = 0
    if not events:
        outcome = _Outcome()
    elif away(conf) and not probe:
        LOG.debug('Nova is away: batches %s are left to the periodic',
                  ', '.join(b.batch_id for b in batches))
        outcome = _Outcome(_NOVA_AWAY, events)
    else:
        outcome, posts = _sent(conf, events), 1
    if outcome.failure == _REFUSED and len(batches) > 1:
        return _one_by_one(conf, context, batches, budget, posts)
    if outcome.failure:
        db_api.write_retrying(context, _postpone, conf, context, batches)
        return _Delivery({b.batch_id for b in batches},
                         outcome.failure == _NOVA_AWAY, posts)
    if outcome.kept:
        db_api.write_retrying(context, _settle, conf, context, batches,
                              outcome.kept)
    else:
        db_api.write_retrying(context, _forget, context, batches)
    return _Delivery({b.batch_id for b in batches
                      if outcome.kept.intersection(b.events)}, False, posts)


def _one_by_one(conf, context, batches, budget, posts):
    """Send each of ``batches`` alone, once, after Nova refused them
    together (a 4xx: a body it rejects, one too large): the refusal may
    be of one batch's events, which must not keep back the others'
    builds until ``[nova]event_max_age``.  Stops sending once Nova is
    found away (the rest are postponed unsent) or ``budget`` requests
    went (the rest are left as claimed, unsent: due at a later pass)."""
    LOG.warning('Nova refused one request of %d batches of events; '
                'sending each alone', len(batches))
    kept, nova_away = set(), False
    for batch in batches:
        if budget is not None and posts >= budget:
            kept.add(batch.batch_id)
            continue
        done = _deliver(conf, context, [batch], probe=not nova_away)
        kept |= done.kept
        nova_away = nova_away or done.away
        posts += done.posts
    return _Delivery(kept, nova_away, posts)


def _forget(context, batches):
    recorded = [b.batch_id for b in batches if b.rows is None]
    if recorded:
        event_db.forget_batches(context, recorded)
    ids = [i for b in batches if b.rows is not None for i, _event in b.rows]
    if ids:
        event_db.delete_ids(context, ids)


def _postpone(conf, context, batches):
    for batch in batches:
        event_db.postpone_batch(context, batch.batch_id,
                                _next_attempt(conf, batch.attempts))


def _settle(conf, context, batches, kept):
    """Forget the rows of ``batches`` but those of the events ``kept``
    (Nova's 207 answered a 5xx for them), and postpone the batches that
    still have some."""
    _forget(context, [b for b in batches if not kept.intersection(b.events)])
    for batch in batches:
        if not kept.intersection(batch.events):
            continue
        rows = batch.rows
        if rows is None:
            rows = [(r.id, (r.instance_uuid, r.arq_uuid, r.status))
                    for r in event_db.get_batch(context, batch.batch_id)]
        ids = [i for i, event in rows if event not in kept]
        if ids:
            event_db.delete_ids(context, ids)
        event_db.postpone_batch(context, batch.batch_id,
                                _next_attempt(conf, batch.attempts))


def away(conf):
    """Whether the last delivery to this Nova failed, less than
    ``[conductor]nova_event_retry_interval`` seconds ago."""
    return time.monotonic() < _AWAY.get(_key(conf), 0.0)


def _sent(conf, events):
    """``send``, noting whether Nova is to be taken for away."""
    outcome = send(conf, events)
    if outcome.failure == _NOVA_AWAY:
        _AWAY[_key(conf)] = (time.monotonic()
                             + conf.conductor.nova_event_retry_interval)
    elif not outcome.failure:
        _AWAY.pop(_key(conf), None)
    return outcome


@db_api.reader
def _read(context, batch_ids):
    """The ``_Batch`` of each of ``batch_ids`` that has rows, with what of
    them is still to send, read in one transaction."""
    rows = event_db.get_batches(context, batch_ids)
    if not rows:
        return []
    wanted = set(current(context, rows))
    by_batch = {batch_id: [] for batch_id in batch_ids}
    for row in rows:
        by_batch[row.batch_id].append(row)
    batches = []
    for batch_id, its in by_batch.items():
        if its:
            events = list(dict.fromkeys(
                event for event in ((r.instance_uuid, r.arq_uuid, r.status)
                                    for r in its) if event in wanted))
            batches.append(_Batch(
                batch_id, events,
                [(r.id, (r.instance_uuid, r.arq_uuid, r.status))
                 for r in its],
                max(r.attempts for r in its)))
    return batches


def current(context, rows):
    """[(instance, arq, status)] of the event ``rows`` that still say how
    their ARQ's bind ended (see the module's docstring), once each."""
    arqs = arq_db.outcomes(context, {r.arq_uuid for r in rows})
    events, dropped = [], 0
    for row in rows:
        event = (row.instance_uuid, row.arq_uuid, row.status)
        if arqs.get(row.arq_uuid) != (_OUTCOME[row.status],
                                      row.instance_uuid):
            dropped += 1
        elif event not in events:
            events.append(event)
    if dropped:
        LOG.info('Dropped %d accelerator event(s) whose request was deleted '
                 'or changed since', dropped)
    return events


def resend_owned(conf, context, started_at):
    """At start-up: re-send now the events this conductor recorded before
    ``started_at`` (its previous run died before delivering them);
    returns how many there were."""
    if not enabled(conf):
        return 0
    due = db_api.write_retrying(context, event_db.make_owned_due, context,
                                conf.host, started_at, clock_db.utcnow())
    if due:
        resend_due(conf, context)
    return due


def resend_due(conf, context):
    """Periodic: give up on the events older than ``[nova]event_max_age``,
    then deliver the batches whose next attempt is due, the most recently
    recorded first, several in one POST, until none is due, ``PASS_POSTS``
    POSTs went, or Nova was found away (the rest wait for the next pass).
    A POST Nova refuses (a 4xx) is sent again batch by batch, and the
    pass goes on.  With events off, drops the events Nova no longer
    waits for (``drop_unsendable``)."""
    if not enabled(conf):
        drop_unsendable(conf, context)
        return
    expire(conf, context)
    posts = 0
    for _round in range(PASS_POSTS):
        now = clock_db.utcnow()
        due = event_db.due_batches(context, now, limit=_DUE_READ)
        if not due:
            return
        for group in _groups(due):
            # Claiming pushes the due time forward so that another
            # conductor's periodic does not send the same batches
            # meanwhile: by as long as a delivery may take, or a slow
            # Nova gets them twice.
            claimed = db_api.write_retrying(
                context, event_db.claim_batches, context, group, now,
                max(_next_attempt(conf, 0), now + datetime.timedelta(
                    seconds=delivery_time(conf))))
            batches = _read(context, claimed) if claimed else []
            if not batches:
                continue
            done = _deliver(conf, context, batches, probe=True,
                            budget=PASS_POSTS - posts)
            posts += done.posts
            # Nova away: the rest wait for the next pass (each would
            # spend ``delivery_time()`` finding that out again).  A
            # refusal of some batches is theirs alone: the pass goes on.
            if done.away:
                LOG.info('Nova did not take %d batch(es) of events; the '
                         'batches due after them wait for the next pass',
                         len(done.kept))
                return
            if posts >= PASS_POSTS:
                return


def _groups(due):
    """The batch ids of ``due`` [(batch id, events)] in runs of at most
    ``MAX_EVENTS_PER_POST`` events, in order (a larger batch alone)."""
    group, size = [], 0
    for batch_id, events in due:
        if group and size + events > MAX_EVENTS_PER_POST:
            yield group
            group, size = [], 0
        group.append(batch_id)
        size += events
    if group:
        yield group


def expire(conf, context):
    """Give up on the events recorded more than ``[nova]event_max_age``
    seconds ago: Nova stopped waiting for them long before (the builds
    failed).  Returns how many."""
    max_age = conf.nova.event_max_age
    if not max_age:
        return 0
    rows = _expire_before(context, clock_db.utcnow() -
                          datetime.timedelta(seconds=max_age))
    if rows:
        metrics.CONDUCTOR_NOVA_EVENTS_EXPIRED.inc(len(rows))
        LOG.error('Gave up on %d accelerator-request-bound event(s) Nova '
                  'did not accept within [nova]event_max_age (%d s): %s',
                  len(rows), max_age, wording.some(
                      (f'{r.status} for instance {r.instance_uuid} '
                       f'(accelerator request {r.arq_uuid})' for r in rows),
                      _EXPIRED_SHOWN))
    return len(rows)


def drop_unsendable(conf, context):
    """Events off (``[nova]send_events`` false, or no Nova credentials):
    forget the events recorded while they were on, once a conductor with
    events on would give up on them too (``unsendable_after``).  This
    conductor will never send them; left there, they were counted
    pending (and their age alerted on) for ever.  Younger ones are left
    to a conductor with events on (one whose configuration lags a
    change: ``send_events`` should be the same on every conductor),
    which may still deliver them in time.  Returns how many."""
    count, _oldest = event_db.pending(context)
    if not count:
        return 0
    after = unsendable_after(conf)
    dropped = len(_expire_before(context, clock_db.utcnow() -
                                 datetime.timedelta(seconds=after)))
    if dropped:
        LOG.warning('Dropped %d accelerator-request-bound event(s) recorded '
                    'for Nova more than %d s ago: events are off '
                    '([nova]send_events, or no [nova] credentials), so this '
                    'conductor would never send them', dropped, after)
    return dropped


def unsendable_after(conf):
    """Seconds after which a conductor with events off drops an event
    recorded while they were on: ``[nova]event_max_age``, when a
    conductor with them on gives up on it (an operator who raised Nova's
    ``arq_binding_timeout`` raises that too), else (0: never given up)
    Nova's default ``arq_binding_timeout``, past which no build waits."""
    return conf.nova.event_max_age or NOVA_ARQ_BINDING_TIMEOUT


# Events one transaction of an expiry forgets at most (after a long
# outage of Nova there may be many: each transaction stays short).
EXPIRE_BATCH = 500


def _expire_before(context, created_before):
    """Forget the events recorded before ``created_before``, a batch
    per transaction; returns their rows."""
    rows = []
    while True:
        batch = db_api.write_retrying(context, event_db.expire, context,
                                      created_before, EXPIRE_BATCH)
        rows += batch
        if len(batch) < EXPIRE_BATCH:
            return rows


# Events an expiry names in its log line, at most.
_EXPIRED_SHOWN = 10


def delivery_time(conf):
    """The longest one delivery of a batch's request may take: its tries,
    each within ``[nova]timeout``, and the pauses between them."""
    timeout = conf.nova.timeout or 0
    pauses = sum(_FIRST_BACKOFF * 2 ** n for n in range(_TRIES - 1))
    return _TRIES * timeout + pauses


def _next_attempt(conf, attempts):
    delay = min(conf.conductor.nova_event_retry_interval * 2 ** attempts,
                _MAX_POSTPONE)
    return clock_db.utcnow() + datetime.timedelta(seconds=delay)


def payload(events):
    """The os-server-external-events body for [(instance, arq, status)]."""
    return {'events': [{'name': EVENT_NAME, 'server_uuid': instance_uuid,
                        'tag': arq_uuid, 'status': status}
                       for instance_uuid, arq_uuid, status in events]}


class _Outcome:
    """What became of events sent: ``failure`` None, Nova answered for
    them (each accepted, or refused for good and dropped) but for those
    ``kept`` for later; else why they are all ``kept`` (``_NOVA_AWAY``,
    ``_REFUSED``).  True when none is kept."""

    __slots__ = ('failure', 'kept')

    def __init__(self, failure=None, kept=()):
        self.failure = failure
        self.kept = set(kept)

    def __bool__(self):
        return not self.failure and not self.kept


def send(conf, events):
    """POST the events, at most ``MAX_EVENTS_PER_POST`` in one request
    (Nova refuses a body over its size limit, 413); an ``_Outcome``, true
    when Nova has answered for good for every one (accepted, refused one
    by one, or told us the instances are gone), false to try (some of)
    them again later."""
    kept = set()
    for start in range(0, len(events), MAX_EVENTS_PER_POST):
        outcome = _send(conf, events[start:start + MAX_EVENTS_PER_POST])
        if outcome.failure:
            # Those delivered already are sent again with the rest: Nova
            # ignores an event for a bind it no longer waits for.
            return _Outcome(outcome.failure, events)
        kept |= outcome.kept
    return _Outcome(kept=kept)


def _send(conf, events):
    body = payload(events)
    delay = _FIRST_BACKOFF
    for attempt in range(1, _TRIES + 1):
        try:
            response = _post(conf, body)
        except (ks_exc.ClientException, socket.timeout) as e:
            # Nova or Keystone unreachable, or Keystone refusing our
            # credentials (its 401 is an HttpError), or a redirect that
            # leads nowhere: kept, tried again.
            LOG.warning('Nova unreachable sending %d event(s) (try %d): %s',
                        len(events), attempt, e)
        else:
            status = response.status_code
            if status < 500:
                return _answered(status, response, events)
            LOG.warning('Nova answered %s to %d event(s) (try %d)', status,
                        len(events), attempt)
        if attempt < _TRIES:
            time.sleep(delay)
            delay *= 2
    return _Outcome(_NOVA_AWAY, events)


def _post(conf, body):
    """One POST of events, timed and counted."""
    started = time.monotonic()
    adapter, keep_alive = _adapter(conf)
    try:
        response = keep_alive.request('POST', EVENTS_URL, body)
        if response is None:
            response = adapter.post(EVENTS_URL, json=body,
                                    microversion=MICROVERSION,
                                    raise_exc=False)
    except Exception:
        metrics.CONDUCTOR_NOVA_ERRORS.inc()
        raise
    finally:
        seconds = time.monotonic() - started
        metrics.CONDUCTOR_NOVA_SECONDS.observe(seconds)
        timing.add(timing.NOVA, seconds)
    if not _accepted(response):
        metrics.CONDUCTOR_NOVA_ERRORS.inc()
    return response


def _accepted(response):
    """Whether Nova's answer ends the request (see the module): a 2xx
    (a 207's events are then read one by one), or Nova's own 404."""
    return 200 <= response.status_code < 300 or _instances_gone(response)


def _answered(status, response, events):
    """The ``_Outcome`` of Nova's answer below 500 (see the module)."""
    if status == 207:
        kept = _per_event(response, events)
        if len(kept) == len(events):
            # Nothing delivered, as by a failed request (5xx codes alone,
            # or none Nova's answer says it took).
            metrics.CONDUCTOR_NOVA_ERRORS.inc()
        return _Outcome(kept=kept)
    if _accepted(response):
        if _instances_gone(response):
            LOG.info('Nova knows none of the instances of %d event(s)',
                     len(events))
        return _Outcome()
    if status in (401, 403):
        # A configuration problem an operator can fix: keep the events.
        LOG.error('Nova refused our credentials (%s); events kept', status)
        return _Outcome(_NOVA_AWAY, events)
    # Not Nova's acceptance: a redirect keystoneauth could not follow, a
    # wrong endpoint's or a proxy's 404, a proxy's rate limit or timeout,
    # a refusal.  Kept, tried again until they expire.
    LOG.error('Nova answered %s to %d accelerator event(s), events kept: '
              '%s', status, len(events), response.text[:500])
    if 400 <= status < 500 and status not in _EVERY_REQUEST:
        return _Outcome(_REFUSED, events)
    return _Outcome(_NOVA_AWAY, events)


def _per_event(response, events):
    """The events of a 207 to try again (``_verdict``): those Nova
    answered a 5xx for, and those whose code does not say whether Nova
    took them.  A 4xx but 404 and 422 is Nova's refusal of that event,
    which no retry changes: it is dropped, logged at ERROR and counted.
    Answers are matched to events by instance and tag, in order: Nova
    lists the events as sent, but rewrites their ``status`` (``failed``
    for a 404 or 422, ``completed`` for a 200)."""
    codes = collections.defaultdict(collections.deque)
    for answer in _events_of(response):
        if isinstance(answer, dict):
            key = (answer.get('server_uuid'), answer.get('tag'))
            if all(isinstance(part, str) for part in key):
                codes[key].append(answer.get('code'))
    kept, refused, unread = [], [], []
    for event in events:
        answers = codes.get(event[:2])
        code = answers.popleft() if answers else None
        verdict = _verdict(code)
        if verdict == _DONE:
            continue
        named = (f'{event[2]} for instance {event[0]} (accelerator '
                 f'request {event[1]}): '
                 f'{"no code" if code is None else repr(code)}')
        if verdict == _DROPPED:
            refused.append(named)
            continue
        kept.append(event)
        if verdict == _UNREAD:
            unread.append(named)
        else:
            LOG.warning('Nova answered %s; the event is kept', named)
    if refused:
        metrics.CONDUCTOR_NOVA_EVENTS_REFUSED.inc(len(refused))
        LOG.error('Nova refused %d accelerator-request-bound event(s), '
                  'dropped: %s', len(refused),
                  wording.some(refused, _EXPIRED_SHOWN))
    if unread:
        LOG.warning('Nova\'s 207 said neither that it took nor that it '
                    'refused %d accelerator event(s), kept for another '
                    'try: %s', len(unread),
                    wording.some(unread, _EXPIRED_SHOWN))
    return kept


def _verdict(code):
    """What a 207's ``code`` for one event says of it: ``_DONE`` (a 2xx:
    Nova took it; 404, 422: nobody waits for it), ``_DROPPED`` (another
    4xx: Nova refused it), ``_KEPT`` (a 5xx: tried again), ``_UNREAD``
    (no code, not an integer, or no final answer, a 1xx or 3xx: nothing
    says Nova took it, so it is tried again, as a 5xx's)."""
    if isinstance(code, bool) or not isinstance(code, int):
        return _UNREAD
    if code in _USUAL_CODES or 200 <= code < 300:
        return _DONE
    if 400 <= code < 500:
        return _DROPPED
    if 500 <= code < 600:
        return _KEPT
    return _UNREAD


def _instances_gone(response):
    """Whether Nova answered that none of the events' instances exists
    (its own 404, not a route's or a proxy's)."""
    return response.status_code == 404 and _NO_INSTANCES in response.text


def _events_of(response):
    try:
        body = response.json()
    except ValueError:
        return []
    events = body.get('events') if isinstance(body, dict) else None
    return events if isinstance(events, list) else []


class _Job:
    """A batch handed to ``deliver_later``: its ``_Batch`` once read."""

    __slots__ = ('conf', 'context', 'batch_id', 'events', 'future', 'batch')

    def __init__(self, conf, context, batch_id, events):
        self.conf = conf
        self.context = context
        self.batch_id = batch_id
        self.events = events
        self.future = futures.Future()
        self.batch = None


class _Sender:
    """The batches handed to ``deliver_later`` and the ``SENDERS`` daemon
    threads delivering them.  A thread takes the batch that waited
    longest and, with it, those queued behind it for the same Nova, up to
    ``MAX_EVENTS_PER_POST`` events: when Nova is slow, the batches that
    piled up meanwhile go in one POST."""

    def __init__(self):
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._threads = []
        self._busy = 0
        # Batches refused since the queue was last emptied.
        self.refused = 0

    def put(self, job):
        with self._cond:
            if len(self._queue) >= QUEUE_LIMIT:
                self.refused += 1
                return False
            self._queue.append(job)
            self._threads = [t for t in self._threads if t.is_alive()]
            if (len(self._threads) < SENDERS
                    and len(self._queue) > len(self._threads) - self._busy):
                thread = threading.Thread(target=self._run,
                                          name='cyborg-nova-events',
                                          daemon=True)
                thread.start()
                self._threads.append(thread)
            self._cond.notify()
            return True

    def drain(self, timeout=None):
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._queue and not self._busy, timeout)

    def _run(self):
        while True:
            with self._cond:
                while not self._queue:
                    self.refused = 0
                    self._cond.wait()
                jobs = [self._queue.popleft()]
                self._busy += 1
            try:
                self._deliver(jobs)
            except Exception:
                LOG.exception('Could not deliver the events of batch(es) '
                              '%s; the periodic re-sends them',
                              ', '.join(job.batch_id for job in jobs))
            finally:
                for job in jobs:
                    if not job.future.done():
                        job.future.set_result(False)
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    @timing.rpc_served('nova_event_delivery')
    def _deliver(self, jobs):
        """Deliver the batch of ``jobs`` (one) and those queued behind it
        for the same Nova that fit in its POST, added to ``jobs``."""
        first, size = jobs[0], 0
        job = first
        while job is not None:
            _prepare(job)
            events = len(job.batch.events) if job.batch else 0
            if job is not first and size + events > MAX_EVENTS_PER_POST:
                jobs.pop()
                with self._cond:
                    self._queue.appendleft(job)   # first of the next POST
                break
            size += events
            job = self._next(first.conf)
            if job is not None:
                jobs.append(job)
        batches = [job.batch for job in jobs if job.batch is not None]
        kept = (_deliver(first.conf, first.context, batches).kept
                if batches else set())
        # Each batch's own outcome: one Nova refuses keeps back no other.
        for job in jobs:
            job.future.set_result(job.batch is None
                                  or job.batch.batch_id not in kept)

    def _next(self, conf):
        with self._cond:
            if self._queue and self._queue[0].conf is conf:
                return self._queue.popleft()
        return None


def _prepare(job):
    """Read a job's batch back where its events are not known (None: it
    has no row left)."""
    if job.batch is not None:
        return
    if job.events is not None:
        job.batch = _Batch(job.batch_id,
                           [event for event in job.events if event[0]])
        return
    batches = _read(job.context, [job.batch_id])
    job.batch = batches[0] if batches else None


_SENDER = _Sender()


def _key(conf):
    # id() alone could name a dead conf's cached client; the endpoint and
    # auth type make a reused id harmless.
    return (id(conf), conf.nova.auth_type, conf.nova.endpoint_override)
