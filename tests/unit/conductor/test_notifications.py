"""Versioned notifications of the ARQ state machine and of FPGA
programming, read back by a real oslo.messaging notification listener:
on the in-process ``fake://`` transport, and once through RabbitMQ."""

import datetime
import json
import threading
import uuid as uuidlib

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import notify
from cyborg.conductor import arq_binding, programming
from cyborg.db import models
from cyborg.drivers import fake
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.fixtures import rabbit
from tests.fixtures import recording_http

HOST = 'fpga-host'
CONDUCTOR = 'conductor-1'
ARQ_KEYS = {'uuid', 'state', 'previous_state', 'reason',
            'device_profile_name', 'device_profile_group_id', 'project_id',
            'instance_uuid', 'hostname', 'device_rp_uuid', 'deployable_uuid',
            'attach_handle_type', 'attach_handle_uuid', 'attach_handle_info'}
PROGRAM_KEYS = {'host', 'deployable_uuid', 'deployable_name',
                'device_rp_uuid', 'image_uuid', 'function_id', 'arq_uuid',
                'duration', 'reason'}

placement_url = seed.placement_url
fake_nova = recording_http.fake_nova
glance = recording_http.fake_glance


class Consumer:
    """What an operator's automation reads from the ``notifications``
    topic: (priority, publisher, event type, payload) in arrival order.
    Each priority is a queue of its own (``notifications.info``,
    ``notifications.error``): arrival keeps the order within one, not
    between them; ``in_sent_order`` orders by the envelope's timestamp."""

    def __init__(self, transport):
        self.seen = []
        self.sent_at = []
        self._cond = threading.Condition()
        self._listener = messaging.get_notification_listener(
            transport, [messaging.Target(topic='notifications')], [self],
            executor='threading')
        self._listener.start()

    def _record(self, priority, publisher_id, event_type, payload,
                metadata):
        with self._cond:
            self.seen.append((priority, publisher_id, event_type, payload))
            self.sent_at.append(
                datetime.datetime.fromisoformat(metadata['timestamp']))
            self._cond.notify_all()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self._record('info', publisher_id, event_type, payload, metadata)

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        self._record('error', publisher_id, event_type, payload, metadata)

    def in_sent_order(self):
        """Every notification so far, in the order the notifier published
        them (one sender thread: their envelope's timestamps), each with
        its timestamp: (timestamp, notification)."""
        with self._cond:
            return sorted(zip(self.sent_at, self.seen), key=lambda n: n[0])

    def wait_for(self, event_type, count=1, timeout=15, uuid=None):
        """Every notification so far, once ``count`` of ``event_type``
        (about ARQ ``uuid`` when given) have arrived."""
        def arrived():
            return len([p for p in self.of(event_type)
                        if uuid in (None, p.get('uuid'))]) >= count

        with self._cond:
            assert self._cond.wait_for(arrived, timeout), \
                f'{event_type} x{count} not received; saw {self.types()}'
            return list(self.seen)

    def of(self, event_type):
        return [data(n) for n in self.seen if n[2] == event_type]

    def types(self):
        return [n[2] for n in self.seen]

    def stop(self):
        """Stop listening once in-flight deliveries are recorded."""
        self._listener.stop()
        self._listener.wait()


def data(notification):
    """The payload's data, after checking the versioned envelope."""
    payload = notification[3]
    assert payload['cyborg_object.namespace'] == 'cyborg'
    assert payload['cyborg_object.version'] == '1.0'
    assert payload['cyborg_object.name'] in ('ARQPayload', 'ProgramPayload')
    return payload['cyborg_object.data']


def _notifications_on(conf, url):
    # Making a notification transport registers the
    # [oslo_messaging_notifications] options on this ConfigOpts.
    messaging.get_notification_transport(conf, url='fake://').cleanup()
    api_fixture._register_messaging_opts(conf)
    conf.set_override('host', CONDUCTOR)
    conf.set_override('driver', ['messagingv2'],
                      group='oslo_messaging_notifications')
    conf.set_override('transport_url', url,
                      group='oslo_messaging_notifications')
    notify.reset()


@pytest.fixture
def nconf(conf, db, placement_url, fake_nova, glance, tmp_path):
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    conf.set_override('auth_type', 'none', group='glance')
    conf.set_override('endpoint_override', glance.url, group='glance')
    conf.set_override('state_path', str(tmp_path))
    placement_client.reset_clients()
    _notifications_on(conf, 'fake://')
    yield conf
    notify.reset()


@pytest.fixture
def consumer(nconf):
    # The notifier's own fake:// transport: an in-memory exchange is
    # private to its transport.
    notifier = notify.get_notifier(nconf, 'conductor', CONDUCTOR)
    consumer = Consumer(notifier.transport)
    yield consumer
    consumer.stop()


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', user_id='u1',
                                         is_service=True)


@pytest.fixture
def device(db):
    return seed.seed_device(db, hostname=HOST, handles=2)


def _create(nconf, db, ctx, groups=({'resources:FPGA': '1'},), name=None):
    profile = seed.seed_profile(db, list(groups), name=name)
    return [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1',
                                                  conf=nconf)]


def _binding(device, instance=None):
    return {'hostname': device.hostname, 'device_rp_uuid': device.rp_uuid,
            'instance_uuid': instance or str(uuidlib.uuid4())}


def _bind(nconf, ctx, bindings):
    arq_binding.start_bind(nconf, ctx, bindings).result(60)


def _sentinel(nconf, db, ctx, consumer):
    """Send one known notification and return everything received up to
    it: what a refused request would have sent is in there too."""
    uuid, = _create(nconf, db, ctx, name='sentinel')
    consumer.wait_for('arq.create', uuid=uuid)
    consumer.stop()
    return [n for n in consumer.seen if data(n).get('uuid') != uuid]


# -- ARQs -------------------------------------------------------------------

def test_create_sends_one_per_arq_after_the_commit(nconf, db, ctx,
                                                   consumer):
    groups = [{'resources:FPGA': '2'}, {'resources:CUSTOM_A': '1'}]
    uuids = _create(nconf, db, ctx, groups, name='dp-two')
    seen = consumer.wait_for('arq.create', 3)
    assert [(n[0], n[1], n[2]) for n in seen] == [
        ('info', f'cyborg-conductor:{CONDUCTOR}', 'arq.create')] * 3
    payloads = consumer.of('arq.create')
    assert [p['uuid'] for p in payloads] == uuids
    assert {p['cyborg_object.name'] for _, _, _, p in seen} == {'ARQPayload'}
    for payload in payloads:
        assert set(payload) == ARQ_KEYS
        assert payload['state'] == 'Initial'
        assert payload['device_profile_name'] == 'dp-two'
        assert payload['project_id'] == 'p1'
        assert payload['hostname'] is None
    assert [p['device_profile_group_id'] for p in payloads] == [0, 0, 1]
    # Committed before it was announced.
    assert set(seed.arq_rows(db)) == set(uuids)


def test_create_of_unknown_profile_sends_nothing(nconf, db, ctx, consumer):
    with pytest.raises(exception.DeviceProfileNotFound):
        arq_binding.create(ctx, str(uuidlib.uuid4()), 'p1', conf=nconf)
    assert _sentinel(nconf, db, ctx, consumer) == []


def test_bind_end_carries_the_binding_and_handle(nconf, db, ctx, device,
                                                 consumer):
    uuid, = _create(nconf, db, ctx, name='dp-bind')
    binding = _binding(device)
    _bind(nconf, ctx, {uuid: binding})
    consumer.wait_for('arq.bind.end')
    bound, = consumer.of('arq.bind.end')
    row = seed.arq_rows(db)[uuid]
    with db.connect() as c:
        handle = c.execute(sa.select(models.AttachHandle.__table__).where(
            models.AttachHandle.id == row.attach_handle_id)).one()
    assert bound == {
        'uuid': uuid, 'state': 'Bound', 'previous_state': 'BindStarted',
        'reason': None, 'device_profile_name': 'dp-bind',
        'device_profile_group_id': 0, 'project_id': 'p1',
        'instance_uuid': binding['instance_uuid'], 'hostname': HOST,
        'device_rp_uuid': device.rp_uuid,
        'deployable_uuid': device.deployable_uuid,
        'attach_handle_type': 'PCI', 'attach_handle_uuid': handle.uuid,
        'attach_handle_info': json.loads(handle.attach_info)}
    assert bound['attach_handle_info']['bus'] == '0c'


def test_refused_bind_sends_nothing(nconf, db, ctx, device, consumer):
    uuid, = _create(nconf, db, ctx)
    consumer.wait_for('arq.create')
    with pytest.raises(exception.BindFailed):
        arq_binding.start_bind(nconf, ctx, {uuid: dict(
            _binding(device), hostname='elsewhere')})
    assert [n[2] for n in _sentinel(nconf, db, ctx, consumer)] == [
        'arq.create']


def test_no_free_handle_is_refused_and_sends_nothing(nconf, db, ctx,
                                                     consumer):
    """A bind with nothing slow to do that finds no free handle refuses
    the PATCH: no arq.bind.* (the ARQ never left Initial)."""
    full = seed.seed_device(db, hostname=HOST, handles=0)
    uuid, = _create(nconf, db, ctx)
    consumer.wait_for('arq.create')
    with pytest.raises(exception.BindFailed, match='no free attach handle'):
        arq_binding.start_bind(nconf, ctx, {uuid: _binding(full)})
    assert seed.arq_rows(db)[uuid].state == 'Initial'
    assert [n[2] for n in _sentinel(nconf, db, ctx, consumer)] == [
        'arq.create']


def test_failed_bind_sends_an_error_with_the_reason(nconf, db, ctx,
                                                    consumer):
    """A bind failing in the background: one that programs the card
    (answered 202) finds no image for its function in Glance."""
    full = seed.seed_device(db, hostname=HOST, handles=1)
    uuid, = _create(nconf, db, ctx, [{'resources:FPGA': '1',
                                      'accel:function_id': 'f1'}])
    binding = _binding(full)
    _bind(nconf, ctx, {uuid: binding})
    seen = consumer.wait_for('arq.bind.error')
    priority, _, _, _ = [n for n in seen if n[2] == 'arq.bind.error'][0]
    failed, = consumer.of('arq.bind.error')
    assert priority == 'error'
    assert failed['state'] == 'BindFailed'
    assert '0 images in Glance have function id f1' in failed['reason']
    assert failed['reason'] == seed.arq_rows(db)[uuid].bind_failure_reason
    assert (failed['hostname'], failed['instance_uuid'],
            failed['deployable_uuid']) == (
        HOST, binding['instance_uuid'], full.deployable_uuid)
    assert failed['attach_handle_type'] is None
    assert 'arq.bind.end' not in consumer.types()


def test_stuck_bind_failure_reads_the_binding_back(nconf, db, ctx, device,
                                                   consumer):
    uuid, = _create(nconf, db, ctx, name='dp-stuck')
    instance = str(uuidlib.uuid4())
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == uuid).values(
            state='BindStarted', hostname=HOST,
            device_rp_uuid=device.rp_uuid, instance_uuid=instance,
            deployable_id=device.deployable_id,
            bind_started_at=datetime.datetime(2000, 1, 1)))
    assert arq_binding.fail_stuck(nconf, ctx) == 1
    consumer.wait_for('arq.bind.error')
    failed, = consumer.of('arq.bind.error')
    assert 'did not finish' in failed['reason']
    assert (failed['device_profile_name'], failed['instance_uuid'],
            failed['deployable_uuid'], failed['device_rp_uuid']) == (
        'dp-stuck', instance, device.deployable_uuid, device.rp_uuid)


def test_unbind_and_delete_carry_what_was_bound(nconf, db, ctx, device,
                                                consumer):
    first, second = _create(nconf, db, ctx, [{'resources:FPGA': '2'}])
    instance = str(uuidlib.uuid4())
    _bind(nconf, ctx, {first: _binding(device, instance),
                       second: _binding(device, instance)})
    consumer.wait_for('arq.bind.end', 2)
    arq_binding.unbind(nconf, ctx, [first])
    consumer.wait_for('arq.unbind')
    unbound, = consumer.of('arq.unbind')
    assert (unbound['uuid'], unbound['state'], unbound['previous_state'],
            unbound['instance_uuid'], unbound['hostname'],
            unbound['attach_handle_type']) == (
        first, 'Unbound', 'Bound', instance, HOST, 'PCI')
    arq_binding.delete(nconf, ctx, instance_uuid=instance)
    consumer.wait_for('arq.delete')
    deleted, = consumer.of('arq.delete')
    assert (deleted['uuid'], deleted['state'], deleted['previous_state'],
            deleted['deployable_uuid']) == (
        second, 'Deleting', 'Bound', device.deployable_uuid)
    assert seed.arq_rows(db) == {first: seed.arq_rows(db)[first]}
    # Unbinding an unbound ARQ changes nothing, and says nothing.
    arq_binding.unbind(nconf, ctx, [first])
    assert [n[2] for n in _sentinel(nconf, db, ctx, consumer)].count(
        'arq.unbind') == 1


def test_notifications_off_sends_and_counts_nothing(conf, db, ctx, device,
                                                    placement_url):
    placement_fixture.placement_conf(conf, placement_url)
    placement_client.reset_clients()
    notify.reset()
    before = metrics.REGISTRY.get_sample_value(
        'cyborg_notifications_total', {'event_type': 'arq.create'}) or 0
    uuid, = _create(conf, db, ctx)
    _bind(conf, ctx, {uuid: _binding(device)})
    arq_binding.delete(conf, ctx, [uuid])
    assert not notify.enabled(conf)
    assert (metrics.REGISTRY.get_sample_value(
        'cyborg_notifications_total', {'event_type': 'arq.create'})
        or 0) == before
    assert seed.arq_rows(db) == {}


# -- FPGA programming --------------------------------------------------------

@pytest.fixture
def agent(nconf):
    driver = fake.FakeDriver(nconf, HOST)
    with seed.agent_endpoint(nconf, HOST, {'fake_driver': driver}):
        yield driver


@pytest.fixture
def fpga(nconf, db):
    device = seed.seed_device(db, hostname=HOST, handles=2)
    client = placement_client.get_client(nconf)
    client.create_provider(device.rp_uuid, device.name, None)
    client.set_inventories(device.rp_uuid,
                           {'FPGA': {'total': 2, 'max_unit': 2}})
    return device


def test_programming_at_bind_sends_start_and_end(nconf, db, ctx, agent,
                                                 fpga, glance, consumer):
    image = glance.add_image(b'\x00bits' * 100, {'accel:function_id': 'f1'})
    uuid, = _create(nconf, db, ctx, [{'resources:FPGA': '1',
                                      'accel:function_id': 'f1'}])
    _bind(nconf, ctx, {uuid: _binding(fpga)})
    consumer.wait_for('arq.bind.end')
    assert [t for t in consumer.types() if t != 'arq.create'] == [
        'deployable.program.start', 'deployable.program.end',
        'arq.bind.end']
    start, = consumer.of('deployable.program.start')
    end, = consumer.of('deployable.program.end')
    assert set(start) == set(end) == PROGRAM_KEYS
    assert start == dict(end, duration=None)
    assert (end['host'], end['deployable_uuid'], end['deployable_name'],
            end['device_rp_uuid'], end['image_uuid'], end['function_id'],
            end['arq_uuid'], end['reason']) == (
        HOST, fpga.deployable_uuid, fpga.name, fpga.rp_uuid, image, 'f1',
        uuid, None)
    assert 0 <= end['duration'] < 60


def test_failed_programming_sends_an_error(nconf, db, ctx, agent, fpga,
                                           glance, consumer):
    image = glance.add_image(b'payload' * 50, corrupt=True)
    uuid, = _create(nconf, db, ctx, [{'resources:FPGA': '1',
                                      'accel:bitstream_id': image}])
    _bind(nconf, ctx, {uuid: _binding(fpga)})
    # The download failed: the programming's start is sent then, just
    # before its error, and may arrive after it and after the bind's
    # error (another queue).  Each was published once, in this order.
    consumer.wait_for('arq.bind.error')
    consumer.wait_for('deployable.program.start')
    sent = [(at, n[0], n[2]) for at, n in consumer.in_sent_order()
            if n[2] != 'arq.create']
    assert [(priority, event) for _at, priority, event in sent] == [
        ('info', 'deployable.program.start'),
        ('error', 'deployable.program.error'),
        ('error', 'arq.bind.error')]
    assert sent[0][0] <= sent[1][0] <= sent[2][0]
    error, = consumer.of('deployable.program.error')
    assert 'sha512 check' in error['reason']
    assert (error['arq_uuid'], error['image_uuid']) == (uuid, image)
    assert error['duration'] >= 0


def test_admin_programming_of_a_loaded_image_sends_nothing(
        nconf, db, ctx, agent, fpga, glance, consumer):
    image = glance.add_image(b'admin' * 20)
    programming.program_deployable(nconf, ctx, fpga.deployable_uuid, image)
    consumer.wait_for('deployable.program.end')
    end, = consumer.of('deployable.program.end')
    assert (end['arq_uuid'], end['image_uuid']) == (None, image)
    # Loaded already: nothing happens, nothing is announced.
    programming.program_deployable(nconf, ctx, fpga.deployable_uuid, image)
    assert [n[2] for n in _sentinel(nconf, db, ctx, consumer)] == [
        'deployable.program.start', 'deployable.program.end']


# -- through RabbitMQ ---------------------------------------------------------

def test_arq_create_reaches_a_rabbitmq_consumer(conf, db, ctx):
    with rabbit.throwaway_vhost() as url:
        _notifications_on(conf, url)
        transport = messaging.get_notification_transport(conf)
        consumer = Consumer(transport)
        try:
            uuid, = _create(conf, db, ctx, name='dp-rabbit')
            consumer.wait_for('arq.create', timeout=30)
        finally:
            consumer.stop()
            transport.cleanup()
            notifier = notify.get_notifier(conf, 'conductor', CONDUCTOR)
            notifier.transport.cleanup()
            notify.reset()
    (priority, publisher, event_type, payload), = consumer.seen
    assert (priority, publisher, event_type) == (
        'info', f'cyborg-conductor:{CONDUCTOR}', 'arq.create')
    assert payload['cyborg_object.name'] == 'ARQPayload'
    assert (data(consumer.seen[0])['uuid'],
            data(consumer.seen[0])['device_profile_name']) == (
        uuid, 'dp-rabbit')
