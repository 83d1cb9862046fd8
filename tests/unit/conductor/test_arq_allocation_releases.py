"""Releases of standalone allocations' claims (cyborg.conductor
.arq_allocation.release_claim and the placement_releases queue) against
the real (embedded) Placement: every allocation of one ARQ claims under
the same consumer, the ARQ's uuid, so a release must take the claim it
means and no newer one, and a claim left behind must not stop the ARQ
from being allocated again."""

import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import placement_releases as release_db
from cyborg.placement import client as placement_client
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http
from tests.unit.conductor import test_arq_allocation
from tests.unit.conductor.test_arq_allocation import (
    _abandoned_claim, _allocated_racing, _arqs, _forwarder, _held,
    _is_release, _owed, _provide, _row, _usage)

# The shared Placement and fixtures of test_arq_allocation.
placement_url, fake_nova, aconf, ctx, trait = (
    test_arq_allocation.placement_url, test_arq_allocation.fake_nova,
    test_arq_allocation.aconf, test_arq_allocation.ctx,
    test_arq_allocation.trait)


def _group(name):
    return {'resources:FPGA': '1', 'trait:' + name: 'required'}


def _units(url, consumer):
    """{provider: units of FPGA} the consumer holds."""
    return {rp: a['resources']['FPGA'] for rp, a in
            _held(url, consumer)['allocations'].items()}


# -- a release takes the claim it means ---------------------------------------

def test_the_stuck_bind_check_leaves_a_newer_allocation_s_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """fail_stuck found an abandoned allocation in its bind and released
    the consumer's allocations (DELETE /allocations/{arq uuid}, tied to
    no claim).  Where the client unbound the ARQ and allocated it again
    before that release landed, it took the newer allocation's claim: the
    ARQ stayed Bound for pod-2 with nothing held in Placement, which
    offered the unit again."""
    device, uuid = _abandoned_claim(aconf, db, ctx, trait)
    release = arq_allocation.release_claim
    calls = []

    def slow_release(placement, context, arq_uuid, bind_id, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            # Meanwhile: the client gives up on pod-1, unbinds the (now
            # failed) ARQ, releasing the old claim, and allocates it for
            # pod-2.
            arq_binding.unbind(aconf, ctx, [uuid])
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
        return release(placement, context, arq_uuid, bind_id, **kwargs)

    monkeypatch.setattr(arq_allocation, 'release_claim', slow_release)
    assert arq_binding.fail_stuck(aconf, ctx) == 1
    assert len(calls) > 1
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Bound', 'pod-2')
    assert _units(placement_url, uuid) == {device.rp_uuid: 1}
    assert _usage(placement_url, device.rp_uuid) == 1
    # The check's record of the release: the new allocation settled it.
    assert _owed(db) == []


def test_an_unbind_leaves_a_newer_allocation_s_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """An unbind whose release was overtaken by another unbind and a new
    allocation of the ARQ took the newer claim with its DELETE; it leaves
    it (and, finding the ARQ in the newer bind, unbinds that as asked)."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, _group(trait))
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    release = arq_binding.release_allocations
    unbound = arq_binding._unbind_released
    calls, seen = [], []

    def overtaken(conf, rows):
        calls.append(1)
        if len(calls) == 1:
            arq_binding.unbind(aconf, ctx, [uuid])
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
        return release(conf, rows)

    def watched(context, arq_uuids, released, kept):
        # What Placement holds once the first round's release is done.
        seen.append(_usage(placement_url, device.rp_uuid))
        return unbound(context, arq_uuids, released, kept)

    monkeypatch.setattr(arq_binding, 'release_allocations', overtaken)
    monkeypatch.setattr(arq_binding, '_unbind_released', watched)
    arq_binding.unbind(aconf, ctx, [uuid])
    # calls[1] and seen[0] are the nested unbind's; then ours, whose
    # release, read in pod-1's bind, left pod-2's claim.
    assert seen[1] == 1
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Unbound', None)
    assert _usage(placement_url, device.rp_uuid) == 0


def test_a_release_reads_the_claim_before_the_bind(aconf, db, ctx, trait,
                                                   placement_url):
    """What the ARQ's own uuid holds is read, then the bind checked: a
    claim read while the ARQ is in the bind released for is that
    bind's."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, _group(trait))
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    old_bind = _row(db, uuid).bind_id
    # The ARQ's first allocation: its consumer is the ARQ's uuid.
    assert old_bind == uuid
    placement = placement_client.get_client(aconf)
    # Read in pod-1's bind, released after a new allocation: left alone.
    read = placement.get_claim(uuid)
    arq_binding.unbind(aconf, ctx, [uuid])
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
    assert not arq_allocation._release_own_uuid(placement, ctx, uuid,
                                                old_bind, claim=read)
    assert not arq_allocation.release_claim(placement, ctx, uuid, old_bind)
    assert _usage(placement_url, device.rp_uuid) == 1
    # The current bind's own release takes it.
    assert arq_allocation.release_claim(placement, ctx, uuid,
                                        _row(db, uuid).bind_id)
    assert _usage(placement_url, device.rp_uuid) == 0


# -- a claim left behind does not stop the ARQ ------------------------------

def test_an_unbound_arq_owed_a_release_is_allocated_again(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """An unbind raced an allocation while Placement went away: the claim
    was recorded as owed (then released only once the ARQ was deleted).
    The Unbound ARQ could never be allocated again: every claim under its
    consumer (consumer generation null) conflicted with the leaked claim,
    and the allocation answered 409 '... claims lost to other
    consumers'.  Its next allocation releases the leaked claim first."""
    device = _provide(aconf, db, trait, total=2)
    uuid, = _arqs(db, ctx, _group(trait))
    _allocated_racing(aconf, ctx, uuid, lambda: arq_binding.unbind(
        aconf, ctx, [uuid]), placement_url, monkeypatch)
    monkeypatch.undo()
    assert _row(db, uuid).state == 'Unbound'
    assert _owed(db) == [uuid]
    # Placement back, allocated again before the periodic's release.
    assert _usage(placement_url, device.rp_uuid) == 1
    result = arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
    assert result['device_rp_uuid'] == device.rp_uuid
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Bound', 'pod-2')
    # Its own claim only: the leaked one is gone, and so is the record.
    assert _units(placement_url, uuid) == {}
    assert _units(placement_url, row.bind_id) == {device.rp_uuid: 1}
    assert _usage(placement_url, device.rp_uuid) == 1
    assert _owed(db) == []


def test_a_claim_left_unrecorded_is_released_by_the_next_allocation(
        aconf, db, ctx, trait, placement_url):
    """A claim of the ARQ's consumer no record speaks of (one whose
    release was neither done nor recorded): the allocation's claims are
    refused for the ARQ's own consumer, which is no other consumer
    taking the capacity.  It releases the earlier claim and claims."""
    device = _provide(aconf, db, trait, total=2)
    uuid, = _arqs(db, ctx, _group(trait))
    placement_client.get_client(aconf).claim(
        uuid, {device.rp_uuid: {'resources': {'FPGA': 1}}}, 'p1', 'u1',
        'K8S_POD')
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert _row(db, uuid).state == 'Bound'
    assert _units(placement_url, uuid) == {device.rp_uuid: 1}
    assert _usage(placement_url, device.rp_uuid) == 1


def test_a_claim_left_behind_is_not_blamed_on_other_consumers(
        aconf, db, ctx, trait, placement_url):
    """Where the earlier claim of the ARQ's own consumer cannot be
    released (Placement answers each release 409 here), the refusal says
    so; it said '10 claims lost to other consumers', of a device no one
    else used."""
    device = _provide(aconf, db, trait, total=2)
    uuid, = _arqs(db, ctx, _group(trait))
    placement_client.get_client(aconf).claim(
        uuid, {device.rp_uuid: {'resources': {'FPGA': 1}}}, 'p1', 'u1',
        'K8S_POD')
    forward = _forwarder(placement_url, lambda request: False)

    def refusing(request):
        if _is_release(request, uuid):
            return 409, {}, {'errors': [{
                'status': 409, 'code': 'placement.concurrent_update',
                'detail': 'consumer generation conflict'}]}
        return forward(request)

    with recording_http.RecordingServer(refusing) as front:
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        with pytest.raises(exception.Conflict) as e:
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert e.value.code == 409
    assert not isinstance(e.value, exception.NoCandidate)
    assert str(e.value) == (
        f'Conflict: accelerator request {uuid} could not be claimed: '
        f'{arq_allocation.MAX_CLAIMS} refused while an earlier claim of '
        f'this request held its consumer; try again')
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Initial', None)


# -- the queue of releases owed -----------------------------------------------

def test_the_release_queue_is_not_held_up_by_live_arqs(aconf, db, ctx,
                                                      placement_url):
    """release_left_claims read the 100 oldest consumers recorded and
    skipped those whose ARQ still exists, without forgetting them: behind
    100 of those (in a bind: left to it), a consumer whose ARQ is gone
    was never released."""
    alive = _arqs(db, ctx, {'resources:FPGA': '100'}, count=100)
    assert len(alive) == 100
    for consumer in alive:
        db_api.write_retrying(ctx, release_db.add, ctx, consumer)
    with db.begin() as c:         # allocated again: their binds' now
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid.in_(alive)).values(
            state='BindStarted', bind_id=str(uuidlib.uuid4())))
    gone = str(uuidlib.uuid4())           # its ARQ was deleted
    db_api.write_retrying(ctx, release_db.add, ctx, gone)
    assert release_db.owed(ctx) == [gone]
    assert arq_allocation.release_left_claims(aconf, ctx) == 1
    assert sorted(_owed(db)) == sorted(alive)
