"""Whether a host shares its compute node provider (another host row
records the same one: ``hosts.has_sharer``) is read by every bind's take
of a free handle and, for every host, by the exports: through
``hosts_compute_rp_uuid_idx``, not by reading the whole hosts table each
time.  The database's own plan says so, on MariaDB and PostgreSQL, with
many hosts of which two share a compute node."""

import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import attach_handles
from cyborg.db.api import hosts as host_db
from tests.fixtures import databases

HOSTS = 3000
INDEX = 'hosts_compute_rp_uuid_idx'


def _fill(connection):
    connection.execute(sa.insert(models.Host.__table__), [
        {'hostname': 'host%d' % i, 'placement_synced': True,
         'compute_rp_uuid': '20000000-0000-0000-0000-%012d' % (
             7 if i == HOSTS - 1 else i),
         'compute_node_name': 'node%d' % i} for i in range(HOSTS)])
    # One device of a host sharing its node, for the take to read.
    connection.execute(sa.insert(models.Device.__table__), [
        {'uuid': '00000000-0000-0000-0000-000000000001', 'type': 'FPGA',
         'vendor': '0xABCD', 'model': 'm', 'hostname': 'host%d' % (HOSTS - 1),
         'status': 'enabled', 'health': 'healthy', 'health_faults': 0,
         'health_flaps': 0}])
    device_id = connection.scalar(sa.select(models.Device.id))
    return connection.execute(sa.insert(models.Deployable.__table__).values(
        uuid='10000000-0000-0000-0000-000000000001', name='d1',
        num_accelerators=1, device_id=device_id, gone=False,
        health='healthy', health_faults=0, health_flaps=0)
    ).inserted_primary_key[0]


def _plan(connection, engine, statement, kind):
    sql = str(statement.compile(dialect=engine.dialect,
                                compile_kwargs={'literal_binds': True}))
    return '\n'.join(str(tuple(r)) for r in connection.execute(
        sa.text('EXPLAIN ' + sql)))


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_sharing_hosts_are_found_through_the_index(kind, admin_context):
    with databases.throwaway_database(kind) as url:
        databases.create_schema(url)
        engine = sa.create_engine(url)
        try:
            with engine.begin() as connection:
                deployable_id = _fill(connection)
            with engine.connect() as connection:
                connection.execute(sa.text(
                    'ANALYZE TABLE hosts' if kind == 'mysql'
                    else 'ANALYZE hosts'))
                h = models.Host.__table__
                exports = sa.select(h.c.hostname,
                                    host_db.has_sharer(h).label('shared'))
                shared = {name for name, sharing in
                          connection.execute(exports) if sharing}
                take = attach_handles._FREE_HANDLE.params(
                    deployable_id=deployable_id)
                plans = [_plan(connection, engine, statement, kind)
                         for statement in (exports, take)]
        finally:
            engine.dispose()
    assert shared == {'host7', 'host%d' % (HOSTS - 1)}
    for plan in plans:
        assert INDEX in plan, plan
