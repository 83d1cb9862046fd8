"""Migration a8c2e4f6b1d9: ``health_faults`` of an unhealthy or probing
device or deployable counts its failed re-probes now; the count the
previous release left there (the transient faults that took it out) is
set to 0, so that its first re-probe is not put off by doublings it
never earned.  A suspect record's count (its transient faults) stays."""

import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from tests.fixtures import databases

BEFORE = '6b2d8f4e1c07'
REVISION = 'a8c2e4f6b1d9'

# (health, health_faults before, after)
ROWS = [('healthy', 0, 0), ('suspect', 2, 2), ('unhealthy', 3, 0),
        ('probing', 2, 0), ('unhealthy', 0, 0), ('lost', 0, 0)]


def _seed(engine):
    devices, deployables = (models.Device.__table__,
                            models.Deployable.__table__)
    with engine.begin() as c:
        for number, (health, faults, _after) in enumerate(ROWS, start=1):
            values = dict(uuid=str(uuidlib.uuid4()), health=health,
                          health_faults=faults, health_flaps=number,
                          health_reason=f'r{number}')
            c.execute(sa.insert(devices).values(
                id=number, type='GPU', vendor='v', model='m',
                hostname='h1', status='enabled', **values))
            c.execute(sa.insert(deployables).values(
                dict(values, uuid=str(uuidlib.uuid4()), id=number,
                     name=f'h1_dep{number}', device_id=number)))


def _health(engine):
    with engine.connect() as c:
        return {table: c.execute(
            sa.select(t.c.health, t.c.health_faults, t.c.health_flaps,
                      t.c.health_reason).order_by(t.c.id)).all()
            for table, t in (('devices', models.Device.__table__),
                             ('deployables', models.Deployable.__table__))}


def _expected():
    rows = [(health, after, number, f'r{number}')
            for number, (health, _faults, after) in enumerate(ROWS, 1)]
    return {'devices': rows, 'deployables': rows}


@pytest.mark.parametrize('kind', databases.KINDS)
def test_records_out_of_the_schedule_start_with_no_failed_re_probe(kind):
    with databases.throwaway_database(kind) as url:
        migration.upgrade(url, BEFORE)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            _seed(engine)
            migration.upgrade(url, REVISION)
            assert migration.version(url) == REVISION
            assert _health(engine) == _expected()
            # Run again (an interrupted upgrade starts it over): the same.
            migration.stamp(url, BEFORE)
            migration.upgrade(url)
            assert _health(engine) == _expected()
        finally:
            engine.dispose()
