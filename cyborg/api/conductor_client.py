"""How the API calls the conductor: bounded in time, in number and by the
broker's health, so that while RabbitMQ or the conductor is away a write
answers 503 within seconds and reads keep being served.

- Each call waits for the conductor at most ``[api]conductor_timeout``
  seconds and tries the broker ``[api]broker_retries`` more times.
- While the conductor answers, every thread may wait for it: a burst of
  writes (a boot storm's binds) is served, not refused.  Once a call went
  unanswered (a timeout, the broker lost), at most half of a worker's
  ``[api]threads`` wait for the conductor at once and a write beyond that
  answers 503 at once, so that writes piling up behind a lost broker
  never take the threads reads need; the next call answered lifts that.
- oslo.messaging opens the queue replies come back on, on first use, with
  no bound: a call made while the broker is away would hang there for as
  long as it stays away.  The client opens it in a thread of its own from
  the start and, until it is open, a write answers 503 after
  ``broker_retries`` + 1 seconds with nothing sent.
- A connection refused below oslo.messaging is a 503 like any messaging
  failure, never a 500.
- It reconnects to a broker that came back at most a second apart
  (``cyborg.common.rpc.reconnect_fast``).
"""

import threading

from amqp import exceptions as amqp_exceptions
from kombu import exceptions as kombu_exceptions
from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import timing
from cyborg.objects import clock as objects_clock

LOG = logging.getLogger(__name__)


class ConductorClient:
    """The conductor RPC API as the API uses it; made on first use (reads
    need none)."""

    def __init__(self, conf, client=None):
        self._conf = conf
        self._client = client
        self._lock = threading.Lock()
        # Calls waiting for the conductor now, how many may while it does
        # not answer, and whether the last call that ended was answered.
        self._waiting = 0
        self._unanswered_limit = max(1, conf.api.threads // 2)
        self._answering = True
        self._reply_queue = None

    def __getattr__(self, name):
        method = getattr(self._rpc(), name)
        if name.startswith('can_'):
            # A question about the version cap, answered here: no message
            # is sent, so no slot is taken and no broker waited for.
            return method

        def call(*args, **kwargs):
            return self._call(name, method, *args, **kwargs)
        return call

    def _rpc(self):
        with self._lock:
            if self._client is None:
                from cyborg.conductor import rpcapi
                rpc.reconnect_fast(self._conf)
                self._client = rpcapi.ConductorAPI(
                    self._conf, timeout=self._conf.api.conductor_timeout,
                    retry=self._conf.api.broker_retries)
                self._reply_queue = _ReplyQueue(self._client)
            return self._client

    def _call(self, name, method, *args, **kwargs):
        with self._lock:
            if (not self._answering
                    and self._waiting >= self._unanswered_limit):
                raise exception.ServiceUnavailable(
                    reason='too many requests are waiting for the '
                           'conductor')
            self._waiting += 1
        if args and isinstance(args[0], cyborg_context.RequestContext):
            # The conductor drops the call if it comes to it later; both
            # tell the time by the database server's clock.
            args[0].answer_by = (objects_clock.reference.now()
                                 + self._conf.api.conductor_timeout)
        answered = False
        try:
            with timing.phase(timing.RPC):
                if self._reply_queue is not None:
                    self._reply_queue.wait(self._conf.api.broker_retries + 1)
                result = method(*args, **kwargs)
            answered = True
            return result
        except (OSError, kombu_exceptions.KombuError) as e:
            # Connection errors from below oslo.messaging (kombu, sockets).
            LOG.warning('Calling the conductor (%s) failed: %s', name, e)
            raise exception.ServiceUnavailable(
                reason='the message broker cannot be reached')
        except amqp_exceptions.AMQPError as e:
            # The broker's own refusal at login (a wrong password, a
            # virtual host that does not exist): oslo.messaging lets it
            # through, and it was a 500.
            LOG.error('Calling the conductor (%s) failed: the message '
                      'broker of [DEFAULT]transport_url refused us: %s',
                      name, e)
            raise exception.ServiceUnavailable(
                reason='the message broker refused the API\'s login')
        except Exception as e:
            answered = _answered(e)
            raise
        finally:
            with self._lock:
                self._waiting -= 1
                self._answering = answered


def _answered(error):
    """Whether a call that raised ``error`` reached a conductor that
    answered (with an error of its own: a 4xx, a 503 for Placement),
    rather than going unanswered (a timeout, a message not delivered,
    the reply queue not open: the 503 ``_ReplyQueue`` raises)."""
    if isinstance(error, messaging.RemoteError):
        return True
    return not isinstance(error, (messaging.MessagingException,
                                  _ReplyQueueNotOpen))


class _ReplyQueue:
    """Opens the RPC client's reply queue in the background, once."""

    def __init__(self, rpc_client):
        # oslo.messaging has no public call for this; without the private
        # one (another driver, the fake transport) there is nothing to do.
        driver = getattr(getattr(getattr(rpc_client, '_client', None),
                                 'transport', None), '_driver', None)
        self._open = getattr(driver, '_get_reply_q', None)
        self._ready = threading.Event()
        if self._open is None:
            self._ready.set()
            return
        threading.Thread(target=self._run, daemon=True,
                         name='conductor-reply-queue').start()

    def _run(self):
        try:
            self._open()
        except Exception:  # noqa: BLE001 - calls open it themselves then
            LOG.exception('Opening the conductor reply queue failed')
        self._ready.set()

    def wait(self, timeout):
        if not self._ready.wait(timeout):
            raise _ReplyQueueNotOpen(
                reason='the message broker cannot be reached')


class _ReplyQueueNotOpen(exception.ServiceUnavailable):
    """No call was sent: the reply queue is not open yet."""
