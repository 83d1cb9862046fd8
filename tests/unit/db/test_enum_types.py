"""PostgreSQL's enum types hold exactly the values the models list.

The model/migration comparison in test_migration.py does not look inside
PostgreSQL enum types: a migration that adds a value to a model's
``sa.Enum`` without ``ALTER TYPE ... ADD VALUE`` passes it, and the first
row with the new value fails in production.  This test reads the types
back from the database the migrations built.
"""

import sqlalchemy as sa

from cyborg.db import models
from tests.fixtures import databases


def _model_enums():
    enums = {}
    for table in models.Base.metadata.tables.values():
        for column in table.columns:
            if isinstance(column.type, sa.Enum):
                enums[column.type.name] = list(column.type.enums)
    return enums


def _database_enums(url):
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.text(
                'SELECT t.typname, e.enumlabel FROM pg_type t '
                'JOIN pg_enum e ON e.enumtypid = t.oid '
                'ORDER BY t.typname, e.enumsortorder'))
            enums = {}
            for name, label in rows:
                enums.setdefault(name, []).append(label)
            return enums
    finally:
        engine.dispose()


def test_postgresql_enum_types_match_the_models():
    expected = _model_enums()
    assert expected, 'no enum columns found in cyborg.db.models'
    with databases.throwaway_database('postgresql') as url:
        databases.create_schema(url)
        assert _database_enums(url) == expected
