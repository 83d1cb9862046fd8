"""Event delivery to a recording Nova endpoint: retries, 207s, a Nova that
is down, the periodic re-send, the re-send of a restarted conductor, and
events that no longer say how their ARQ's bind ended (the ARQ deleted or
changed since) dropped.  Events are recorded for real ARQ rows."""

import datetime
import threading
import time
import uuid as uuidlib

import pytest
import sqlalchemy as sa
from keystoneauth1 import loading as ks_loading
from oslo_utils import timeutils

from cyborg.conductor import nova
from cyborg.conductor import periodics
from cyborg.db import api as db_api
from cyborg.db import models
from tests.fixtures import arqs as seed
from tests.fixtures import processes
from tests.fixtures import recording_http


fake_nova = recording_http.fake_nova


@pytest.fixture
def nconf(conf, db, fake_nova):
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    conf.set_override('nova_event_retry_interval', 1, group='conductor')
    return conf


_STATE = {'completed': 'Bound', 'failed': 'BindFailed'}


def _arq(db, instance_uuid, state):
    """An ARQ row in ``state`` for ``instance_uuid``; its uuid."""
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    arq_uuid = str(uuidlib.uuid4())
    with db.begin() as c:
        profile_id = c.scalar(sa.select(models.DeviceProfile.id).where(
            models.DeviceProfile.uuid == profile))
        c.execute(sa.insert(models.ExtARQ.__table__).values(
            uuid=arq_uuid, state=state, device_profile_id=profile_id,
            device_profile_group_id=0, project_id='p1',
            instance_uuid=instance_uuid, hostname='host1'))
    return arq_uuid


def _record(conf, ctx, count=2, due_at=None, status='completed',
            events=None, db=None):
    """Record ``events``, or ``count`` events of new ARQs in the state
    ``status`` reports."""
    batch = str(uuidlib.uuid4())
    if events is None:
        events = []
        for _ in range(count):
            instance = str(uuidlib.uuid4())
            events.append((instance, _arq(db, instance, _STATE[status]),
                           status))
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
    batch, events = _record(nconf, admin_context, db=db, count=3)
    assert nova.deliver_batch(nconf, admin_context, batch)
    posts = fake_nova.event_posts()
    assert len(posts) == 1
    assert posts[0].json() == nova.payload(events)
    assert posts[0].headers['OpenStack-API-Version'] == 'compute 2.82'
    assert _pending(db) == []


def test_credentials_named_by_auth_section_send_events(conf, db,
                                                      admin_context,
                                                      fake_nova):
    """``[nova] auth_section`` names the group holding the credentials
    (keystoneauth reads the plugin from there): events were off, nothing
    recorded or sent, because only ``[nova] auth_type`` was looked at."""
    ks_loading.register_auth_conf_options(conf, 'nova_credentials')
    conf.set_override('auth_type', 'none', group='nova_credentials')
    conf.set_override('auth_section', 'nova_credentials', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    assert nova.enabled(conf)
    batch, events = _record(conf, admin_context, db=db, count=1)
    assert nova.deliver_batch(conf, admin_context, batch)
    assert [post.json() for post in fake_nova.event_posts()] == [
        nova.payload(events)]


def test_recorded_batch_goes_without_being_read_back(nconf, db,
                                                     admin_context,
                                                     fake_nova):
    """A PATCH whose binds all ended in its transaction: the events it
    recorded are sent as they are, with one statement to forget them."""
    batch, events = _record(nconf, admin_context, db=db, count=2)
    other, _ = _record(nconf, admin_context, db=db, count=1)
    statements = []
    engine = db_api.get_engine()
    caller = threading.get_ident()

    def count(conn, cursor, statement, *args):
        # This thread's only (an earlier test's bind may still be sending
        # its events), SQLite's write lock left out.
        if threading.get_ident() == caller and 'WHERE 0' not in statement:
            statements.append(statement.split()[0].upper())

    sa.event.listen(engine, 'before_cursor_execute', count)
    try:
        assert nova.deliver_recorded(nconf, admin_context, batch, events)
    finally:
        sa.event.remove(engine, 'before_cursor_execute', count)
    assert statements == ['DELETE']
    assert [p.json() for p in fake_nova.event_posts()] == [
        nova.payload(events)]
    # Only that batch is forgotten.
    assert {r.batch_id for r in _pending(db)} == {other}


def test_recorded_batch_nova_refused_is_left_to_the_periodic(
        nconf, db, admin_context, fake_nova):
    fake_nova.statuses = [502, 502, 502]
    batch, events = _record(nconf, admin_context, db=db, count=2)
    assert not nova.deliver_recorded(nconf, admin_context, batch, events)
    rows = _pending(db)
    assert len(rows) == 2
    assert {r.attempts for r in rows} == {1}
    with db.begin() as c:
        c.execute(sa.update(models.NovaEvent).values(
            next_attempt_at=timeutils.utcnow()))
    nova.resend_due(nconf, admin_context)
    assert sorted(e['tag'] for e in fake_nova.events[-2:]) == sorted(
        e[1] for e in events)
    assert _pending(db) == []


def test_5xx_is_retried_with_backoff(nconf, db, admin_context, fake_nova):
    fake_nova.statuses = [500, 503]
    batch, _ = _record(nconf, admin_context, db=db)
    assert nova.deliver_batch(nconf, admin_context, batch)
    assert len(fake_nova.event_posts()) == 3
    assert len(fake_nova.events) == 2
    assert _pending(db) == []


def test_207_with_every_instance_gone_is_delivered(nconf, db, admin_context,
                                                   fake_nova):
    fake_nova.statuses = [207]
    batch, _ = _record(nconf, admin_context, db=db)
    assert nova.deliver_batch(nconf, admin_context, batch)
    assert len(fake_nova.event_posts()) == 1
    assert _pending(db) == []


def test_nova_down_keeps_events_until_the_periodic_delivers(
        nconf, db, admin_context, fake_nova):
    fake_nova.statuses = [502, 502, 502]
    batch, events = _record(nconf, admin_context, db=db)
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


def test_a_nova_that_does_not_answer_keeps_events(nconf, db, admin_context,
                                                 fake_nova):
    """Nova takes the request and answers nothing: each try gives up
    after ``[nova]timeout`` and the events wait for the periodic, instead
    of the sending thread waiting forever (keystoneauth's default)."""
    nconf.set_override('timeout', 0.3, group='nova')
    fake_nova.delay = 60
    batch, _ = _record(nconf, admin_context, db=db, count=1)
    started = time.monotonic()
    try:
        assert not nova.deliver_batch(nconf, admin_context, batch)
    finally:
        fake_nova.release()
    # Three tries of 0.3 s with 0.5 and 1 s between them.
    assert time.monotonic() - started < 10
    assert len(fake_nova.event_posts()) == 3
    assert len(_pending(db)) == 1


def test_unreachable_nova_keeps_events(conf, db, admin_context):
    with processes.refused_url() as url:
        conf.set_override('auth_type', 'none', group='nova')
        conf.set_override('endpoint_override', url, group='nova')
        batch, _ = _record(conf, admin_context, db=db, count=1)
        assert not nova.deliver_batch(conf, admin_context, batch)
    assert len(_pending(db)) == 1


def test_recorded_events_become_due_for_the_periodic(nconf, db,
                                                     admin_context,
                                                     fake_nova):
    """A conductor killed between commit and POST: the periodic sends."""
    _record(nconf, admin_context, db=db,
            due_at=timeutils.utcnow() - datetime.timedelta(seconds=1))
    nova.resend_due(nconf, admin_context)
    assert len(fake_nova.event_posts()) == 1
    assert len(fake_nova.events) == 2
    assert _pending(db) == []


def test_nothing_recorded_or_sent_without_nova(conf, db, admin_context):
    assert not nova.enabled(conf)
    batch, _ = _record(conf, admin_context, db=db)
    assert _pending(db) == []
    assert nova.deliver_batch(conf, admin_context, batch)
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('send_events', False, group='nova')
    assert not nova.enabled(conf)


def _delete_arqs(db, uuids):
    with db.begin() as c:
        c.execute(sa.delete(models.ExtARQ).where(
            models.ExtARQ.uuid.in_(uuids)))


def test_resent_event_of_a_deleted_arq_is_dropped(nconf, db, admin_context,
                                                  fake_nova):
    """The process died between Nova's answer and the row's delete; by the
    re-send the instance was deleted, and its ARQ with it."""
    batch, events = _record(nconf, admin_context, db=db, count=2,
                            due_at=timeutils.utcnow())
    _delete_arqs(db, [events[0][1]])
    nova.resend_due(nconf, admin_context)
    assert [e['tag'] for e in fake_nova.events] == [events[1][1]]
    assert _pending(db) == []

    # All of a batch's ARQs gone: nothing is sent, the rows go.
    batch, events = _record(nconf, admin_context, db=db, count=2)
    _delete_arqs(db, [e[1] for e in events])
    assert nova.deliver_batch(nconf, admin_context, batch)
    assert len(fake_nova.event_posts()) == 1
    assert _pending(db) == []


def test_event_of_a_binding_undone_since_is_dropped(nconf, db,
                                                    admin_context,
                                                    fake_nova):
    instance = str(uuidlib.uuid4())
    unbound = _arq(db, None, 'Unbound')
    rebound = _arq(db, str(uuidlib.uuid4()), 'Bound')
    failed_now = _arq(db, instance, 'BindFailed')
    kept = _arq(db, instance, 'Bound')
    batch, _ = _record(nconf, admin_context, events=[
        (instance, unbound, 'completed'), (instance, rebound, 'completed'),
        (instance, failed_now, 'completed'), (instance, kept, 'completed')])
    assert nova.deliver_batch(nconf, admin_context, batch)
    assert fake_nova.events == [{
        'name': 'accelerator-request-bound', 'server_uuid': instance,
        'tag': kept, 'status': 'completed'}]
    assert _pending(db) == []


def test_the_same_event_recorded_twice_goes_once(nconf, db, admin_context,
                                                 fake_nova):
    instance = str(uuidlib.uuid4())
    failed = _arq(db, instance, 'BindFailed')
    event = (instance, failed, 'failed')
    batch, _ = _record(nconf, admin_context, events=[event, event])
    assert nova.deliver_batch(nconf, admin_context, batch)
    assert [e['tag'] for e in fake_nova.events] == [failed]
    assert _pending(db) == []


def test_restarted_conductor_resends_its_own_events_at_once(
        nconf, db, admin_context, fake_nova):
    """Events its previous run recorded (due only minutes later) go at
    start-up; another conductor's, and this run's, wait their turn."""
    nconf.set_override('host', 'conductor-b')
    _b, theirs = _record(nconf, admin_context, db=db, count=1)
    nconf.set_override('host', 'conductor-a')
    _old, before = _record(nconf, admin_context, db=db, count=2)
    _new, since = _record(nconf, admin_context, db=db, count=1)
    started_at = timeutils.utcnow().replace(
        microsecond=0) + datetime.timedelta(seconds=1)
    # The second batch was recorded by this run, after it started.
    with db.begin() as c:
        c.execute(sa.update(models.NovaEvent).where(
            models.NovaEvent.batch_id == _new).values(
            created_at=started_at + datetime.timedelta(seconds=1)))
    nova.resend_owned(nconf, admin_context, started_at)
    assert len(fake_nova.event_posts()) == 1
    assert sorted(e['tag'] for e in fake_nova.events) == sorted(
        e[1] for e in before)
    assert {r.arq_uuid for r in _pending(db)} == {theirs[0][1], since[0][1]}
    assert {r.owner for r in _pending(db)} == {'conductor-a', 'conductor-b'}


def test_a_restart_resends_what_its_previous_run_left_that_second(
        nconf, db, admin_context, fake_nova):
    """The conductor's start-up job gets its start time to the
    microsecond, as every database keeps them: cut to whole seconds, it
    took events the previous run recorded earlier in the same second
    for this run's, and left them waiting for their due time."""
    _old, before = _record(nconf, admin_context, db=db, count=1)
    started_at = (timeutils.utcnow() + datetime.timedelta(seconds=2)
                  ).replace(microsecond=800000)
    with db.begin() as c:
        c.execute(sa.update(models.NovaEvent).values(
            created_at=started_at - datetime.timedelta(seconds=0.5)))
    job = periodics.AtStart(nconf, 'recover_binds',
                            'cyborg.conductor.nova:resend_owned',
                            started_at)
    job.start()
    job._thread.join(60)
    assert not job._thread.is_alive()
    assert [e['tag'] for e in fake_nova.events] == [before[0][1]]
    assert _pending(db) == []


def test_only_nova_s_own_404_drops_the_events(nconf, db, admin_context,
                                              fake_nova):
    """Nova answers 404 "No instances found for any event" when none of
    the instances exists: nobody waits, the events are done.  Any other
    404 (an endpoint missing its /v2.1, a proxy's) was taken for that
    answer and the events dropped for good; they are kept now."""
    fake_nova.statuses = [(404, {}, {'itemNotFound': {
        'code': 404, 'message': 'The resource could not be found.'}})]
    batch, events = _record(nconf, admin_context, db=db)
    assert not nova.deliver_batch(nconf, admin_context, batch)
    assert len(_pending(db)) == 2
    fake_nova.statuses = [(404, {}, {'itemNotFound': {
        'code': 404, 'message': 'No instances found for any event'}})]
    # The periodic's try (Nova is taken for away after the first).
    assert nova.deliver_batch(nconf, admin_context, batch, probe=True)
    assert _pending(db) == []


@pytest.mark.parametrize('status', [408, 413, 429])
def test_a_refusal_to_try_later_keeps_the_events(nconf, db, admin_context,
                                                 fake_nova, status):
    fake_nova.statuses = [(status, {}, {'error': 'later'})]
    batch, _ = _record(nconf, admin_context, db=db, count=1)
    assert not nova.deliver_batch(nconf, admin_context, batch)
    assert len(_pending(db)) == 1


def test_a_large_batch_goes_in_requests_nova_takes(nconf, db, admin_context,
                                                   fake_nova):
    """A restarted conductor fails up to a thousand binds it left in one
    batch: one POST of them all was over Nova's body size limit (a 413,
    and every event dropped)."""
    count = nova.MAX_EVENTS_PER_POST + 5
    batch, events = _record(nconf, admin_context, db=db, count=count)
    assert nova.deliver_batch(nconf, admin_context, batch)
    assert [len(p.json()['events']) for p in fake_nova.event_posts()] == [
        nova.MAX_EVENTS_PER_POST, 5]
    assert len(fake_nova.events) == count
    assert _pending(db) == []


def test_keystone_refusing_our_credentials_keeps_the_events(
        conf, db, admin_context):
    """Keystone answers 401 to the [nova] credentials (a wrong password):
    keystoneauth raises an HttpError, which escaped the send (a traceback,
    the batch neither postponed nor counted)."""
    keystone = recording_http.RecordingServer(lambda request: (
        401, {}, {'error': {'code': 401, 'title': 'Unauthorized',
                            'message': 'The request you have made requires '
                                       'authentication.'}}))
    with keystone:
        conf.register_opts(
            ks_loading.get_auth_plugin_conf_options('v3password'),
            group='nova')
        conf.set_override('auth_type', 'v3password', group='nova')
        conf.set_override('auth_url', keystone.url + '/v3', group='nova')
        conf.set_override('username', 'cyborg', group='nova')
        conf.set_override('password', 'wrong', group='nova')
        conf.set_override('user_domain_name', 'Default', group='nova')
        conf.set_override('project_name', 'service', group='nova')
        conf.set_override('project_domain_name', 'Default', group='nova')
        batch, _ = _record(conf, admin_context, db=db, count=1)
        assert not nova.deliver_batch(conf, admin_context, batch)
    rows = _pending(db)
    assert len(rows) == 1 and rows[0].attempts == 1


def test_a_slow_delivery_is_not_sent_again_by_another_periodic(
        nconf, db, admin_context, fake_nova):
    """A periodic re-send claims a due batch by pushing its next attempt
    forward: by the retry interval only, shorter than a delivery to a
    slow Nova may take, so another conductor's periodic (here: the next
    run) sent the same batch again while the first still waited."""
    nconf.set_override('timeout', 3, group='nova')
    batch, _ = _record(nconf, admin_context, db=db, count=1,
                       due_at=timeutils.utcnow())
    fake_nova.delay = 2
    first = threading.Thread(target=nova.resend_due,
                             args=(nconf, admin_context))
    first.start()
    try:
        fake_nova.wait_for(lambda requests: len(requests) >= 1)
        time.sleep(1.3)     # past the 1 s retry interval
        nova.resend_due(nconf, admin_context)
    finally:
        fake_nova.release()
        first.join(30)
    assert len(fake_nova.event_posts()) == 1
    assert _pending(db) == []
