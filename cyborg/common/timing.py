"""Where a request's time goes: per-request phase accounting.

The benchmarks' per-hop breakdown (``tools/bench/arq_lifecycle.py``) comes
from here.  A process opens a ``Timings`` for each unit of work it serves
(the API for a request, the conductor for an RPC call) with ``measure``;
code on the way marks what it spends with ``phase(name)``; every SQL
statement run by the thread is counted and timed as the ``db`` phase by a
SQLAlchemy event listener.  When the unit of work ends, its phases go to
the process's Prometheus summaries (``cyborg.common.metrics``), labelled
by what was served, so a scrape before and after a run gives the mean
time per phase of each call.

Phases nest: a ``db`` statement inside ``handler`` counts in both, and the
breakdown subtracts (``handler`` less ``rpc`` less ``db`` is the handler's
own Python).  Outside a unit of work every call here is a no-op costing a
thread-local lookup.
"""

import contextlib
import threading
import time

import sqlalchemy as sa

from cyborg.common import metrics

# Phase names, one vocabulary for the API and the conductor.
POLICY = 'policy'
VALIDATE = 'validate'
HANDLER = 'handler'
RENDER = 'render'
RPC = 'rpc'
DB = 'db'
COMMIT = 'commit'
PLACEMENT = 'placement'
NOVA = 'nova'
# The conductor's bind: the binds it ends before the PATCH is answered.
QUICK_BINDS = 'quick_binds'

_local = threading.local()


class Timings:
    """The phases of one unit of work: seconds by name, statements run."""

    __slots__ = ('seconds', 'statements')

    def __init__(self):
        self.seconds = {}
        self.statements = 0

    def add(self, name, seconds):
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds


def current():
    """The Timings of the unit of work this thread serves, or None."""
    return getattr(_local, 'timings', None)


@contextlib.contextmanager
def measure():
    """Open a Timings for the unit of work run inside; yields it."""
    outer = current()
    timings = _local.timings = Timings()
    try:
        yield timings
    finally:
        _local.timings = outer


@contextlib.contextmanager
def rpc_served(method):
    """``measure`` a conductor's RPC call (or its background work) and
    record its time, phases and statements under ``method``."""
    started = time.perf_counter()
    with measure() as timings:
        try:
            yield timings
        finally:
            metrics.CONDUCTOR_RPC_SECONDS.labels(method).observe(
                time.perf_counter() - started)
            for name, seconds in timings.seconds.items():
                metrics.CONDUCTOR_RPC_PHASE_SECONDS.labels(
                    method, name).observe(seconds)
            if timings.statements:
                metrics.CONDUCTOR_DB_STATEMENTS.labels(method).inc(
                    timings.statements)


def add(name, seconds):
    """Add ``seconds`` to phase ``name`` of the current unit of work."""
    timings = current()
    if timings is not None:
        timings.add(name, seconds)


@contextlib.contextmanager
def phase(name):
    """Add the time spent inside to phase ``name``."""
    timings = current()
    if timings is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        timings.add(name, time.perf_counter() - started)


def _before_cursor_execute(conn, cursor, statement, parameters, context,
                           executemany):
    if current() is not None:
        conn.info.setdefault('cyborg_started', []).append(
            time.perf_counter())


def _after_cursor_execute(conn, cursor, statement, parameters, context,
                          executemany):
    timings = current()
    started = conn.info.get('cyborg_started')
    if timings is None or not started:
        return
    timings.add(DB, time.perf_counter() - started.pop())
    timings.statements += 1


def _handle_error(exception_context):
    # A failed statement has no after_cursor_execute: drop its start.
    connection = exception_context.connection
    started = connection.info.get('cyborg_started') if connection else None
    if started:
        started.pop()


def _listen():
    engine_class = sa.engine.Engine
    if not sa.event.contains(engine_class, 'before_cursor_execute',
                             _before_cursor_execute):
        sa.event.listen(engine_class, 'before_cursor_execute',
                        _before_cursor_execute)
        sa.event.listen(engine_class, 'after_cursor_execute',
                        _after_cursor_execute)
        sa.event.listen(engine_class, 'handle_error', _handle_error)


_listen()
