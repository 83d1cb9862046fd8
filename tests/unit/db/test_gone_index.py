"""Finding the deployables kept as gone and the lost devices (every
conductor, once a minute) reads the few rows that are, through
``deployables_gone_idx`` and ``devices_health_idx``, not the whole
tables: the database's own plan says so, on MariaDB and PostgreSQL, with
many deployables of which two are gone and many devices of which one is
lost."""

import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import inventory
from tests.fixtures import databases

DEPLOYABLES = 4000
DEVICES = 2000


def _fill(connection):
    device = models.Device.__table__
    deployable = models.Deployable.__table__
    connection.execute(sa.insert(device), [
        {'uuid': '00000000-0000-0000-0000-%012d' % i, 'type': 'FPGA',
         'vendor': '0xABCD', 'model': 'm', 'hostname': 'host%d' % (i % 50),
         'status': 'enabled', 'health': 'lost' if i == 42 else 'healthy',
         'health_faults': 0, 'health_flaps': 0} for i in range(DEVICES)])
    ids = [r.id for r in connection.execute(sa.select(device.c.id))]
    connection.execute(sa.insert(deployable), [
        {'uuid': '10000000-0000-0000-0000-%012d' % i, 'name': 'd%d' % i,
         'num_accelerators': 1, 'device_id': ids[i % 100],
         'gone': i in (7, 3001), 'health': 'healthy', 'health_faults': 0,
         'health_flaps': 0} for i in range(DEPLOYABLES)])


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_the_gone_ones_are_found_through_the_index(kind):
    with databases.throwaway_database(kind) as url:
        databases.create_schema(url)
        engine = sa.create_engine(url)
        try:
            with engine.begin() as connection:
                _fill(connection)
            with engine.connect() as connection:
                for table in ('deployables', 'devices'):
                    connection.execute(sa.text(
                        f'ANALYZE TABLE {table}' if kind == 'mysql'
                        else f'ANALYZE {table}'))
                statement = inventory._gone_statement(False)
                found = connection.execute(statement).all()
                assert sorted((r.kind, r.uuid[-4:]) for r in found) == [
                    ('deployable', '0007'), ('deployable', '3001'),
                    ('device', '0042')]
                sql = str(statement.compile(
                    dialect=engine.dialect,
                    compile_kwargs={'literal_binds': True}))
                plan = '\n'.join(str(tuple(r)) for r in connection.execute(
                    sa.text('EXPLAIN ' + sql)))
        finally:
            engine.dispose()
    assert 'deployables_gone_idx' in plan, plan
    assert 'devices_health_idx' in plan, plan
