"""Versioned notifications, sent over oslo.messaging's notifier.

Operators' automation (and Ceilometer-style consumers) read them from the
notification topics configured in ``[oslo_messaging_notifications]``
(``driver = messagingv2``, ``topics``, ``transport_url``); with no driver
configured nothing is sent and nothing is built.

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
"""

import threading

import oslo_messaging as messaging
from oslo_log import log as logging
from oslo_serialization import jsonutils

from cyborg.common import metrics

LOG = logging.getLogger(__name__)

NAMESPACE = 'cyborg'

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

_NOTIFIERS = {}
_LOCK = threading.Lock()


class _Serializer(messaging.NoOpSerializer):
    def serialize_entity(self, context, entity):
        return jsonutils.to_primitive(entity, convert_instances=True)

    def serialize_context(self, context):
        return context.to_dict() if hasattr(context, 'to_dict') else context


def get_notifier(conf, process, host):
    """The notifier of this process, or None when notifications are off
    (no ``[oslo_messaging_notifications]driver``)."""
    key = (id(conf), process, host)
    with _LOCK:
        if key not in _NOTIFIERS:
            notifier = None
            if conf.oslo_messaging_notifications.driver:
                transport = messaging.get_notification_transport(conf)
                notifier = messaging.Notifier(
                    transport, publisher_id=f'cyborg-{process}:{host}',
                    serializer=_Serializer())
                if not notifier.is_enabled():
                    notifier = None
            _NOTIFIERS[key] = notifier
        return _NOTIFIERS[key]


def enabled(conf, process='conductor', host=None):
    """Whether notifications are on for this process: check it before
    building a payload, so that with notifications off (the default) a
    hot path pays a dict lookup and nothing more."""
    _register(conf)
    return get_notifier(conf, process, host or conf.host) is not None


def reset():
    """Forget cached notifiers (tests that change the configuration)."""
    with _LOCK:
        _NOTIFIERS.clear()


def payload(event, data):
    """The versioned payload of ``event`` (a tuple above) around ``data``."""
    _event_type, name, version = event
    return {'cyborg_object.name': name,
            'cyborg_object.namespace': NAMESPACE,
            'cyborg_object.version': version,
            'cyborg_object.data': data}


def send(conf, context, event, data, priority=INFO, process='conductor',
         host=None):
    """Send one notification now; never raises (logged instead)."""
    _register(conf)
    notifier = get_notifier(conf, process, host or conf.host)
    if notifier is None:
        return False
    event_type = event[0]
    try:
        getattr(notifier, priority)(context or {}, event_type,
                                    payload(event, data))
    except Exception as exc:
        LOG.warning('Could not send notification %s: %s', event_type, exc)
        return False
    metrics.NOTIFICATIONS.labels(event_type).inc()
    return True


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
    # exist before we read them.
    try:
        conf.oslo_messaging_notifications.driver
    except Exception:
        messaging.get_notification_transport(conf)
