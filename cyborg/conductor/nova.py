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
without reading it back.  Rows are deleted once Nova has accepted them;
rows left behind (Nova down or refusing, conductor killed between commit
and POST) are re-sent by the periodic ``resend_due``, and at once by their
conductor (``owner``) when it starts again (``resend_owned``).  A periodic
pass sends the due batches most recently recorded first, several in one
POST, until none is due or ``PASS_POSTS`` POSTs went.  After a delivery
failed, Nova is taken for away for a retry interval (``away``):
deliveries right after binds leave their batches to the periodic unsent,
and a periodic pass stops at its first failure.

Nova has accepted events when it answers 200, 207 (per-event codes; 404
and 422 say the instance is gone or not on a host: nobody waits) or its
own 404 "No instances found for any event".  Any other answer keeps them
for later: a 5xx, no answer, 401/403 (credentials), a 3xx keystoneauth
could not follow, any other 4xx (a proxy's, an endpoint missing its
/v2.1).  Events are not kept for ever: those recorded more than
``[nova]event_max_age`` seconds ago (past Nova's own
``[compute]arq_binding_timeout``: their builds have failed) are dropped
by the periodic, logged at ERROR and counted in
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
keystoneauth where Nova redirects.  With no ``[nova] auth_type``
(all-in-one, standalone use) or ``send_events = False`` nothing is
recorded or sent, and binding works the same.

Each POST is timed in ``cyborg_conductor_nova_request_seconds``; those
that leave the events undelivered count in
``cyborg_conductor_nova_errors_total``.
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
# Per-event codes of a 207 that are no refusal: accepted (200), or
# nobody waits for the event: its instance is gone (404, deleted during
# its build) or not on a host (422).
_USUAL_CODES = (200, 404, 422)

# The ARQ state each event status reports.
_OUTCOME = {'completed': states.BOUND, 'failed': states.BIND_FAILED}

_ADAPTERS = {}
_ADAPTERS_LOCK = threading.Lock()

# {_key(conf): time.monotonic() until which that Nova is taken for away}:
# set when a delivery's tries all failed, cleared by one that goes
# through.  Meanwhile a delivery right after a bind leaves its batch to
# the periodic at once, instead of holding a sender thread for
# ``delivery_time()`` to find Nova away again (the batches queued behind
# it would wait), and a periodic pass stops at its first failure.
_AWAY = {}


def enabled(conf):
    """Whether events go to Nova at all."""
    return bool(conf.nova.send_events and conf.nova.auth_type)


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
    """A batch's events to send ([(instance, arq, status)]), its row ids
    (None: forgotten by batch id, as recorded) and the attempts made."""

    __slots__ = ('batch_id', 'events', 'ids', 'attempts')

    def __init__(self, batch_id, events, ids=None, attempts=0):
        self.batch_id = batch_id
        self.events = events
        self.ids = ids
        self.attempts = attempts


def deliver_batch(conf, context, batch_id, probe=False):
    """Send a batch's recorded events in one request; forget them once
    Nova has accepted them, else postpone them for the periodic.  While
    Nova is taken for away (``away``) the batch is postponed unsent,
    unless ``probe`` (the periodic's try)."""
    if not enabled(conf):
        return True
    batches = _read(context, [batch_id])
    return not batches or _deliver(conf, context, batches, probe)


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
    return _deliver(conf, context, [_Batch(batch_id, events)])


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


def _deliver(conf, context, batches, probe=False):
    """Send the events of ``batches`` in one request (none: nothing left
    to say) and forget their rows once Nova has accepted them; else
    postpone each batch after its earlier attempts.  True when
    delivered."""
    events, seen = [], set()
    for batch in batches:
        for event in batch.events:
            if event not in seen:
                seen.add(event)
                events.append(event)
    if events and away(conf) and not probe:
        LOG.debug('Nova is away: batches %s are left to the periodic',
                  ', '.join(b.batch_id for b in batches))
        delivered = False
    else:
        delivered = not events or _sent(conf, events)
    if delivered:
        db_api.write_retrying(context, _forget, context, batches)
        return True
    db_api.write_retrying(context, _postpone, conf, context, batches)
    return False


def _forget(context, batches):
    recorded = [b.batch_id for b in batches if b.ids is None]
    if recorded:
        event_db.forget_batches(context, recorded)
    ids = [i for b in batches if b.ids is not None for i in b.ids]
    if ids:
        event_db.delete_ids(context, ids)


def _postpone(conf, context, batches):
    for batch in batches:
        event_db.postpone_batch(context, batch.batch_id,
                                _next_attempt(conf, batch.attempts))


def away(conf):
    """Whether the last delivery to this Nova failed, less than
    ``[conductor]nova_event_retry_interval`` seconds ago."""
    return time.monotonic() < _AWAY.get(_key(conf), 0.0)


def _sent(conf, events):
    """``send``, noting whether Nova took them for ``away``."""
    if send(conf, events):
        _AWAY.pop(_key(conf), None)
        return True
    _AWAY[_key(conf)] = (time.monotonic()
                         + conf.conductor.nova_event_retry_interval)
    return False


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
            batches.append(_Batch(batch_id, events, [r.id for r in its],
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
    POSTs went, or Nova did not take one (the rest wait for the next
    pass)."""
    if not enabled(conf):
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
            posts += any(batch.events for batch in batches)
            # Nova away: the rest wait for the next pass (each would
            # spend ``delivery_time()`` finding that out again).
            if not _deliver(conf, context, batches, probe=True):
                LOG.info('Nova did not take %d batch(es) of events; the '
                         'batches due after them wait for the next pass',
                         len(batches))
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
    rows = db_api.write_retrying(
        context, event_db.expire, context,
        clock_db.utcnow() - datetime.timedelta(seconds=max_age))
    if rows:
        metrics.CONDUCTOR_NOVA_EVENTS_EXPIRED.inc(len(rows))
        LOG.error('Gave up on %d accelerator-request-bound event(s) Nova '
                  'did not accept within [nova]event_max_age (%d s): %s',
                  len(rows), max_age, wording.some(
                      (f'{r.status} for instance {r.instance_uuid} '
                       f'(accelerator request {r.arq_uuid})' for r in rows),
                      _EXPIRED_SHOWN))
    return len(rows)


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


def send(conf, events):
    """POST the events, at most ``MAX_EVENTS_PER_POST`` in one request
    (Nova refuses a body over its size limit, 413); True when Nova has
    answered for good (accepted, or told us the instances are gone),
    False to try again later."""
    for start in range(0, len(events), MAX_EVENTS_PER_POST):
        if not _send(conf, events[start:start + MAX_EVENTS_PER_POST]):
            # Those delivered already are sent again with the rest: Nova
            # ignores an event for a bind it no longer waits for.
            return False
    return True


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
    return False


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
    """Whether Nova's answer ends the events (see the module)."""
    return response.status_code in (200, 207) or _instances_gone(response)


def _answered(status, response, events):
    """True when Nova accepted the events; else (any answer but Nova's
    acceptance) they are kept for later."""
    if status == 207:
        codes = [e.get('code') for e in _events_of(response)]
        odd = [c for c in codes if c not in _USUAL_CODES]
        if odd:
            LOG.warning('Nova refused some accelerator events: %s', codes)
        return True
    if _accepted(response):
        if status != 200:
            LOG.info('Nova knows none of the instances of %d event(s)',
                     len(events))
        return True
    if status in (401, 403):
        # A configuration problem an operator can fix: keep the events.
        LOG.error('Nova refused our credentials (%s); events kept', status)
        return False
    # Not Nova's acceptance: a redirect keystoneauth could not follow, a
    # wrong endpoint's or a proxy's 404, a proxy's rate limit or timeout,
    # a refusal.  Kept, tried again until they expire.
    LOG.error('Nova answered %s to %d accelerator event(s), events kept: '
              '%s', status, len(events), response.text[:500])
    return False


def _instances_gone(response):
    """Whether Nova answered that none of the events' instances exists
    (its own 404, not a route's or a proxy's)."""
    return response.status_code == 404 and _NO_INSTANCES in response.text


def _events_of(response):
    try:
        return response.json().get('events', [])
    except ValueError:
        return []


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
        delivered = (not batches or
                     _deliver(first.conf, first.context, batches))
        for job in jobs:
            job.future.set_result(delivered)

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
