"""Notifications while the notification broker is away or slow (RabbitMQ
behind a TCP proxy that can cut or hold every connection): the request
that sends one never waits for the broker (oslo.messaging's notifier
retries for ever by default), a notification counts as sent once the
broker took it, and while the broker is too slow the oldest waiting are
dropped, counted."""

import threading
import time
import uuid as uuidlib

import oslo_messaging as messaging
import pytest

from cyborg.common import context as cyborg_context
from cyborg.common import metrics
from cyborg.common import notify
from cyborg.conductor import arq_binding
from tests.fixtures import arqs as seed
from tests.fixtures import rabbit
from tests.fixtures import tcp_proxy
from tests.unit.conductor import test_notifications

CONDUCTOR = test_notifications.CONDUCTOR


def _value(name, **labels):
    return metrics.REGISTRY.get_sample_value(name, labels) or 0


def _published():
    return _value('cyborg_notifications_total', event_type='arq.create')


def _dropped(reason):
    return _value('cyborg_notifications_dropped_total', reason=reason)


def _timed(function, limit=20):
    """Seconds ``function()`` took, or None when it had not returned
    after ``limit`` seconds (it goes on, on a daemon thread)."""
    done = threading.Event()
    started = time.monotonic()

    def run():
        function()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return time.monotonic() - started if done.wait(limit) else None


@pytest.fixture
def broker(conf, db):
    """Notifications on, to a RabbitMQ virtual host of the test's own
    reached through a TCP proxy; yields (proxy, the host's own URL)."""
    with rabbit.throwaway_vhost() as url, \
            tcp_proxy.tcp_proxy(rabbit.RABBIT_PORT) as proxy:
        test_notifications._notifications_on(conf, url.replace(
            ':%d/' % rabbit.RABBIT_PORT, ':%d/' % proxy.port))
        try:
            yield proxy, url
        finally:
            proxy.release()
            notify.reset()


@pytest.fixture
def create(conf, db):
    ctx = cyborg_context.RequestContext(project_id='p1', is_service=True)
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    return lambda: arq_binding.create(ctx, profile, 'p1', conf=conf)


def _heartbeats():
    return sum(thread.name == 'Rabbit-heartbeat'
               for thread in threading.enumerate())


def test_a_reset_closes_the_notifiers_it_forgets(broker, create):
    """A notifier forgotten by ``notify.reset`` had its transport left
    open: its connection's heartbeat thread went on reconnecting to a
    broker the test had taken away, for the rest of the run (logging into
    other tests)."""
    before = _heartbeats()
    create()
    assert notify.flush(30)
    assert _heartbeats() > before
    notify.reset()
    assert _heartbeats() == before


def test_a_create_does_not_wait_for_an_away_broker(broker, create):
    proxy, _url = broker
    published = _published()
    not_published = _dropped('not_published')
    create()
    assert notify.flush(30)
    assert _published() == published + 1
    proxy.cut()
    took = _timed(create)
    assert took is not None and took < 2, (
        f'the create waited {took} s for the notification broker')
    # The notification is dropped after its bounded retries.
    assert notify.flush(60)
    assert _published() == published + 1
    assert _dropped('not_published') == not_published + 1


def test_a_notification_the_broker_refused_is_not_counted_as_sent(
        conf, broker, create):
    proxy, _url = broker
    conf.set_override('retry', 0, group='oslo_messaging_notifications')
    notify.reset()
    proxy.cut()
    published = _published()
    not_published = _dropped('not_published')
    create()
    assert notify.flush(60)
    assert _published() == published
    assert _dropped('not_published') == not_published + 1


def test_a_hung_broker_drops_the_oldest_waiting(conf, broker, monkeypatch):
    """The broker takes the connection and answers nothing: one publish
    hangs, the others wait, at most QUEUE_LIMIT of them (the newest)."""
    proxy, url = broker
    monkeypatch.setattr(notify, 'QUEUE_LIMIT', 5)
    transport = messaging.get_notification_transport(conf, url=url)
    consumer = test_notifications.Consumer(transport)
    queue_full = _dropped('queue_full')
    uuids = [str(uuidlib.uuid4()) for _ in range(12)]
    proxy.hold()
    try:
        took = _timed(lambda: [
            notify.send(conf, None, notify.ARQ_CREATE, {'uuid': uuid})
            for uuid in uuids])
        assert took is not None and took < 2, (
            f'12 notifications took {took} s to send to a hung broker')
        # One was taken by the sender thread (or not yet): 6 or 7 are
        # dropped, the oldest.
        dropped = _dropped('queue_full') - queue_full
        assert dropped in (6, 7)
        proxy.release()
        assert notify.flush(60)
        consumer.wait_for('arq.create', count=5, uuid=None, timeout=30)
        time.sleep(0.5)     # anything more would have arrived by now
    finally:
        consumer.stop()
        transport.cleanup()
    arrived = [test_notifications.data(n)['uuid'] for n in consumer.seen]
    # In order: the one taken before the queue filled, then the newest.
    assert arrived == [uuid for uuid in uuids if uuid in arrived]
    assert arrived[-5:] == uuids[-5:]
    assert len(arrived) == len(uuids) - dropped
