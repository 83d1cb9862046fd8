"""oslo.messaging plumbing: one transport, clients, threading servers.

Payloads are plain JSON-able data; our objects cross the wire as dicts made
by their ``to_dict()`` and are rebuilt by the receiving side.  The request
context travels with every message.
"""

import contextlib
import threading
import weakref

from amqp import exceptions as amqp_exceptions
from kombu import exceptions as kombu_exceptions
import oslo_messaging as messaging
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

from cyborg.common import context as cyborg_context

LOG = logging.getLogger(__name__)

_TRANSPORT = None
_LOCK = threading.Lock()


class JsonPayloadSerializer(messaging.NoOpSerializer):
    """Turns objects with ``to_dict()`` into primitives before sending."""

    def serialize_entity(self, context, entity):
        return jsonutils.to_primitive(entity, convert_instances=True)


class RequestContextSerializer(messaging.Serializer):
    def __init__(self, base):
        self._base = base

    def serialize_entity(self, context, entity):
        return self._base.serialize_entity(context, entity)

    def deserialize_entity(self, context, entity):
        return self._base.deserialize_entity(context, entity)

    def serialize_context(self, context):
        return context.to_dict()

    def deserialize_context(self, context):
        return cyborg_context.RequestContext.from_dict(context)


def _serializer():
    return RequestContextSerializer(JsonPayloadSerializer())


RABBIT_GROUP = 'oslo_messaging_rabbit'
# How the control-plane processes (API, conductor) reconnect to a broker
# that came back: at most a second apart, instead of backing off up to
# 30 s (plus a second more for the consumers).  They are few; agents keep
# oslo.messaging's own backoff.
FAST_RECONNECT = {'rabbit_interval_max': 1, 'kombu_reconnect_delay': 0.1}


def reconnect_fast(conf):
    """Make FAST_RECONNECT ``conf``'s defaults (a config file still wins);
    call before the transport is made."""
    import oslo_messaging.opts
    for group, opts in oslo_messaging.opts.list_opts():
        if group == RABBIT_GROUP:
            conf.register_opts(opts, group=group)
    for name, value in FAST_RECONNECT.items():
        conf.set_default(name, value, group=RABBIT_GROUP)


# What making a transport raises for a transport URL that cannot work
# (``[DEFAULT]transport_url``, or notifications' own): a driver that is
# not installed (or that needs a library that is not: ``driver_loaded``
# says so as DriverLoadFailure too), a URL oslo.messaging cannot read (no
# scheme; urllib's ValueError for a bad IPv6 address or port), a query
# naming no option of its driver (``?pool=1``: NoSuchOptError).
TRANSPORT_URL_ERRORS = (messaging.DriverLoadFailure,
                        messaging.InvalidTransportURL, ValueError,
                        cfg.NoSuchOptError)


def driver_loaded(make, conf, url=None):
    """``make(conf)``, a transport of ``url`` (None: ``[DEFAULT]
    transport_url``), with the import error of its driver's module that
    stevedore lets through (kafka:// without confluent_kafka) raised as
    DriverLoadFailure: oslo.messaging wraps only "no such driver", and
    both say the same thing."""
    try:
        return make(conf)
    except ImportError as exc:
        driver = messaging.TransportURL.parse(conf, url).transport
        raise messaging.DriverLoadFailure(driver, exc) from exc


def _make_transport(conf):
    return driver_loaded(messaging.get_rpc_transport, conf)


def get_transport(conf):
    """The process-wide RPC transport for ``conf.transport_url``; raises
    one of ``TRANSPORT_URL_ERRORS`` when that URL cannot work."""
    global _TRANSPORT
    with _LOCK:
        if _TRANSPORT is None:
            _TRANSPORT = _make_transport(conf)
        return _TRANSPORT


def check_transport_url(conf):
    """Raise one of ``TRANSPORT_URL_ERRORS`` when ``conf.transport_url``
    cannot work; nothing when the process's transport is made already.

    The transport made to find out is dropped: loading its driver
    connects to nothing, and the process's own is made later, once the
    options it reads are final (``reconnect_fast``) and, in the API, in
    each worker after the fork."""
    with _LOCK:
        if _TRANSPORT is not None:
            return
    _make_transport(conf).cleanup()


def set_transport(transport):
    """Use this transport (all-in-one, tests); None forgets the current one."""
    global _TRANSPORT
    with _LOCK:
        _TRANSPORT = transport


def cleanup():
    global _TRANSPORT
    with _LOCK:
        if _TRANSPORT is not None:
            _TRANSPORT.cleanup()
        _TRANSPORT = None


def register_messaging_opts(conf):
    """oslo.messaging registers its metrics and tracing options on the
    global CONF only, but reads them from its transport's ConfigOpts on
    every call; any other ConfigOpts needs them too."""
    from oslo_messaging._metrics import client as metrics
    from oslo_messaging._tracing import client as tracing
    conf.register_opts(metrics.oslo_messaging_metrics,
                       group='oslo_messaging_metrics')
    conf.register_opts(tracing.oslo_messaging_tracing,
                       group='oslo_messaging_tracing')


# How many more times the conductor's calls and casts to agents try to
# reach the broker before they fail with MessageDeliveryFailure (a second
# or so apart with FAST_RECONNECT: a few seconds in all).  With
# oslo.messaging's default (for ever) a call made while RabbitMQ is away
# ignores its timeout: it holds its thread (a bind worker, an RPC thread,
# the health timers) for the whole outage, and goes out when the broker
# is back, long after its caller gave up.
BROKER_RETRIES = 2

# What oslo.messaging lets through from below when it gives up on the
# broker within a bounded ``retry``: kombu's error for a connection it
# could not open (a call or cast that needs a new one from the pool),
# py-amqp's for a broker refusing the login.  Neither is ever a peer's
# answer: oslo.messaging rebuilds only builtin exceptions (and those of
# the modules a transport allows, none here).
BROKER_ERRORS = (kombu_exceptions.KombuError, amqp_exceptions.AMQPError)

# How every process says that it could not reach the broker.
BROKER_AWAY = 'the message broker cannot be reached'


def peer_too_old(error):
    """Whether ``error`` is a peer's refusal of a call's version or
    method it does not serve (an older release's, in a rolling upgrade):
    refused before anything ran.  Over RabbitMQ it comes back as a
    RemoteError naming the class, over fake:// as the class itself."""
    return (isinstance(error, (messaging.UnsupportedVersion,
                               messaging.NoSuchMethod)) or
            (isinstance(error, messaging.RemoteError) and
             error.exc_type in ('UnsupportedVersion', 'NoSuchMethod')))


class BrokerUnreachable(messaging.MessageDeliveryFailure):
    """Nothing was sent: the message broker could not be reached."""


class ReplyQueueNotOpen(BrokerUnreachable):
    """A call not even published: its reply queue is not open
    (``wait_reply_queue``).  Any other MessageDeliveryFailure of a call
    may follow a publish a hung broker took, and delivers later."""


@contextlib.contextmanager
def broker_errors_undelivered():
    """Raise ``BROKER_ERRORS`` from within as BrokerUnreachable, so that
    a caller sees one error, oslo.messaging's MessageDeliveryFailure,
    whenever a message was not sent."""
    try:
        yield
    except BROKER_ERRORS as exc:
        raise BrokerUnreachable(
            f'{BROKER_AWAY}: {exc}') from exc


class _ReplyQueue:
    """Opens a transport's reply queue on a thread of its own, once."""

    def __init__(self, transport):
        # oslo.messaging has no public call for this; without the private
        # one (another driver, the fake transport) there is nothing to do.
        driver = getattr(transport, '_driver', None)
        self._open = getattr(driver, '_get_reply_q', None)
        self._ready = threading.Event()
        if self._open is None:
            self._ready.set()
            return
        threading.Thread(target=self._run, daemon=True,
                         name='rpc-reply-queue').start()

    def _run(self):
        try:
            self._open()
        except Exception:  # noqa: BLE001 - calls open it themselves then
            LOG.exception('Opening the RPC reply queue failed')
        self._ready.set()

    def wait(self, timeout):
        return self._ready.wait(timeout)


_REPLY_QUEUES = weakref.WeakKeyDictionary()


def wait_reply_queue(transport, timeout):
    """Wait at most ``timeout`` seconds for ``transport``'s reply queue
    (None: nothing to wait for), or raise BrokerUnreachable.

    oslo.messaging opens the queue answers come back on at the first
    call, trying the broker for ever whatever the call's ``retry``, and
    every other call of the process waits behind it: a first call made
    while the broker is away would hang for as long as it stays away.
    The queue is opened in the background instead (on the first wait),
    and a call waits for it only this long."""
    if transport is None:
        return
    with _LOCK:
        queue = _REPLY_QUEUES.get(transport)
        if queue is None:
            queue = _REPLY_QUEUES[transport] = _ReplyQueue(transport)
    if not queue.wait(timeout):
        raise ReplyQueueNotOpen(f'{BROKER_AWAY}: the reply queue is not '
                                f'open yet')


def get_client(conf, topic, version, server=None, timeout=None, retry=None,
               version_cap=None, require_queue=False):
    """An RPC client; ``timeout`` bounds the wait for a reply (None: the
    transport's ``rpc_response_timeout``), ``retry`` the attempts to reach
    the broker (None: forever), ``version_cap`` the highest version it
    sends (None: any).  With ``require_queue`` a message no queue takes
    (no server of the topic ever listened on this broker) raises
    ``MessageUndeliverable`` at once instead of being dropped by the
    broker, which would leave a call waiting out its whole timeout."""
    target = messaging.Target(topic=topic, version=version, server=server)
    transport = get_transport(conf)
    register_messaging_opts(transport.conf)
    options = (messaging.TransportOptions(at_least_once=True)
               if require_queue else None)
    return messaging.get_rpc_client(transport, target,
                                    serializer=_serializer(), timeout=timeout,
                                    retry=retry, version_cap=version_cap,
                                    transport_options=options)


# -- version caps ([upgrade_levels]) -----------------------------------------

def version_tuple(version):
    """(major, minor) of 'X.Y'; ValueError for anything else."""
    major, minor = str(version).split('.')
    return int(major), int(minor)


def resolve_cap(value, history, releases, peer):
    """The version ``value`` (an [upgrade_levels] setting) caps at: a
    version of ``history`` (('1.0', what changed), ...) or a release name
    of ``releases``; None for no cap.  ValueError says what is known, or
    that the version is older than the oldest release of ``releases``:
    no ``peer`` that old runs beside this code, and the calls it always
    sends would fail there."""
    value = (value or '').strip()
    if not value:
        return None
    if value in releases:
        return releases[value]
    known = [version for version, _change in history]
    if value in known:
        _check_not_older(value, releases, peer)
        return value
    raise ValueError(
        'unknown %s RPC version or release %r (versions: %s; releases: '
        '%s)' % (peer, value, ', '.join(known),
                 ', '.join(sorted(releases)) or 'none'))


def _check_not_older(version, releases, peer):
    if not releases:
        return
    oldest, oldest_version = min(
        releases.items(), key=lambda item: version_tuple(item[1]))
    if version_tuple(version) < version_tuple(oldest_version):
        raise ValueError(
            '%s RPC version %s is older than the oldest release this one '
            'runs beside (%s, %s RPC %s): set %s or a later version, or '
            'leave it empty' % (peer, version, oldest, peer, oldest_version,
                                oldest))


_CAPPED_LOGGED = set()
_CAPPED_LOCK = threading.Lock()


def skip_capped(peer, method, version, cap, consequence):
    """Log, once per process and method, that ``method`` (needing
    ``version``) is not sent because [upgrade_levels] ``peer`` caps at
    ``cap``, and what that means (``consequence``)."""
    with _CAPPED_LOCK:
        if (peer, method) in _CAPPED_LOGGED:
            return
        _CAPPED_LOGGED.add((peer, method))
    LOG.warning('Not sending %s (%s RPC %s): [upgrade_levels]%s caps it at '
                '%s; %s. This message is logged once.', method, peer,
                version, peer, cap, consequence)


# A method no endpoint has: a message calling it only wakes a server's
# consumer up (the dispatcher logs an unknown ``*_ignore_errors`` method
# at DEBUG and answers nothing to a cast).
WAKE_METHOD = 'wake_up_ignore_errors'


def wake_server(conf, topic, server):
    """Send one message to the server's own queue, so that its consumer
    thread, blocked in a poll of up to 5 s, returns at once and sees it is
    being stopped.  The message expires after a second; failures (the
    broker away) are ignored: the poll then ends by itself."""
    try:
        client = get_client(conf, topic, '1.0', server=server, retry=0)
        client.prepare(timeout=1).cast(
            cyborg_context.get_admin_context(), WAKE_METHOD)
    except Exception as exc:
        LOG.debug('Could not wake the %s server up: %s', topic, exc)


class CountingRPCServer(messaging.rpc.server.RPCServer):
    """An RPC server that knows when it has nothing in flight.

    A message is counted from the moment the consumer thread hands it to
    the executor (it is acknowledged then) until its reply is sent.  Once
    ``stop()`` has returned the consumer takes no more, so
    ``wait_idle()`` returning means every message taken was answered,
    without waiting, as oslo.messaging's ``wait()`` does, for the idle
    executor threads to notice the stop (a second each)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._in_flight = 0
        self._idle = threading.Condition()

    def _on_incoming(self, incoming):
        with self._idle:
            self._in_flight += 1
        try:
            super()._on_incoming(incoming)
        except BaseException:
            self._done()
            raise

    def _process_incoming(self, incoming):
        try:
            return super()._process_incoming(incoming)
        finally:
            self._done()

    def _done(self):
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout=None):
        """True once no message is in flight."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0,
                                       timeout)


def get_server(conf, topic, server, endpoints):
    """An RPC server on the threading executor (no eventlet)."""
    target = messaging.Target(topic=topic, server=server)
    access_policy = messaging.DefaultRPCAccessPolicy
    transport = get_transport(conf)
    register_messaging_opts(transport.conf)
    # oslo.messaging picks the threading executor unless eventlet has
    # monkey-patched threads, which nothing in cyborg does; naming it is
    # deprecated, so check the outcome instead.
    server = messaging.get_rpc_server(transport, target, endpoints,
                                      serializer=_serializer(),
                                      access_policy=access_policy,
                                      server_cls=CountingRPCServer)
    if server.executor_type != 'threading':
        raise RuntimeError('RPC server would use the %s executor; cyborg '
                           'runs on threads only' % server.executor_type)
    return server
