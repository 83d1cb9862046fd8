"""Effective health: a deployable's (worked out in Python) and an ARQ's
device_health (worked out in SQL) agree with ``states.worst`` for every
pair of states, and a word outside the vocabulary fails no list, on
every database kind (the ARQ's is SQL the database works out)."""

import itertools
import json

import pytest
import sqlalchemy as sa
from sqlalchemy import orm

from cyborg.common import states
from cyborg.db import models
from cyborg.objects.accelerator_requests import AcceleratorRequest
from cyborg.objects.deployables import Deployable
from tests.fixtures import api as api_fixture
from tests.fixtures import databases

PAIRS = list(itertools.product(states.HEALTH_STATES, repeat=2))


@pytest.fixture(params=databases.KINDS)
def db(request):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _seed(engine, pairs):
    """One device, deployable and ARQ bound to it per (deployable health,
    device health) pair; reasons name whose health it is."""
    with orm.Session(engine) as session, session.begin():
        profile = models.DeviceProfile(uuid='p-uuid', name='dp',
                                       profile_json=json.dumps([{}]))
        session.add(profile)
    for index, (own, device) in enumerate(pairs):
        seeded = api_fixture.seed_device(engine, 'host%d' % index,
                                         'dep-%d' % index, handles=1)
        with orm.Session(engine) as session, session.begin():
            session.execute(
                sa.update(models.Device)
                .where(models.Device.id == seeded['device_id'])
                .values(health=device, health_reason='device %d' % index))
            session.execute(
                sa.update(models.Deployable)
                .where(models.Deployable.id == seeded['deployable_id'])
                .values(health=own, health_reason='own %d' % index))
            session.add(models.ExtARQ(
                uuid='arq-%02d' % index, state='Bound',
                device_profile_id=session.scalar(
                    sa.select(models.DeviceProfile.id)),
                device_profile_group_id=0, project_id='p1',
                deployable_id=seeded['deployable_id']))


def _expected(index, own, device):
    worse = states.worst(own, device)
    if worse == own:
        return own, 'own %d' % index
    return device, 'device %d' % index


def test_deployables_and_arqs_agree_with_worst(db, admin_context):
    _seed(db, PAIRS)
    deployables = Deployable.list(admin_context, limit=1000)
    arqs = AcceleratorRequest.list(admin_context)
    assert len(deployables) == len(arqs) == len(PAIRS)
    for index, (own, device) in enumerate(PAIRS):
        expected = _expected(index, own, device)
        shown = deployables[index]
        assert (shown.health, shown.health_reason) == expected, (own, device)
        arq = arqs[index]
        assert (arq.device_health, arq.device_health_reason) == expected, (
            own, device)


def test_an_unbound_arq_has_no_device_health(db, admin_context):
    _seed(db, [(states.HEALTHY, states.LOST)])
    with orm.Session(db) as session, session.begin():
        session.execute(sa.update(models.ExtARQ).values(
            state='Initial', deployable_id=None))
    [arq] = AcceleratorRequest.list(admin_context)
    assert (arq.device_health, arq.device_health_reason) == (None, None)


def test_an_unknown_word_ranks_as_healthy_and_fails_nothing(
        db, admin_context):
    _seed(db, [('bogus', states.SUSPECT), (states.SUSPECT, 'bogus')])
    deployables = Deployable.list(admin_context)
    arqs = AcceleratorRequest.list(admin_context)
    assert [d.health for d in deployables] == [states.SUSPECT,
                                               states.SUSPECT]
    assert [a.device_health for a in arqs] == [states.SUSPECT,
                                               states.SUSPECT]
