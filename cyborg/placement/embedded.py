"""The real OpenStack Placement service, served from this process.

For the all-in-one and for tests: the openstack-placement WSGI application
(``placement.deploy``) with ``auth_strategy = noauth2``, its own database
(schema made by placement's own alembic migrations) and a cheroot server
on a thread.  Cyborg reaches it with ``[placement] auth_type = none`` and
``endpoint_override = <url>``; ``cyborg.placement.client`` then sends the
token header noauth2 wants.

Placement keeps its database engine, policy enforcer and "standard traits
synced" flags in module globals, so one process serves ONE embedded
Placement at a time; starting a second raises RuntimeError.  Tests that need
several run them as processes::

    python -m cyborg.placement.embedded --port 8778 --db-connection URL
"""

import argparse
import signal
import sys
import threading

import sqlalchemy as sa
from oslo_config import cfg
from oslo_db.sqlalchemy import engines, exc_filters

from cyborg.common import serving

# The only place the request header of placement's noauth2 is spelled; it
# reads "<user>:<project>" from it and treats user "admin" as an admin.
NOAUTH_TOKEN = 'admin'

_ACTIVE_LOCK = threading.Lock()
_ACTIVE = None


def _placement_conf(db_connection):
    from placement import conf as placement_conf

    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    # Defaults, not overrides: the connection is required at parse time.
    conf.set_default('connection', db_connection, group='placement_database')
    conf([], project='placement', default_config_files=[],
         default_config_dirs=[])
    conf.set_override('auth_strategy', 'noauth2', group='api')
    conf.set_override('sync_on_startup', True, group='placement_database')
    return conf


def _in_memory(db_connection):
    url = sa.engine.make_url(db_connection)
    return (url.get_backend_name() == 'sqlite' and
            url.database in (None, '', ':memory:'))


def _create_engine(db_connection):
    if _in_memory(db_connection):
        # One in-memory database shared by every server thread.
        engine = sa.create_engine(
            'sqlite://', poolclass=sa.pool.StaticPool,
            connect_args={'check_same_thread': False})
        # Placement relies on oslo.db's errors (DBDuplicateEntry...).
        exc_filters.register_engine(engine)
        return engine
    return engines.create_engine(db_connection)


class EmbeddedPlacement:
    """The real Placement API on ``http://host:port`` with its own DB.

    ``threads`` request threads serve it, except on SQLite, which is served
    one request at a time (see ``_serve``).  With ``reuse_port``, several
    processes may serve one port (SO_REUSEPORT: the kernel spreads the
    connections), as Placement's workers do in a deployment.
    """

    def __init__(self, db_connection='sqlite://', host='127.0.0.1', port=0,
                 threads=8, reuse_port=False):
        self.db_connection = db_connection
        self.host = host
        self.requested_port = port
        self.port = None
        self.threads = threads
        self.reuse_port = reuse_port
        self.url = None
        self._server = None
        self._thread = None
        self._engine = None
        self._undo_patch = None

    def start(self):
        """Build the app, sync its schema, serve it; returns the base URL."""
        global _ACTIVE
        with _ACTIVE_LOCK:
            if _ACTIVE is not None:
                raise RuntimeError(
                    f'An embedded Placement already runs in this process '
                    f'({_ACTIVE.url}); placement keeps its database in '
                    f'module globals, so run another one as a process.')
            _ACTIVE = self
        try:
            app = self._load_app()
            self._serve(app)
        except BaseException:
            self.stop()
            raise
        return self.url

    def _load_app(self):
        from placement import db_api as placement_db
        from placement import deploy, policy
        from placement.objects import resource_class, trait

        conf = _placement_conf(self.db_connection)
        manager = placement_db.placement_context_manager
        if not manager._factory._started:
            # patch_engine starts the factory first: keep it off any real
            # database while it does.
            manager.configure(connection='sqlite://')
        self._engine = _create_engine(self.db_connection)
        self._undo_patch = manager.patch_engine(self._engine)
        # A new database needs the standard traits and classes again.
        trait._TRAITS_SYNCED = False
        resource_class._RESOURCE_CLASSES_SYNCED = False
        policy.reset()
        return deploy.loadapp(conf)

    def _serve(self, app):
        threads = self.threads
        if sa.engine.make_url(self.db_connection).get_backend_name() == \
                'sqlite':
            # In memory, every thread shares one connection and would mix
            # transactions; in a file, two writers that both read first
            # fail with "database is locked".  One request at a time.
            threads = 1
        self._server = serving.Server((self.host, self.requested_port), app,
                                      numthreads=threads,
                                      server_name='placement',
                                      reuse_port=self.reuse_port)
        # How often the serve loop looks at its stop flag (default 0.5 s).
        self._server.expiration_interval = 0.05
        self._server.prepare()
        host, port = self._server.bind_addr[:2]
        self.port = port
        self.url = f'http://{host}:{port}'
        self._thread = threading.Thread(target=self._server.serve,
                                        name='embedded-placement',
                                        daemon=True)
        self._thread.start()

    def stop(self):
        """Stop serving and release the database; safe to call twice."""
        global _ACTIVE
        if self._server is not None:
            self._server.stop()
            self._server = None
            self.url = self.port = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._undo_patch is not None:
            self._undo_patch()
            self._undo_patch = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        with _ACTIVE_LOCK:
            if _ACTIVE is self:
                _ACTIVE = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m cyborg.placement.embedded',
        description='Serve the real OpenStack Placement (noauth2) until '
                    'SIGTERM; prints its URL on the first line.')
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--db-connection', default='sqlite://',
                        help='SQLAlchemy URL of the Placement database '
                             '(created if its tables are missing).')
    parser.add_argument('--reuse-port', action='store_true',
                        help='Share the port with other processes started '
                             'with this flag (SO_REUSEPORT).')
    args = parser.parse_args(argv)

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    placement = EmbeddedPlacement(args.db_connection, args.host, args.port,
                                  reuse_port=args.reuse_port)
    print(placement.start(), flush=True)
    try:
        stopped.wait()
    finally:
        placement.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
