"""Migration 8db7069d63f0: ``health_code`` on devices and deployables,
why a record is in its health, for the health state machine.  The rows of
before it whose reasons begin in the ways the machine read back get the
code that says the same, the one ``health_machine.code_of`` reads from
such a row without a code; the others keep none.  Run again (after an
interruption) it changes nothing more."""

import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.conductor import health_machine as m
from cyborg.db import migration
from cyborg.db import models
from tests.fixtures import databases

BEFORE = '9f28eb616548'
REVISION = '8db7069d63f0'

# (health, reason as the previous release wrote it, code after).
ROWS = [
    ('unhealthy', 'the device vanished or its driver was unbound: PCI '
     'function 0000:81:00.0 disappeared', 'gone'),
    ('probing', 'the device vanished or its driver was unbound', 'gone'),
    # Who took it out is not said: the conductor's rule, as before.
    ('unhealthy', 'no re-probe verdict within 60 s', 'conductor:no-verdict'),
    ('probing', 'came back; re-probing', 'came-back'),
    ('lost', 'the hardware vanished while allocations still hold it',
     'lost'),
    ('lost', 'the hardware vanished while not healthy (unhealthy: XID 79)',
     'lost:unhealthy'),
    ('lost', 'the hardware vanished while its device was maintaining',
     'lost:in-status'),
    # Nothing read back, or not in a health it is written in.
    ('unhealthy', 'XID 79: fallen off the bus', None),
    ('unhealthy', 'XID 79; then the device vanished or its driver was '
     'unbound', None),
    ('unhealthy', None, None),
    ('suspect', 'the device vanished or its driver was unbound', None),
    ('lost', 'came back; re-probing', None),
    ('healthy', None, None),
]


def _seed(engine):
    devices, deployables = (models.Device.__table__,
                            models.Deployable.__table__)
    with engine.begin() as c:
        for number, (health, reason, _code) in enumerate(ROWS, start=1):
            values = dict(uuid=str(uuidlib.uuid4()), health=health,
                          health_reason=reason)
            c.execute(sa.insert(devices).values(
                id=number, type='GPU', vendor='v', model='m',
                hostname='h1', status='enabled', **values))
            c.execute(sa.insert(deployables).values(
                dict(values, uuid=str(uuidlib.uuid4()), id=number,
                     name=f'h1_dep{number}', device_id=number)))


def _codes(engine):
    with engine.connect() as c:
        return {table: c.execute(sa.select(t.c.health_code)
                                 .order_by(t.c.id)).scalars().all()
                for table, t in (('devices', models.Device.__table__),
                                 ('deployables',
                                  models.Deployable.__table__))}


def test_the_codes_filled_are_those_the_machine_reads_from_reasons():
    for health, reason, code in ROWS:
        assert m.code_of(m.Record(health=health, reason=reason)) == code


@pytest.mark.parametrize('kind', databases.KINDS)
def test_codes_are_filled_from_the_reasons_of_rows_of_before(kind):
    with databases.throwaway_database(kind) as url:
        migration.upgrade(url, BEFORE)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            _seed(engine)
            migration.upgrade(url, REVISION)
            assert migration.version(url) == REVISION
            expected = [code for _health, _reason, code in ROWS]
            assert _codes(engine) == {'devices': expected,
                                      'deployables': expected}
            # Run again (an interrupted upgrade starts it over): the
            # codes a conductor wrote since stay.
            d = models.Device.__table__
            with engine.begin() as c:
                c.execute(sa.update(d).where(d.c.id == 1)
                          .values(health_code='fault'))
            migration.stamp(url, BEFORE)
            migration.upgrade(url)
            assert _codes(engine) == {'devices': ['fault'] + expected[1:],
                                      'deployables': expected}
        finally:
            engine.dispose()
