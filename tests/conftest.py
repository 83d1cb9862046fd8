"""Fixtures every test may use.

- ``conf``: a fresh ConfigOpts with all cyborg options registered.
- ``db``: an in-memory SQLite database with the schema, patched into the
  enginefacade for the test's duration (and until the background binds
  the test started have ended).
- ``admin_context``: a RequestContext for the service's own work.

And for every test: log handlers a test installs on the root logger (a
command's ``main()`` sets up oslo.log, the openstack client sets up its
own) are taken off again afterwards.  They write to the test's captured
stderr, which pytest closes: a thread that logs later, in another test,
would print "--- Logging error ---" tracebacks.

Every API this suite starts, in this process or as a child process,
checks its responses against their declared schemas: oslo.config reads
``[api]validate_responses`` from the environment.
"""

import gc
import logging
import os
import sys
import threading

import pytest
import sqlalchemy as sa
from oslo_config import cfg

import cyborg.conf
from cyborg.common import context as cyborg_context
from cyborg.db import api as db_api
from cyborg.db import models

os.environ.setdefault('OS_API__VALIDATE_RESPONSES', 'true')


@pytest.fixture(autouse=True)
def _root_log_handlers_restored():
    root = logging.getLogger()
    before = set(root.handlers)
    yield
    for handler in list(root.handlers):
        # pytest's own capture handlers come and go with each phase.
        if handler not in before and \
                not type(handler).__module__.startswith('_pytest'):
            root.removeHandler(handler)


@pytest.fixture
def conf(tmp_path):
    c = cfg.ConfigOpts()
    cyborg.conf.register_opts(c)
    c([], project='cyborg', default_config_files=[], default_config_dirs=[])
    c.set_override('connection', 'sqlite://', group='database')
    # Never the machine's /var/lib/cyborg (agent caches, health records).
    c.set_override('state_path', str(tmp_path / 'state'))
    yield c
    c.reset()
    # Nova taken for away is kept by id(conf), which a later test's conf
    # may reuse.
    nova = sys.modules.get('cyborg.conductor.nova')
    if nova is not None:
        nova._AWAY.clear()


class _TakenInTurn:
    """A lock a thread may take again while it holds it, released from any
    thread (a connection the garbage collector returns).  Waiting longer
    than ``LIMIT`` seconds fails the waiting thread with a clear error
    rather than hanging the test."""

    LIMIT = 60

    def __init__(self):
        self._cond = threading.Condition()
        self._owner = None
        self._depth = 0

    def acquire(self):
        me = threading.get_ident()
        with self._cond:
            free = self._cond.wait_for(
                lambda: self._owner in (None, me), timeout=self.LIMIT / 2)
        if not free:
            # A connection nobody closed is returned when collected.
            gc.collect()
        with self._cond:
            if not self._cond.wait_for(lambda: self._owner in (None, me),
                                       timeout=self.LIMIT / 2):
                raise RuntimeError(
                    f'The test database\'s one connection has been held '
                    f'by thread {self._owner} for {self.LIMIT} s')
            self._owner = me
            self._depth += 1

    def release(self):
        with self._cond:
            self._depth -= 1
            if self._depth <= 0:
                self._owner, self._depth = None, 0
                self._cond.notify_all()


class OneConnectionPool(sa.pool.StaticPool):
    """SQLite's in-memory database lives in one connection, which every
    thread of a test shares (StaticPool).  Threads taking it at once mixed
    their transactions (one's commit or rollback ended the other's: a
    delete lost, "no transaction is active"); here one thread at a time
    holds it, from checkout to checkin, as a thread holds a connection of
    a real pool."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._turns = _TakenInTurn()

    def _do_get(self):
        self._turns.acquire()
        try:
            return super()._do_get()
        except BaseException:
            self._turns.release()
            raise

    def _do_return_conn(self, record):
        super()._do_return_conn(record)
        self._turns.release()


@pytest.fixture
def db():
    engine = sa.create_engine('sqlite://',
                              poolclass=OneConnectionPool,
                              connect_args={'check_same_thread': False})

    @sa.event.listens_for(engine, 'connect')
    def _fk_on(dbapi_conn, _record):
        dbapi_conn.execute('PRAGMA foreign_keys=ON')

    models.Base.metadata.create_all(engine)
    undo = db_api.patch_engine(engine)
    yield engine
    _drain_background_binds()
    undo()
    engine.dispose()


def _drain_background_binds():
    """Wait for the binds a test left going on in the bind executor (the
    Nova event after a Bound): they use the test's one SQLite connection,
    which must not be closed under them."""
    binding = sys.modules.get('cyborg.conductor.arq_binding')
    if binding is not None:
        binding.BackgroundBinds().wait()


@pytest.fixture
def admin_context():
    return cyborg_context.get_admin_context()
