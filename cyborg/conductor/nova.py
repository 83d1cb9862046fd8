"""Telling Nova how binds ended: ``accelerator-request-bound`` events.

Delivery is at least once (doc/source/contract.rst, "Every bind outcome
reaches Nova"): the bind state machine records an event row in the SAME
transaction as the ARQ's final state (``record``), then asks for the batch
to be delivered (``deliver_batch``): one
``POST /os-server-external-events`` (compute microversion 2.82) per PATCH,
retried with backoff on 5xx and connection errors.  A PATCH whose binds
all ended in the transaction that started them sends what that transaction
recorded without reading it back (``deliver_recorded``).  Rows are deleted
once Nova answers; rows left behind (Nova down, conductor killed between
commit and POST) are re-sent by the periodic ``resend_due``, and at once
by their conductor (``owner``) when it starts again (``resend_owned``).
After a delivery failed, Nova is taken for away for a retry interval
(``away``): deliveries right after binds leave their batches to the
periodic unsent, and a periodic pass stops at its first failure.

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
with keystoneauth's headers (``cyborg.common.keepalive``).  With no
``[nova] auth_type`` (all-in-one, standalone use) or ``send_events =
False`` nothing is recorded or sent, and binding works the same.

Each POST is timed in ``cyborg_conductor_nova_request_seconds``; those
that leave the events undelivered (Nova unreachable, 5xx, 401/403) count
in ``cyborg_conductor_nova_errors_total``.
"""

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
# Answers after which the events are kept and tried again later.
_LATER = (404, 408, 413, 429)
_FIRST_BACKOFF = 0.5
# Longest wait between two periodic attempts of one batch.
_MAX_POSTPONE = 300

# The ARQ state each event status reports.
_OUTCOME = {'completed': states.BOUND, 'failed': states.BIND_FAILED}

_ADAPTERS = {}
_ADAPTERS_LOCK = threading.Lock()

# {_key(conf): time.monotonic() until which that Nova is taken for away}:
# set when a delivery's tries all failed, cleared by one that goes
# through.  Meanwhile a delivery right after a bind leaves its batch to
# the periodic at once, instead of holding a bind worker for
# ``delivery_time()`` to find Nova away again (queued binds, mdevs and
# programming, would wait behind it), and a periodic pass stops at its
# first failure.
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


def deliver_batch(conf, context, batch_id, probe=False):
    """Send a batch's recorded events in one request; forget them once
    Nova has answered, else postpone them for the periodic.  While Nova
    is taken for away (``away``) the batch is postponed unsent, unless
    ``probe`` (the periodic's try)."""
    if not enabled(conf):
        return True
    rows, events = _batch(context, batch_id)
    if not rows:
        return True
    return _send_or_postpone(
        conf, context, batch_id, events, max(r.attempts for r in rows),
        event_db.delete_ids, [r.id for r in rows], probe)


def deliver_recorded(conf, context, batch_id, events):
    """``deliver_batch`` for a batch whose events are exactly ``events``
    [(instance, arq, status)], just recorded and committed by this caller
    (a quick bind): they say how the binds ended, so they are sent without
    being read back; the rows are forgotten by batch once Nova has
    answered, else postponed for the periodic like any other batch."""
    events = [event for event in events if event[0]]
    if not enabled(conf) or not events:
        return True
    return _send_or_postpone(conf, context, batch_id, events, 0,
                             event_db.forget_batch, batch_id)


def _send_or_postpone(conf, context, batch_id, events, attempts, forget,
                      which, probe=False):
    """Send ``events`` (none: nothing left to say) and ``forget(context,
    which)`` their rows once Nova has answered; else postpone the batch
    after ``attempts`` earlier ones.  True when delivered."""
    if events and away(conf) and not probe:
        LOG.debug('Nova is away: batch %s is left to the periodic',
                  batch_id)
        delivered = False
    else:
        delivered = not events or _sent(conf, events)
    if delivered:
        db_api.write_retrying(context, forget, context, which)
        return True
    db_api.write_retrying(context, event_db.postpone_batch,
                          context, batch_id, _next_attempt(conf, attempts))
    return False


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
def _batch(context, batch_id):
    """A batch's event rows and what of them is still to send, read in
    one transaction."""
    rows = event_db.get_batch(context, batch_id)
    return rows, current(context, rows) if rows else []


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
    """Periodic: deliver batches whose next attempt is due."""
    if not enabled(conf):
        return
    now = clock_db.utcnow()
    for batch_id in event_db.due_batches(context, now):
        # Claiming pushes the due time forward so that another
        # conductor's periodic does not send the same batch meanwhile: by
        # as long as a delivery may take, or a slow Nova gets it twice.
        claimed = db_api.write_retrying(
            context, event_db.claim_batch, context, batch_id, now,
            max(_next_attempt(conf, 0), now + datetime.timedelta(
                seconds=delivery_time(conf))))
        # Nova away: the rest wait for the next pass (each would spend
        # ``delivery_time()`` finding that out again).
        if claimed and not deliver_batch(conf, context, batch_id,
                                         probe=True):
            LOG.info('Nova did not take batch %s; the batches due after '
                     'it wait for the next pass', batch_id)
            return


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
            # credentials (its 401 is an HttpError): kept, tried again.
            LOG.warning('Nova unreachable sending %d event(s) (try %d): %s',
                        len(events), attempt, e)
        else:
            status = response.status_code
            if status < 500:
                return _final(status, response, events)
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
    if response.status_code >= 400 and not _instances_gone(response):
        metrics.CONDUCTOR_NOVA_ERRORS.inc()
    return response


def _final(status, response, events):
    if status == 200:
        return True
    if status == 207:
        # Per-event codes: 422 means the instance is gone, nothing to do.
        codes = [e.get('code') for e in _events_of(response)]
        odd = [c for c in codes if c not in (200, 422)]
        if odd:
            LOG.warning('Nova refused some accelerator events: %s', codes)
        return True
    if _instances_gone(response):
        LOG.info('Nova knows none of the instances of %d event(s)',
                 len(events))
        return True
    if status in (401, 403):
        # A configuration problem an operator can fix: keep the events.
        LOG.error('Nova refused our credentials (%s); events kept', status)
        return False
    if status in _LATER:
        # Not Nova's word on the events: a wrong endpoint or a proxy's
        # 404, a proxy's rate limit, a timeout.  Kept, tried again.
        LOG.error('Nova answered %s to %d accelerator event(s), events '
                  'kept: %s', status, len(events), response.text[:500])
        return False
    LOG.error('Nova rejected %d accelerator event(s) with %s: %s',
              len(events), status, response.text[:500])
    return True


def _instances_gone(response):
    """Whether Nova answered that none of the events' instances exists
    (its own 404, not a route's or a proxy's)."""
    return response.status_code == 404 and _NO_INSTANCES in response.text


def _events_of(response):
    try:
        return response.json().get('events', [])
    except ValueError:
        return []


def _key(conf):
    # id() alone could name a dead conf's cached client; the endpoint and
    # auth type make a reused id harmless.
    return (id(conf), conf.nova.auth_type, conf.nova.endpoint_override)
