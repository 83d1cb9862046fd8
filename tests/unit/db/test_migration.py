"""The alembic migrations build exactly the schema cyborg.db.models
describes, on each database engine we support."""

from alembic import autogenerate
from alembic import migration as alembic_migration
import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from tests.fixtures import databases


def _differences(url):
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            context = alembic_migration.MigrationContext.configure(
                connection, opts={'compare_type': True,
                                  'compare_server_default': True})
            return autogenerate.compare_metadata(context,
                                                 models.Base.metadata)
    finally:
        engine.dispose()


@pytest.mark.parametrize('kind', databases.KINDS)
def test_migrations_match_models(kind):
    with databases.throwaway_database(kind) as url:
        databases.create_schema(url)
        assert migration.version(url) == migration.head()
        assert _differences(url) == []


@pytest.mark.parametrize('kind', databases.KINDS)
def test_upgrade_is_idempotent(kind):
    with databases.throwaway_database(kind) as url:
        assert migration.version(url) is None
        migration.upgrade(url)
        migration.upgrade(url)
        assert migration.version(url) == migration.head()


def test_stamp_records_head_without_creating_tables():
    with databases.throwaway_database('sqlite') as url:
        migration.stamp(url)
        assert migration.version(url) == migration.head()
        engine = sa.create_engine(url)
        try:
            assert sa.inspect(engine).get_table_names() == ['alembic_version']
        finally:
            engine.dispose()


def test_one_head_only():
    from alembic import script
    config = migration._config('sqlite://')
    heads = script.ScriptDirectory.from_config(config).get_heads()
    assert len(heads) == 1, 'alembic branches must be merged: %s' % heads


def test_a_batch_of_nova_events_is_found_by_its_index():
    """Each batch of Nova events is read, claimed, postponed and forgotten
    by its id; MariaDB scanned (and, for the UPDATE and DELETE, locked)
    every row of the table for it, waiting on every bind recording its
    own event meanwhile."""
    with databases.throwaway_database('mysql') as url:
        databases.create_schema(url)
        engine = sa.create_engine(url)
        try:
            with engine.connect() as c:
                plan = c.execute(sa.text(
                    "EXPLAIN DELETE FROM nova_events WHERE batch_id = 'b'")
                ).mappings().first()
        finally:
            engine.dispose()
    assert plan['key'] == 'nova_events_batch_id_idx', dict(plan)
