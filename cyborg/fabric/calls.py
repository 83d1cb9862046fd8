"""Fabric driver calls with a deadline.

A fabric manager that hangs (a driver's ``attach`` or ``detach`` that
never returns) must not hold the conductor's thread that asked: a bind
worker (and the binds queued behind it), an unbind the API waits for,
a periodic.  Each call runs on a daemon thread of its own while the
caller waits until its time is up; then it stops waiting, and what the
fabric did is unknown (``Unanswered``): an attach may still land.  The
thread ends when the driver returns, whenever that is; being a daemon,
it never holds up the process's exit.

A call whose caller stopped waiting holds its fabric address until the
driver returns: a later call for that address (the detach undoing an
attach that did not answer, the reconcile's retry) waits for it first,
so that it cannot land before it, and is not made at all when it does
not return within the later call's own time (``Busy``: the fabric was
asked nothing).  Calls answered in time are not held up: two binds' or
a bind's and a release's calls for one address may run at once, as the
driver's idempotence allows.  The holding is this process's only:
another conductor knows nothing of it (doc/source/remote-pools.rst
says what that leaves open).  At most ``SLOTS`` calls to one driver are
under way at once, so that a hung fabric manager holds that many
threads, not one more for each later call.

Several calls a caller needs together (the detaches of one release) go
at once (``call_each``), under one deadline: a release of N handles of a
fabric that hangs waits about that deadline, not N times it.
"""

import concurrent.futures
import threading
import time

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

# Calls to one driver under way at once in one conductor.
SLOTS = 16
# Seconds a call waits at the least, however late its caller is: a
# detach given no time at all would count as refused every time.
LEAST_WAIT = 1.0
# Threads one ``call_each`` waits on at most: calls past that many start
# as earlier ones end.
WAITERS = 64

# Guards the two below, and wakes the calls waiting for an address.
_LOCK = threading.Condition()
_SLOTS = {}
# (driver name, address): how many calls whose callers stopped waiting
# have not returned yet.
_UNANSWERED = {}


class Unanswered(Exception):
    """The driver did not return within the caller's time: the call may
    still do what it was asked."""

    def __init__(self, driver_name, op, seconds):
        self.seconds = seconds
        super().__init__(f'the {driver_name} fabric driver did not answer '
                         f'the {op} within {seconds_text(seconds)} s')


class Busy(Exception):
    """The call was not made: the fabric was asked nothing."""


def seconds_text(seconds):
    """``seconds`` as a failure reason or a log line says them."""
    return f'{round(seconds, 1):g}'


def _slots(driver_name):
    with _LOCK:
        return _SLOTS.setdefault(driver_name,
                                 threading.BoundedSemaphore(SLOTS))


def _left(until):
    return max(until - time.monotonic(), 0)


def call(driver, op, handle, hostname, instance_uuid, seconds):
    """``driver.<op>(handle, hostname, instance_uuid)``: its answer, or
    the exception it raised, within ``seconds``.  Raises ``Unanswered``
    once they pass with the driver still working, ``Busy`` (the driver
    not called) when a call for the address that did not answer its
    caller, or ``SLOTS`` calls to the driver, did not return in that
    time."""
    name = driver.name
    key = (name, handle.fabric_address)
    until = time.monotonic() + seconds
    with _LOCK:
        if not _LOCK.wait_for(lambda: not _UNANSWERED.get(key),
                              _left(until)):
            raise Busy(f'an earlier call for {handle.fabric_address} to '
                       f'the {name} fabric driver did not answer and has '
                       f'not returned yet')
    slots = _slots(name)
    if not slots.acquire(timeout=_left(until)):
        raise Busy(f'{SLOTS} calls to the {name} fabric driver have not '
                   f'returned yet')
    answer = concurrent.futures.Future()
    # Set (under _LOCK) once the caller gave up waiting for the answer.
    ended = {'abandoned': False}
    began = time.monotonic()

    def run():
        try:
            answer.set_result(getattr(driver, op)(handle, hostname,
                                                  instance_uuid))
        except BaseException as e:  # noqa: BLE001 - the caller's to judge
            answer.set_exception(e)
        finally:
            slots.release()
            with _LOCK:
                if ended['abandoned']:
                    _UNANSWERED[key] -= 1
                    if not _UNANSWERED[key]:
                        del _UNANSWERED[key]
                    _LOCK.notify_all()
        if ended['abandoned']:
            LOG.warning('The %s fabric driver answered the %s of %s for %s '
                        'after %s s, once the conductor had stopped '
                        'waiting', name, op, handle.fabric_address,
                        hostname, seconds_text(time.monotonic() - began))

    threading.Thread(target=run, daemon=True,
                     name=f'fabric-{name}-{op}').start()
    concurrent.futures.wait([answer], timeout=_left(until))
    with _LOCK:
        # The answer, not the worker's clean-up after it, decides: the
        # caller may wake on it before the worker reaches its ``finally``.
        if not answer.done():
            ended['abandoned'] = True
            _UNANSWERED[key] = _UNANSWERED.get(key, 0) + 1
            raise Unanswered(name, op, seconds)
    return answer.result()


def call_each(requests, seconds):
    """Make the calls ``requests`` (each ``(driver, op, handle, hostname,
    instance_uuid)``, as ``call`` takes them) at once, all within
    ``seconds`` from now.  Returns, in their order, ``(answer, error)``
    for each: ``error`` the exception it raised (``Unanswered``,
    ``Busy``, the driver's own), else None.

    Each is waited for on a thread of its own, ``WAITERS`` at most; the
    driver is called on another, as by ``call``, and at most ``SLOTS`` of
    those are under way for one driver.  Calls to a driver that hangs
    thus cost the caller about ``seconds``, where one call after the
    other cost ``seconds`` each: those past its ``SLOTS`` find them
    taken and are ``Busy`` by then.  One that starts late, past
    ``WAITERS`` calls still waiting, has what is left of the time, and
    ``LEAST_WAIT`` at the least."""
    until = time.monotonic() + seconds
    least = min(seconds, LEAST_WAIT)

    def one(request):
        try:
            return call(*request, max(_left(until), least)), None
        except Exception as e:  # noqa: BLE001 - the caller's to judge
            return None, e

    if len(requests) <= 1:
        return [one(request) for request in requests]
    with concurrent.futures.ThreadPoolExecutor(
            max_workers=min(len(requests), WAITERS),
            thread_name_prefix='fabric-wait') as waiting:
        return list(waiting.map(one, requests))
