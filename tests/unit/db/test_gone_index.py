"""Finding the deployables kept as gone (every conductor, once a minute)
reads the few rows that are, through ``deployables_gone_idx``, not the
whole table: the database's own plan says so, on MariaDB and PostgreSQL,
with many deployables of which two are gone."""

import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import inventory
from tests.fixtures import databases

DEPLOYABLES = 4000


def _fill(connection):
    device = models.Device.__table__
    deployable = models.Deployable.__table__
    connection.execute(sa.insert(device), [
        {'uuid': '00000000-0000-0000-0000-%012d' % i, 'type': 'FPGA',
         'vendor': '0xABCD', 'model': 'm', 'hostname': 'host%d' % (i % 50),
         'status': 'enabled', 'health': 'healthy', 'health_faults': 0,
         'health_flaps': 0} for i in range(100)])
    ids = [r.id for r in connection.execute(sa.select(device.c.id))]
    connection.execute(sa.insert(deployable), [
        {'uuid': '10000000-0000-0000-0000-%012d' % i, 'name': 'd%d' % i,
         'num_accelerators': 1, 'device_id': ids[i % len(ids)],
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
                connection.execute(sa.text(
                    'ANALYZE TABLE deployables' if kind == 'mysql'
                    else 'ANALYZE deployables'))
                found = connection.execute(inventory._GONE).all()
                assert sorted(r.uuid[-4:] for r in found) == ['0007', '3001']
                sql = str(inventory._GONE.compile(
                    dialect=engine.dialect,
                    compile_kwargs={'literal_binds': True}))
                plan = '\n'.join(str(tuple(r)) for r in connection.execute(
                    sa.text('EXPLAIN ' + sql)))
        finally:
            engine.dispose()
    assert 'deployables_gone_idx' in plan, plan
