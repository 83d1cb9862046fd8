"""Versioned notifications, sent over oslo.messaging's notifier.

Operators' automation (and Ceilometer-style consumers) read them from the
notification topics configured in ``[oslo_messaging_notifications]``
(``driver = messagingv2``, ``topics``, ``transport_url``); with no driver
configured, or only ``noop``, nothing is sent and nothing is built.  A
``driver`` no installed notification driver has (``driver_problem``)
and a ``transport_url`` of their own that cannot work
(``check_transport_url``) are configuration errors at start (through
``cyborg.common.service``), not notifications silently off or a failure
at the first one.

Format: like the other OpenStack services' versioned notifications, the
payload is a versioned object primitive::

    {'cyborg_object.name': 'DeviceHealthPayload',
     'cyborg_object.namespace': 'cyborg',
     'cyborg_object.version': '1.0',
     'cyborg_object.data': {...}}

with event types ``<object>.<action>[.<phase>]`` listed below, one home for
each.  The publisher id is ``cyborg-<process>:<host>``.

Notifications about database changes go out AFTER the transaction commits
(``Outbox``): a notification never announces a change that was rolled
back.  They are best effort: a conductor killed between the commit and the
send loses them, which is why the state they announce is always readable
from the API as well.

Best effort also means that they never hold up the request that makes
them: ``send`` queues the notification for one sender thread of the
process, which publishes them in order.  A broker that is away is tried
``[oslo_messaging_notifications]retry`` times per notification
(``PUBLISH_RETRIES`` where that option asks for endless tries, its
default), then the notification is dropped; while the broker is slow or
away at most ``QUEUE_LIMIT`` wait, the oldest dropped beyond that.
``cyborg_notifications_total`` counts those the broker took,
``cyborg_notifications_dropped_total`` the others.  A process that exits
waits up to ``EXIT_WAIT`` seconds for the queue (``flush``): a service
when it stops (``cyborg.common.service``, whose exit skips atexit), any
other process at exit.
"""

import atexit
import collections
import importlib.metadata
import os
import threading

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_log import log as logging
from oslo_messaging import transport as messaging_transport
from oslo_serialization import jsonutils

from cyborg.common import metrics
from cyborg.common import rpc

LOG = logging.getLogger(__name__)

NAMESPACE = 'cyborg'

# Notifications waiting for the sender thread, at most.
QUEUE_LIMIT = 1000
# Reconnections to an away broker one notification gets, where
# [oslo_messaging_notifications]retry is -1 (for ever, oslo.messaging's
# default: one publish would then hold up every later one for as long as
# the broker is away).
PUBLISH_RETRIES = 2
# Seconds an exiting process waits for the notifications still queued.
EXIT_WAIT = 5.0
# Seconds ``reset`` waits for them.
RESET_WAIT = 10.0

# -- event types: (event type, payload name, payload version) -------------
DEVICE_ADD = ('device.add', 'DevicePayload', '1.0')
DEVICE_REMOVE = ('device.remove', 'DevicePayload', '1.0')
DEVICE_HEALTH_CHANGE = ('device.health_change', 'DeviceHealthPayload', '1.0')
DEVICE_STATUS_CHANGE = ('device.status_change', 'DevicePayload', '1.0')
# DeviceMetricsPayload 1.1: temperature_celsius, power_watts, clock_events.
DEVICE_METRICS = ('device.metrics', 'DeviceMetricsPayload', '1.1')
ARQ_CREATE = ('arq.create', 'ARQPayload', '1.0')
ARQ_BIND_END = ('arq.bind.end', 'ARQPayload', '1.0')
ARQ_BIND_ERROR = ('arq.bind.error', 'ARQPayload', '1.0')
ARQ_UNBIND = ('arq.unbind', 'ARQPayload', '1.0')
ARQ_DELETE = ('arq.delete', 'ARQPayload', '1.0')
PROGRAM_START = ('deployable.program.start', 'ProgramPayload', '1.0')
PROGRAM_END = ('deployable.program.end', 'ProgramPayload', '1.0')
PROGRAM_ERROR = ('deployable.program.error', 'ProgramPayload', '1.0')

INFO = 'info'
WARN = 'warn'
ERROR = 'error'
SAMPLE = 'sample'        # telemetry: usage figures, not state changes

# oslo.messaging's group of notification options, and the driver of it
# that sends nothing.
GROUP = 'oslo_messaging_notifications'
NOOP_DRIVER = 'noop'
# Where oslo.messaging's notifier finds its drivers (stevedore's
# namespace of entry points): the names ``driver`` may give.
DRIVER_NAMESPACE = 'oslo.messaging.notify.drivers'

_NOTIFIERS = {}
_LOCK = threading.Lock()


# Set by the sending thread's publish when the broker did not take it.
_LOCAL = threading.local()


class _Transport(messaging_transport.NotificationTransport):
    """A notification transport that tells the sender whether the broker
    took each message: oslo.messaging's messaging drivers log a publish
    that failed and return as if it had gone."""

    def __init__(self, transport):
        super().__init__(transport._driver)

    def _send_notification(self, target, ctxt, message, version,
                           retry=None):
        try:
            super()._send_notification(target, ctxt, message, version,
                                       retry=retry)
        except Exception:
            _LOCAL.failed = True
            raise


class _Serializer(messaging.NoOpSerializer):
    def serialize_entity(self, context, entity):
        return jsonutils.to_primitive(entity, convert_instances=True)

    def serialize_context(self, context):
        return context.to_dict() if hasattr(context, 'to_dict') else context


def get_notifier(conf, process, host):
    """The notifier of this process, or None when notifications are off
    (no ``[oslo_messaging_notifications]driver`` but ``noop``)."""
    key = (id(conf), process, host)
    with _LOCK:
        if key not in _NOTIFIERS:
            notifier = None
            if _drivers_on(conf):
                transport = _Transport(_notification_transport(conf))
                notifier = messaging.Notifier(
                    transport, publisher_id=f'cyborg-{process}:{host}',
                    serializer=_Serializer(), retry=_retry(conf))
                if not notifier.is_enabled():
                    notifier = None
            _NOTIFIERS[key] = notifier
        return _NOTIFIERS[key]


def _drivers_on(conf):
    """Whether ``[oslo_messaging_notifications]driver`` names a driver
    that sends (any but ``noop``; ``driver =`` names none): only then is
    a transport made."""
    return any(name not in ('', NOOP_DRIVER) for name in conf[GROUP].driver)


def _notification_transport(conf):
    """oslo.messaging's notification transport of ``conf``; raises one of
    ``rpc.TRANSPORT_URL_ERRORS`` when its URL cannot work.  As for the RPC
    transport (``rpc.get_transport``), the import error of a driver's
    module that stevedore lets through (kafka:// without confluent_kafka)
    is said as the driver failing to load (``rpc.driver_loaded``)."""
    return rpc.driver_loaded(messaging.get_notification_transport, conf,
                             conf[GROUP].transport_url or conf.transport_url)


def own_transport_url(conf):
    """``[oslo_messaging_notifications]transport_url`` where notifications
    are on and go to a broker of their own; None where they are off or go
    to ``[DEFAULT]transport_url``'s."""
    _register(conf)
    if not _drivers_on(conf):
        return None
    return conf[GROUP].transport_url or None


def driver_problem(conf):
    """Why ``[oslo_messaging_notifications]driver`` cannot work, or None:
    a name that no installed notification driver has (``messagingv3``).
    oslo.messaging's notifier loads only the drivers it finds (stevedore
    tells the others at the first notification, as it makes the
    notifier) and sends nothing to the others: a typo turned
    notifications off without a word at start.  The names are those of
    the ``DRIVER_NAMESPACE`` entry points installed (stevedore's); no
    driver, or ``noop`` only, is notifications off, which is no
    problem."""
    _register(conf)
    names = [name for name in conf[GROUP].driver if name]
    known = driver_names()
    unknown = [name for name in names if name not in known]
    if not unknown:
        return None
    return ('[%s]driver: not an installed notification driver: %s '
            '(installed: %s)' % (GROUP, ', '.join(map(repr, unknown)),
                                 ', '.join(known)))


def driver_names():
    """The names of the notification drivers installed, sorted."""
    return sorted({entry_point.name for entry_point in
                   importlib.metadata.entry_points(group=DRIVER_NAMESPACE)})


def check_transport_url(conf):
    """Raise one of ``rpc.TRANSPORT_URL_ERRORS`` when ``own_transport_url``
    cannot work: a driver that is not installed, or that needs a library
    that is not, a URL oslo.messaging cannot read.  The transport made to
    find out is dropped: loading its driver connects to nothing, and the
    notifier makes its own at the first notification."""
    if own_transport_url(conf):
        _notification_transport(conf).cleanup()


def enabled(conf, process='conductor', host=None):
    """Whether notifications are on for this process: check it before
    building a payload, so that with notifications off (the default) a
    hot path pays a dict lookup and nothing more."""
    _register(conf)
    return get_notifier(conf, process, host or conf.host) is not None


def _retry(conf):
    retry = conf.oslo_messaging_notifications.retry
    return PUBLISH_RETRIES if retry is None or retry < 0 else retry


def reset():
    """Forget cached notifiers (tests that change the configuration),
    once the notifications queued have gone (``RESET_WAIT`` at most; the
    rest are dropped unsent), and close their transports: a forgotten
    one's connections would otherwise go on reconnecting (and logging)
    from their heartbeat threads to a broker that may be gone."""
    if not _SENDER.flush(RESET_WAIT):
        _SENDER.discard()
    with _LOCK:
        forgotten = [notifier for notifier in _NOTIFIERS.values()
                     if notifier is not None]
        _NOTIFIERS.clear()
    for notifier in forgotten:
        notifier.transport.cleanup()


def flush(timeout=None):
    """Wait until every notification queued so far is published (or
    dropped); False when ``timeout`` seconds passed first."""
    return _SENDER.flush(timeout)


def payload(event, data):
    """The versioned payload of ``event`` (a tuple above) around ``data``."""
    _event_type, name, version = event
    return {'cyborg_object.name': name,
            'cyborg_object.namespace': NAMESPACE,
            'cyborg_object.version': version,
            'cyborg_object.data': data}


def send(conf, context, event, data, priority=INFO, process='conductor',
         host=None):
    """Queue one notification for the sender thread; never waits for the
    broker, never raises.  False when notifications are off."""
    _register(conf)
    notifier = get_notifier(conf, process, host or conf.host)
    if notifier is None:
        return False
    _SENDER.put((notifier, context, event, data, priority))
    return True


def _publish(notifier, context, event, data, priority):
    """Publish one notification (on the sender thread); whether the
    broker took it."""
    _LOCAL.failed = False
    try:
        getattr(notifier, priority)(context or {}, event[0],
                                    payload(event, data))
    except Exception as exc:  # noqa: BLE001 - counted and logged
        LOG.debug('Could not send notification %s: %s', event[0], exc)
        return False
    return not _LOCAL.failed


class _Sender:
    """The queue of notifications to publish and the daemon thread that
    publishes them, in the order they were sent; one per process."""

    def __init__(self):
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._busy = False
        self._thread = None
        # Dropped since the queue overflowed / the broker failed, for the
        # one line each episode logs.
        self._overflowed = 0
        self._unpublished = 0

    def put(self, item):
        with self._cond:
            dropped = None
            if len(self._queue) >= QUEUE_LIMIT:
                dropped = self._queue.popleft()
                self._overflowed += 1
            self._queue.append(item)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name='cyborg-notifications',
                    daemon=True)
                self._thread.start()
            self._cond.notify_all()
            first_drop = self._overflowed == 1 and dropped is not None
        if dropped is not None:
            metrics.NOTIFICATIONS_DROPPED.labels(
                metrics.NOTIFICATION_QUEUE_FULL).inc()
            if first_drop:
                LOG.warning('%d notifications are waiting for the '
                            'notification broker: dropping the oldest '
                            '(%s first) until it catches up', QUEUE_LIMIT,
                            dropped[2][0])

    def _run(self):
        while True:
            with self._cond:
                while not self._queue:
                    self._busy = False
                    if self._overflowed:
                        LOG.info('Notification queue drained; %d '
                                 'notification(s) were dropped while it '
                                 'was full', self._overflowed)
                        self._overflowed = 0
                    self._cond.notify_all()
                    self._cond.wait()
                item = self._queue.popleft()
                self._busy = True
            self._published(item, _publish(*item))

    def _published(self, item, published):
        event_type = item[2][0]
        if published:
            metrics.NOTIFICATIONS.labels(event_type).inc()
            if self._unpublished:
                LOG.info('Notifications reach the broker again; %d were '
                         'dropped meanwhile', self._unpublished)
                self._unpublished = 0
            return
        metrics.NOTIFICATIONS_DROPPED.labels(
            metrics.NOTIFICATION_NOT_PUBLISHED).inc()
        self._unpublished += 1
        if self._unpublished == 1:
            LOG.warning('Notification %s was not published (the '
                        'notification broker is away or refused it); '
                        'notifications are dropped until it takes them '
                        'again', event_type)

    def flush(self, timeout=None):
        with self._cond:
            return self._cond.wait_for(
                lambda: (not self._queue and not self._busy) or not (
                    self._thread and self._thread.is_alive()), timeout)

    def discard(self):
        with self._cond:
            self._queue.clear()
            self._cond.notify_all()

    def after_fork(self):
        # The thread is the parent's; its lock may have been held.
        self.__init__()


_SENDER = _Sender()
os.register_at_fork(after_in_child=_SENDER.after_fork)
atexit.register(_SENDER.flush, EXIT_WAIT)


class Outbox:
    """Notifications collected inside a transaction and sent after it
    commits: ``add`` while writing, ``send`` once the commit is done;
    discard the outbox (do not call ``send``) when the transaction fails.
    """

    def __init__(self, conf, context, process='conductor'):
        self._conf = conf
        self._context = context
        self._process = process
        self._pending = []

    def add(self, event, data, priority=INFO):
        self._pending.append((event, data, priority))

    def __len__(self):
        return len(self._pending)

    def send(self):
        pending, self._pending = self._pending, []
        for event, data, priority in pending:
            send(self._conf, self._context, event, data, priority,
                 process=self._process)


def _register(conf):
    # The [oslo_messaging_notifications] options are registered by
    # oslo.messaging when a transport or notifier is made; make sure they
    # exist before we read them, without making a transport (of a URL
    # that may not work).
    try:
        conf[GROUP].driver
    except cfg.NoSuchOptError:
        import oslo_messaging.opts
        for group, opts in oslo_messaging.opts.list_opts():
            if group == GROUP:
                conf.register_opts(opts, group=group)
