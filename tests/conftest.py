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

import logging
import os
import sys

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
def conf():
    c = cfg.ConfigOpts()
    cyborg.conf.register_opts(c)
    c([], project='cyborg', default_config_files=[], default_config_dirs=[])
    c.set_override('connection', 'sqlite://', group='database')
    yield c
    c.reset()
    # Nova taken for away is kept by id(conf), which a later test's conf
    # may reuse.
    nova = sys.modules.get('cyborg.conductor.nova')
    if nova is not None:
        nova._AWAY.clear()


@pytest.fixture
def db():
    engine = sa.create_engine('sqlite://',
                              poolclass=sa.pool.StaticPool,
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
