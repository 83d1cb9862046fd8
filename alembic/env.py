"""Alembic environment: migrations run online against one connection.

cyborg.db.migration builds the alembic Config (script location and URL), so
this file needs no alembic.ini.  A caller may pass an open connection in
``config.attributes['connection']`` to run inside its own transaction.
``config.attributes['lock_wait']`` bounds, in seconds, how long a
statement waits for a table another session holds (None: the server's
own bound, a day on MariaDB, none on PostgreSQL): meanwhile every other
query of that table queues behind it.
"""

from alembic import context
import sqlalchemy as sa

from cyborg.db import models

target_metadata = models.Base.metadata


def _bound_lock_waits(connection):
    seconds = context.config.attributes.get('lock_wait')
    if seconds is None:
        return
    dialect = connection.dialect.name
    if dialect in ('mysql', 'mariadb'):
        # Metadata locks (ALTER, CREATE INDEX); InnoDB's row lock waits
        # are bounded already (innodb_lock_wait_timeout, 50 s).
        connection.execute(sa.text(
            'SET SESSION lock_wait_timeout = %d' % seconds))
    elif dialect == 'postgresql':
        connection.execute(sa.text("SET lock_timeout = '%ds'" % seconds))


def _run(connection):
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode recreates the table.
        render_as_batch=connection.dialect.name == 'sqlite',
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online():
    connection = context.config.attributes.get('connection')
    if connection is not None:
        _bound_lock_waits(connection)
        _run(connection)
        return
    engine = sa.create_engine(context.config.get_main_option('sqlalchemy.url'),
                              poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            _bound_lock_waits(connection)
            # A session setting: it outlives this first transaction.
            connection.commit()
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit('cyborg migrations run online only')
run_migrations_online()
