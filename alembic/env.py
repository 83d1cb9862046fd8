"""Alembic environment: migrations run online against one connection.

cyborg.db.migration builds the alembic Config (script location and URL), so
this file needs no alembic.ini.  A caller may pass an open connection in
``config.attributes['connection']`` to run inside its own transaction.
"""

from alembic import context
import sqlalchemy as sa

from cyborg.db import models

target_metadata = models.Base.metadata


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
        _run(connection)
        return
    engine = sa.create_engine(context.config.get_main_option('sqlalchemy.url'),
                              poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit('cyborg migrations run online only')
run_migrations_online()
