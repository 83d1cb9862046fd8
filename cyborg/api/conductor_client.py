"""How the API calls the conductor: bounded in time, in number and by the
broker's health, so that while RabbitMQ or the conductor is away a write
answers 503 within seconds and reads keep being served.

- Each call waits for the conductor at most ``[api]conductor_timeout``
  seconds and tries the broker ``[api]broker_retries`` more times; the
  whole call, however the broker fails (refusing connections, or
  accepting them and answering nothing), takes at most ``call_bound``
  seconds, after which it answers 503 like a broker that is away.
- While the conductor answers, every thread may wait for it: a burst of
  writes (a boot storm's binds) is served, not refused.  Once a call went
  unanswered (a timeout, the broker lost), at most half of a worker's
  ``[api]threads`` wait for the conductor at once and a write beyond that
  answers 503 at once, so that writes piling up behind a lost broker
  never take the threads reads need; the next call answered lifts that.
- oslo.messaging opens the queue replies come back on, on first use, with
  no bound: a call made while the broker is away would hang there for as
  long as it stays away.  It is opened in a thread of its own instead
  (``rpc.wait_reply_queue``) and, until it is open, a write answers 503
  after ``broker_retries`` + 1 seconds with nothing sent.
- A connection refused below oslo.messaging is a 503 like any messaging
  failure, never a 500.
- It reconnects to a broker that came back at most a second apart
  (``cyborg.common.rpc.reconnect_fast``).
"""

from concurrent import futures
import contextvars
import threading
import time

from amqp import exceptions as amqp_exceptions
from kombu import exceptions as kombu_exceptions
from oslo_context import context as oslo_context
from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import timing
from cyborg.objects import clock as objects_clock

LOG = logging.getLogger(__name__)

def call_bound(conf):
    """Seconds a call to the conductor takes at most, from the moment the
    API sends it to its 503: ``[api]conductor_timeout`` for the answer,
    and for the broker ``[api]broker_retries`` + 1 (what a call waits for
    the reply queue).  Past ``conductor_timeout`` the conductor drops the
    call if it comes to it (``answer_by``), so nothing is written behind
    such a 503."""
    return conf.api.conductor_timeout + conf.api.broker_retries + 1


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
                result = self._within_bound(name, method, args, kwargs)
            answered = True
            return result
        except (OSError, kombu_exceptions.KombuError,
                messaging.MessageDeliveryFailure, _Overdue) as e:
            # Connection errors from below oslo.messaging (kombu, sockets),
            # its own once it gave up on the broker, the reply queue not
            # open, or the broker not answering within the call's bound.
            LOG.warning('Calling the conductor (%s) failed: %s', name, e)
            raise exception.ServiceUnavailable(reason=rpc.BROKER_AWAY)
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

    def _within_bound(self, name, method, args, kwargs):
        """``method(*args, **kwargs)``, on a thread of its own that the
        caller stops waiting for once ``call_bound`` has passed (_Overdue).

        oslo.messaging bounds a call's parts, not the whole: with the
        broker accepting connections and answering nothing, the publish
        alone waits ``conductor_timeout`` for the broker's confirmation,
        then each of ``broker_retries`` reconnections its handshake
        timeout (about 5 s): a write took 37 s.  The abandoned thread
        ends by itself within those bounds."""
        started = time.monotonic()
        transport = getattr(getattr(self._client, '_client', None),
                            'transport', None)
        rpc.wait_reply_queue(transport, self._conf.api.broker_retries + 1)
        future = futures.Future()
        # The request's context for what the call logs (its request id)
        # and for context variables (tracing), as in the request's thread.
        request = oslo_context.get_current()
        variables = contextvars.copy_context()

        def run():
            future.set_running_or_notify_cancel()
            if request is not None:
                request.update_store()
            try:
                future.set_result(method(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed over
                future.set_exception(e)

        threading.Thread(target=variables.run, args=(run,), daemon=True,
                         name=f'conductor-call-{name}').start()
        bound = call_bound(self._conf)
        futures.wait([future], bound - (time.monotonic() - started))
        if not future.done():
            raise _Overdue(f'no outcome within {bound} s')
        return future.result()


def _answered(error):
    """Whether a call that raised ``error`` reached a conductor that
    answered (with an error of its own: a 4xx, a 503 for Placement),
    rather than going unanswered (a timeout, a message not delivered,
    the reply queue not open)."""
    if isinstance(error, messaging.RemoteError):
        return True
    return not isinstance(error, messaging.MessagingException)


class _Overdue(Exception):
    """The call's bound passed with no outcome."""
