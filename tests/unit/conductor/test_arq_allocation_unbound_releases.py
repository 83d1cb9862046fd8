"""Claims owed a release (``placement_releases``) whose ARQ exists but is
in no bind: the stuck-bind check (``release_left_claims``) releases them
against the real (embedded) Placement; it left them to the ARQ's next
allocation or its deletion, the unit held meanwhile.  Never the claim of
an ARQ in a bind."""

import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import placement_releases as release_db
from cyborg.placement import client as placement_client
from tests.unit.conductor import test_arq_allocation
from tests.unit.conductor.test_arq_allocation import (
    _arqs, _held, _owed, _provide, _row, _usage)

# The shared Placement and fixtures of test_arq_allocation.
placement_url, fake_nova, aconf, ctx, trait = (
    test_arq_allocation.placement_url, test_arq_allocation.fake_nova,
    test_arq_allocation.aconf, test_arq_allocation.ctx,
    test_arq_allocation.trait)


def _left_claim(aconf, db, ctx, trait, state='Unbound'):
    """(device, ARQ uuid): an ARQ in ``state``, in no bind, whose consumer
    still holds the claim of an earlier allocation, its release owed."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(models.ExtARQ.uuid == uuid)
                  .values(state=state))
    placement_client.get_client(aconf).claim(
        uuid, {device.rp_uuid: {'resources': {'FPGA': 1}}}, 'p1', 'u1',
        'K8S_POD')
    db_api.write_retrying(ctx, release_db.add, ctx, uuid)
    return device, uuid


def _into_a_bind(db, uuid):
    bind_id = str(uuidlib.uuid4())
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(models.ExtARQ.uuid == uuid)
                  .values(state='BindStarted', bind_id=bind_id,
                          consumer_id='pod-2', consumer_type='k8s-pod'))
    return bind_id


@pytest.mark.parametrize('state', ['Unbound', 'Initial'])
def test_the_claim_of_an_arq_in_no_bind_is_released(
        aconf, db, ctx, trait, placement_url, state):
    device, uuid = _left_claim(aconf, db, ctx, trait, state)
    assert _usage(placement_url, device.rp_uuid) == 1
    assert release_db.owed(ctx) == []
    assert arq_binding.fail_stuck(aconf, ctx) == 0
    assert _held(placement_url, uuid)['allocations'] == {}
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []
    assert _row(db, uuid).state == state
    # The ARQ is allocated again as any other.
    allocated = arq_allocation.allocate(aconf, ctx, uuid, 'pod-1',
                                        'k8s-pod')
    assert allocated['device_rp_uuid'] == device.rp_uuid
    assert _usage(placement_url, device.rp_uuid) == 1


def test_the_claim_of_an_arq_in_a_bind_is_left_to_it(
        aconf, db, ctx, trait, placement_url):
    device, uuid = _left_claim(aconf, db, ctx, trait)
    _into_a_bind(db, uuid)
    assert arq_allocation.release_left_claims(aconf, ctx) == 0
    assert _usage(placement_url, device.rp_uuid) == 1
    assert _owed(db) == [uuid]


def test_an_allocation_started_meanwhile_keeps_its_claim_and_record(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """The ARQ is allocated again between the query and the release: what
    the consumer holds may be that allocation's by then, and the record
    is its to settle (``_release_owed``)."""
    device, uuid = _left_claim(aconf, db, ctx, trait)
    query = release_db.owed_in_no_bind

    def then_bound(context, **kwargs):
        found = query(context, **kwargs)
        _into_a_bind(db, uuid)
        return found

    monkeypatch.setattr(release_db, 'owed_in_no_bind', then_bound)
    assert arq_allocation.release_left_claims(aconf, ctx) == 0
    assert _usage(placement_url, device.rp_uuid) == 1
    assert _owed(db) == [uuid]
