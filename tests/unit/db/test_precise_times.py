"""Timestamps keep their microseconds on every engine (migration
6b2d8f4e1c07): MariaDB's DATETIME kept whole seconds, where PostgreSQL
and SQLite keep microseconds.

The model/migration comparison in test_migration.py does not see a
DATETIME's fraction: alembic compares a type's arguments only when both
sides have as many, and MariaDB's DATETIME has none.  A migration that
added a timestamp column as ``sa.DateTime()`` passes it, and the column
keeps whole seconds in production; these tests read the precisions back.
"""

import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy import orm

from cyborg.db import migration
from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.fixtures import databases
from tests.unit.db import test_migration

BEFORE = 'd4b8e2f1a7c3'
THEN = datetime.datetime(2030, 5, 1, 10, 0, 0, 123456)
LATER = THEN + datetime.timedelta(microseconds=654321)


def _timestamp_columns():
    return {(table.name, column.name)
            for table in models.Base.metadata.tables.values()
            for column in table.columns
            if isinstance(column.type, sa.DateTime)}


def test_every_timestamp_column_has_microseconds_on_mysql():
    with databases.throwaway_database('mysql') as url:
        databases.create_schema(url)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as connection:
                columns = dict(((t, c), fsp) for t, c, fsp in
                               connection.execute(sa.text(
                                   'SELECT table_name, column_name, '
                                   'datetime_precision FROM '
                                   'information_schema.columns WHERE '
                                   'table_schema = DATABASE() AND '
                                   "data_type IN ('datetime', 'timestamp')"
                               )).all())
        finally:
            engine.dispose()
    assert set(columns) == _timestamp_columns()
    assert set(columns.values()) == {6}, columns


@pytest.mark.parametrize('kind', databases.KINDS)
def test_a_time_keeps_its_microseconds(kind):
    with api_fixture.database_in_use(kind) as engine:
        with orm.Session(engine) as session, session.begin():
            session.add(models.Host(hostname='h1', placement_synced=False,
                                    created_at=THEN, last_report_at=LATER))
        with orm.Session(engine) as session:
            host = session.scalars(sa.select(models.Host)).one()
            assert (host.created_at, host.last_report_at) == (THEN, LATER)
            # And compared to the microsecond (a due time, a deadline).
            assert session.scalar(sa.select(sa.func.count()).where(
                models.Host.last_report_at > THEN,
                models.Host.created_at < LATER)) == 1


def test_the_migration_keeps_the_rows_there():
    with databases.throwaway_database('mysql') as url:
        migration.upgrade(url, BEFORE)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(
                    "INSERT INTO hosts (hostname, placement_synced, "
                    "created_at, last_report_at) VALUES "
                    "('h1', 1, '2030-05-01 10:00:00', NULL)"))
                connection.execute(sa.text(
                    "INSERT INTO device_profiles (uuid, name, profile_json, "
                    "created_at) VALUES ('u1', 'gpu', '[]', "
                    "'2030-05-01 10:00:01')"))
            migration.upgrade(url)
            assert test_migration._differences(url) == []
            with engine.begin() as connection:
                assert connection.execute(sa.text(
                    'SELECT hostname, placement_synced, created_at, '
                    'last_report_at FROM hosts')).all() == [
                    ('h1', 1, THEN.replace(microsecond=0), None)]
                assert connection.execute(sa.text(
                    'SELECT name, created_at FROM device_profiles')).all() \
                    == [('gpu', datetime.datetime(2030, 5, 1, 10, 0, 1))]
                connection.execute(sa.text(
                    'UPDATE hosts SET last_report_at = :t'), {'t': LATER})
                assert connection.execute(sa.text(
                    'SELECT last_report_at FROM hosts')).scalar() == LATER
        finally:
            engine.dispose()


def test_a_long_transaction_ends_the_migration_soon_named():
    """The tables are rebuilt: a transaction holding one (an old
    conductor's, in the middle of a report) ends the upgrade after
    ``lock_wait`` seconds, naming it, instead of every query of that
    table queueing behind the ALTER; run again, it finishes."""
    with databases.throwaway_database('mysql') as url:
        migration.upgrade(url, BEFORE)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as holder:
                holder.execute(sa.text('SELECT count(*) FROM devices'))
                with pytest.raises(migration.UpgradeRefused) as refused:
                    migration.upgrade(url, lock_wait=2)
                holder.rollback()
        finally:
            engine.dispose()
        assert 'after 2 s' in str(refused.value)
        assert 'in a transaction since' in str(refused.value)
        assert migration.version(url) == BEFORE
        migration.upgrade(url)
        assert migration.version(url) == migration.head()
        assert test_migration._differences(url) == []
