"""Releases of standalone claims overtaken on their way to Placement, on
SQLite and the real (embedded) Placement; the consumers' names on the
three databases.

A release reads what its consumer holds, checks the ARQ's bind, then
empties the consumer at the generation read.  Placement deletes a
consumer that holds nothing, and a claim under that consumer starts it
again at the same generation: where every allocation of an ARQ claimed
under the ARQ's uuid, a release whose PUT was still on its way while
another release, an unbind and a new allocation with its claim went
through took the newer claim.  Each allocation claims under a consumer
of its own now (its bind's), which no other claim ever uses.  Each test
lets the interleaving happen at one release's PUT, the last moment
before it lands."""

import datetime

import pytest
import requests
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import exception
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http
from tests.unit.conductor import test_arq_allocation
from tests.unit.conductor.test_arq_allocation_releases import _group, _units
from tests.unit.conductor.test_arq_allocation import (
    _allocated_racing, _arqs, _is_release, _owed, _provide, _row,
    _usage)

# The shared Placement and fixtures of test_arq_allocation.
placement_url, fake_nova, aconf, ctx, trait = (
    test_arq_allocation.placement_url, test_arq_allocation.fake_nova,
    test_arq_allocation.aconf, test_arq_allocation.ctx,
    test_arq_allocation.trait)


def _started_long_ago(aconf, ctx, uuid):
    """The job of an allocation of ``uuid`` started more than
    ``bind_timeout`` ago and still running (slow), nothing claimed."""
    started = timeutils.utcnow() - datetime.timedelta(
        seconds=aconf.bind_timeout + 1)
    return db_api.write_retrying(ctx, arq_allocation._start, ctx, uuid,
                                 'pod-1', 'k8s-pod', None, started,
                                 aconf.host, aconf.bind_timeout)


def _overtaken_at_the_put(monkeypatch, meanwhile):
    """The first release PUT sent from now on runs ``meanwhile()`` just
    before it leaves (the releases ``meanwhile`` makes go out at once);
    returns the list of the consumers it was sent for."""
    put = placement_client.PlacementClient.release_claim
    sent = []

    def overtaken(self, consumer_uuid, claim):
        if not sent:
            sent.append(consumer_uuid)
            meanwhile()
        return put(self, consumer_uuid, claim)

    monkeypatch.setattr(placement_client.PlacementClient, 'release_claim',
                        overtaken)
    return sent


def _allocated_and_unbound(aconf, ctx, uuid, times):
    """Allocate and unbind ARQ ``uuid`` ``times`` times: its next
    allocation is not its first."""
    for i in range(times):
        arq_allocation.allocate(aconf, ctx, uuid, f'pod-early-{i}',
                                'k8s-pod')
        arq_binding.unbind(aconf, ctx, [uuid])


def _holds_its_claim(url, db, uuid, device):
    """The ARQ is Bound for pod-2, Placement counts its unit, and its
    allocation's consumer (its bind's) holds it."""
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Bound', 'pod-2')
    assert _usage(url, device.rp_uuid) == 1
    assert _units(url, row.bind_id) == {device.rp_uuid: 1}


# -- the stuck-bind check's release -------------------------------------------

@pytest.mark.parametrize('earlier', [0, 1])
def test_the_stuck_bind_check_s_release_leaves_a_newer_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch, earlier):
    """The check failed a slow allocation, read its claim and found the
    ARQ in the failed bind; before its PUT landed, the client unbound the
    failed ARQ (releasing that claim) and allocated it for pod-2.  The
    PUT, at the generation read, took pod-2's claim: the ARQ stayed Bound
    with nothing in Placement, which offered the unit again."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, _group(trait))
    _allocated_and_unbound(aconf, ctx, uuid, earlier)
    job = _started_long_ago(aconf, ctx, uuid)
    arq_allocation._claim(placement_client.get_client(aconf), ctx, job)

    def unbound_and_allocated_again():
        arq_binding.unbind(aconf, ctx, [uuid])
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')

    sent = _overtaken_at_the_put(monkeypatch, unbound_and_allocated_again)
    assert arq_binding.fail_stuck(aconf, ctx) == 1
    assert sent
    _holds_its_claim(placement_url, db, uuid, device)
    assert _owed(db) == []


# -- an allocation's own undo -------------------------------------------------

@pytest.mark.parametrize('earlier', [0, 1])
def test_an_allocation_s_undo_leaves_a_newer_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch, earlier):
    """An unbind ran before pod-1's claim landed (nothing to release
    then); pod-1's allocation, finding its ARQ unbound, read its claim and
    found the ARQ in no bind.  Before its PUT landed, pod-2's allocation
    released that claim (the consumer's, refusing its own) and claimed:
    the PUT took pod-2's claim."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, _group(trait))
    _allocated_and_unbound(aconf, ctx, uuid, earlier)
    claim = arq_allocation._claim
    calls = []

    def unbound_first(placement, context, job):
        calls.append(1)
        if len(calls) == 1:
            arq_binding.unbind(aconf, ctx, [uuid])
        return claim(placement, context, job)

    monkeypatch.setattr(arq_allocation, '_claim', unbound_first)
    sent = _overtaken_at_the_put(monkeypatch, lambda: arq_allocation.allocate(
        aconf, ctx, uuid, 'pod-2', 'k8s-pod'))
    with pytest.raises(exception.Conflict, match='deleted or unbound'):
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert sent
    _holds_its_claim(placement_url, db, uuid, device)


# -- the periodic's release of a claim owed ---------------------------------

@pytest.mark.parametrize('earlier', [0, 1])
def test_the_periodic_release_leaves_a_newer_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch, earlier):
    """A claim left behind (an unbind raced its allocation, Placement
    away) and recorded: release_left_claims read it and found the ARQ in
    no bind; before its PUT landed, pod-2's allocation released the claim
    owed itself and claimed.  The PUT took pod-2's claim."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, _group(trait))
    _allocated_and_unbound(aconf, ctx, uuid, earlier)
    _allocated_racing(aconf, ctx, uuid, lambda: arq_binding.unbind(
        aconf, ctx, [uuid]), placement_url, monkeypatch)
    monkeypatch.undo()
    assert _owed(db) and _usage(placement_url, device.rp_uuid) == 1
    sent = _overtaken_at_the_put(monkeypatch, lambda: arq_allocation.allocate(
        aconf, ctx, uuid, 'pod-2', 'k8s-pod'))
    arq_allocation.release_left_claims(aconf, ctx)
    assert sent
    _holds_its_claim(placement_url, db, uuid, device)
    assert _owed(db) == []


# -- an unbind's release -------------------------------------------------

@pytest.mark.parametrize('earlier', [0, 1])
def test_an_unbind_s_release_leaves_a_newer_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch, earlier):
    """An unbind releases pod-1's claim once its transaction has
    committed (the ARQ Unbound); before its PUT landed, another unbind
    (nothing left to do) and the ARQ's allocation for pod-2 went through.
    The PUT, at the generation read, leaves pod-2's claim.  (The unbind
    used to release first, and took pod-2's claim until it went round
    again and unbound the newer allocation too.)"""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, _group(trait))
    _allocated_and_unbound(aconf, ctx, uuid, earlier)
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')

    def unbound_and_allocated_again():
        arq_binding.unbind(aconf, ctx, [uuid])
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')

    sent = _overtaken_at_the_put(monkeypatch, unbound_and_allocated_again)
    arq_binding.unbind(aconf, ctx, [uuid])
    assert sent
    _holds_its_claim(placement_url, db, uuid, device)
    assert _owed(db) == []


# -- a claim landing after its allocation's undo -----------------------------

@pytest.mark.parametrize('earlier', [0, 1])
def test_a_claim_landing_after_its_undo_is_released_later(
        aconf, db, ctx, trait, placement_url, earlier):
    """The claim's answer was lost and Placement made the claim only
    after the allocation's undo had read its consumer (empty): the ARQ
    went back as it was with no consumer, nothing recorded, and its
    deletion released nothing: the unit stayed taken for good.  The undo
    records the consumer, and the stuck-bind check releases what it
    holds."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, _group(trait))
    _allocated_and_unbound(aconf, ctx, uuid, earlier)
    forward = test_arq_allocation._forwarder(placement_url,
                                             lambda request: False)
    held = []

    def late(request):
        if (request.method == 'PUT'
                and request.path.startswith('/allocations/')
                and not _is_release(request)
                and not held):
            held.append(request)
            return 502, {}, {'errors': [{'status': 502,
                                         'detail': 'the answer was lost'}]}
        return forward(request)

    with recording_http.RecordingServer(late) as front:
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        with pytest.raises(exception.PlacementError, match='502'):
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    placement_fixture.placement_conf(aconf, placement_url)
    placement_client.reset_clients()
    assert _row(db, uuid).state == ('Unbound' if earlier else 'Initial')
    # Now Placement carries the claim out.
    request, = held
    assert requests.put(placement_url + request.path, data=request.body,
                        headers=dict(placement_fixture.HEADERS, **{
                            'Content-Type': 'application/json'}),
                        timeout=10).status_code == 204
    assert _usage(placement_url, device.rp_uuid) == 1
    assert arq_binding.delete(aconf, ctx, arq_uuids=[uuid]) == []
    arq_binding.fail_stuck(aconf, ctx)
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []


# -- the consumers ------------------------------------------------------------

def _started(ctx, uuid):
    now = timeutils.utcnow()
    return db_api.write_retrying(ctx, arq_allocation._start, ctx, uuid,
                                 'pod-1', 'k8s-pod', None, now,
                                 'conductor-0', 240)


@pytest.mark.parametrize('kind', ['sqlite', 'mysql', 'postgresql'])
def test_each_allocation_has_a_consumer_of_its_own(kind, ctx):
    """The ARQ's first bind is named by the ARQ's uuid (its first
    allocation's consumer, as it always was); every later one, after an
    allocation refused, an unbind or a bind of Nova's, by a fresh uuid:
    no consumer is ever claimed under twice."""
    with api_fixture.database_in_use(kind) as engine:
        first, nova_s = _arqs(engine, ctx, {'resources:FPGA': '2'},
                              count=2)
        names = []
        for _ in range(3):
            job = _started(ctx, first)
            names.append(job['bind_id'])
            assert _row(engine, first).bind_id == job['bind_id']
            # Refused, or unbound: back where it was.
            db_api.write_retrying(ctx, arq_allocation._put_back, ctx, job,
                                  False)
            assert _row(engine, first).bind_id is None
        assert names[0] == first
        assert len(set(names)) == 3
        # A bind Nova started first: no allocation uses the ARQ's uuid.
        with engine.begin() as c:
            c.execute(sa.update(models.ExtARQ)
                      .where(models.ExtARQ.uuid == nova_s)
                      .values(bind_owner='conductor-1'))
        job = _started(ctx, nova_s)
        assert job['bind_id'] not in (None, nova_s)
