"""cyborg-dbsync upgrade run again after an interruption, a long
transaction in its way, and names the exact collation would make equal.

MariaDB commits each DDL statement at once: a migration interrupted
between two leaves the first done and the revision unchanged, and the
next run starts it over (doc/source/upgrade.rst, "Interrupted upgrades").
"""

import contextlib

from alembic import command as alembic_command
import pytest
import sqlalchemy as sa

from cyborg.db import migration
from tests.fixtures import databases
from tests.unit.db import test_migration

_DDL = ('CREATE', 'ALTER', 'DROP')


class _Interrupted(Exception):
    pass


def _upgrade_one_statement(url):
    """Run the upgrade until it has run one DDL statement and is about to
    run the next: interrupted there.  True once it ran to the end."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    seen = []

    def before(_conn, _cursor, statement, *_args):
        if statement.lstrip().upper().startswith(_DDL):
            seen.append(statement)
            if len(seen) == 2:
                raise _Interrupted(statement)

    sa.event.listen(engine, 'before_cursor_execute', before)
    try:
        with engine.connect() as connection:
            alembic_command.upgrade(
                migration._config(url, connection), 'head')
            connection.commit()
        return True
    except _Interrupted:
        return False
    finally:
        engine.dispose()


def test_an_upgrade_interrupted_at_any_statement_finishes_when_run_again():
    with databases.throwaway_database('mysql') as url:
        runs = 0
        while not _upgrade_one_statement(url):
            runs += 1
            assert runs < 500
        assert runs > 30        # one run per statement, each interrupted
        assert migration.version(url) == migration.head()
        assert test_migration._differences(url) == []


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_a_long_transaction_on_a_table_ends_the_upgrade_soon_named(kind):
    with databases.throwaway_database(kind) as url:
        migration.upgrade(url, '9a4c6e8b1d3f')
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as holder:
                # A conductor amid a transaction that read a quota lock.
                holder.execute(sa.text('SELECT count(*) FROM quota_locks'))
                with pytest.raises(migration.UpgradeRefused) as refused:
                    migration.upgrade(url, 'c3f1a7d92e58', lock_wait=2)
                holder.rollback()
        finally:
            engine.dispose()
        message = str(refused.value)
        assert 'after 2 s' in message and 'run cyborg-dbsync upgrade again' \
            in message
        assert 'in a transaction since' in message
        migration.upgrade(url)
        assert migration.version(url) == migration.head()


@contextlib.contextmanager
def _profiles_before_exact_names(charset, collation, names):
    """(url, engine) of a throwaway MariaDB database in ``charset`` and
    ``collation``, upgraded to just before the exact profile names, with
    a profile of each of ``names`` (uuids u1, u2...)."""
    with databases.throwaway_database('mysql') as url:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(
                    'ALTER DATABASE %s CHARACTER SET %s COLLATE %s'
                    % (sa.make_url(url).database, charset, collation)))
            migration.upgrade(url, '35fe6285a556')
            with engine.begin() as connection:
                connection.execute(sa.text(
                    'INSERT INTO device_profiles (uuid, name, profile_json) '
                    'VALUES (:uuid, :name, \'[]\')'), [
                        {'uuid': 'u%d' % index, 'name': name}
                        for index, name in enumerate(names, 1)])
            yield url, engine
        finally:
            engine.dispose()


def test_names_equal_but_for_trailing_spaces_are_named_first():
    """A database whose collation is NO PAD (MySQL 8's default) can hold
    'gpu' and 'gpu '; the binary collation (PAD SPACE) cannot."""
    with _profiles_before_exact_names('utf8mb4', 'utf8mb4_unicode_nopad_ci',
                                      ['gpu', 'gpu ']) as (url, engine):
        for _attempt in range(2):
            with pytest.raises(migration.UpgradeRefused,
                               match='device_profiles.name .*'
                                     '"gpu" and "gpu " differ in '
                                     'trailing spaces only'):
                migration.upgrade(url)
        assert migration.version(url) == '35fe6285a556'
        with engine.begin() as connection:
            connection.execute(sa.text(
                "UPDATE device_profiles SET name = 'gpu-2' "
                "WHERE uuid = 'u2'"))
        migration.upgrade(url)
        assert migration.version(url) == migration.head()


def test_a_utf8mb3_database_still_upgrades():
    """A database created with the utf8 (utf8mb3) character set, as
    older guides did: the exact-name migrations convert its name columns
    to utf8mb4 as before (the look for clashes cannot compare a utf8mb3
    column in a utf8mb4 collation without converting it)."""
    with _profiles_before_exact_names('utf8mb3', 'utf8mb3_general_ci',
                                      ['gpu', 'fpga-é']) as (url, engine):
        migration.upgrade(url)
        assert migration.version(url) == migration.head()
        with engine.begin() as connection:
            names = connection.execute(sa.text(
                'SELECT name FROM device_profiles ORDER BY uuid'
            )).scalars().all()
        assert names == ['gpu', 'fpga-é']
