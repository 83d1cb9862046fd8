"""On MariaDB/MySQL the migrations give each string column the collation
the models give it (``cyborg.db.models.EXACT_NAME``), and the others the
table's.

The model/migration comparison in test_migration.py does not see a
collation the database lacks: alembic compares collations only when both
sides name one, and MariaDB names none for a column with the table's.
A migration that forgot one passes it, and the column keeps ignoring
case in production.  These tests read the collations back from the
database the migrations built, and check that the migration giving them
keeps the rows already there.
"""

import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from tests.fixtures import databases


def _expected(dialect, table_collations):
    expected = {}
    for table in models.Base.metadata.tables.values():
        for column in table.columns:
            collation = getattr(column.type.dialect_impl(dialect),
                                'collation', None)
            expected[table.name, column.name] = (
                collation or table_collations[table.name])
    return expected


def test_mysql_column_collations_match_the_models():
    with databases.throwaway_database('mysql') as url:
        databases.create_schema(url)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as connection:
                tables = dict(connection.execute(sa.text(
                    'SELECT table_name, table_collation FROM '
                    'information_schema.tables '
                    'WHERE table_schema = DATABASE()')).all())
                columns = {(t, c): collation for t, c, collation in
                           connection.execute(sa.text(
                               'SELECT table_name, column_name, '
                               'collation_name FROM '
                               'information_schema.columns '
                               'WHERE table_schema = DATABASE() '
                               'AND collation_name IS NOT NULL')).all()
                           if t != 'alembic_version'}
            expected = _expected(engine.dialect, tables)
        finally:
            engine.dispose()
    assert columns == {key: expected[key] for key in columns}
    exact = {key for key, collation in columns.items()
             if collation == models.EXACT_COLLATION_MARIADB}
    assert exact == {('device_profiles', 'name'),
                     ('device_profiles', 'project_id'),
                     ('device_profile_projects', 'project_id'),
                     ('extended_accelerator_requests', 'project_id'),
                     ('quota_locks', 'project_id'),
                     ('remote_pools', 'name'),
                     ('remote_pool_handles', 'fabric_address'),
                     ('attributes', 'key'),
                     ('deployables', 'name'),
                     ('hosts', 'hostname'),
                     ('hosts', 'compute_node_name'),
                     ('devices', 'hostname'),
                     ('health_senders', 'hostname'),
                     ('health_senders', 'sender')}


def test_the_migration_keeps_the_profiles_there_and_matches_them_exactly():
    with databases.throwaway_database('mysql') as url:
        migration.upgrade(url, '35fe6285a556')
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(
                    "INSERT INTO device_profiles (uuid, name, profile_json, "
                    "project_id, visibility) VALUES "
                    "('u1', 'fpga-small', '[]', 'Owner', 'private')"))
                connection.execute(sa.text(
                    "INSERT INTO device_profile_projects (profile_id, "
                    "project_id) VALUES (1, 'Tenant-A')"))
            migration.upgrade(url)
            with engine.connect() as connection:
                def names(where):
                    return connection.execute(sa.text(
                        'SELECT p.name FROM device_profiles p JOIN '
                        'device_profile_projects s ON s.profile_id = p.id '
                        'WHERE ' + where)).scalars().all()
                assert names("p.name = 'fpga-small' AND p.project_id = "
                             "'Owner' AND s.project_id = 'Tenant-A'") == [
                    'fpga-small']
                assert names("p.name = 'FPGA-SMALL'") == []
                assert names("p.project_id = 'owner'") == []
                assert names("s.project_id = 'tenant-a'") == []
        finally:
            engine.dispose()
