"""Releases of standalone allocations' claims (cyborg.conductor
.arq_allocation.release_claim and the placement_releases queue) against
the real (embedded) Placement: every allocation of one ARQ claims under
the same consumer, the ARQ's uuid, so a release must take the claim it
means and no newer one, and a claim left behind must not stop the ARQ
from being allocated again."""

import uuid as uuidlib

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import exception
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import placement_releases as release_db
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
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
    """An unbind releases the claim after its commit: where a new
    allocation of the ARQ overtook that release (the ARQ Unbound, then
    allocated for pod-2 and its claim made), the release leaves the newer
    claim; the new allocation released the older one first, owed to it
    (and forgot the record)."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, _group(trait))
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    release = arq_allocation.release_claim
    calls, seen = [], []

    def overtaken(placement, context, arq_uuid, bind_id):
        calls.append(1)
        if len(calls) == 1:
            seen.append(_row(db, uuid).state)
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
            seen.append(_usage(placement_url, device.rp_uuid))
        return release(placement, context, arq_uuid, bind_id)

    monkeypatch.setattr(arq_allocation, 'release_claim', overtaken)
    arq_binding.unbind(aconf, ctx, [uuid])
    assert seen == ['Unbound', 1]
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Bound', 'pod-2')
    assert _units(placement_url, uuid) == {}
    assert _units(placement_url, row.bind_id) == {device.rp_uuid: 1}
    assert _usage(placement_url, device.rp_uuid) == 1
    assert _owed(db) == []


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


# -- a release an unbind or a delete left ---------------------------------

class _Died(BaseException):
    """The conductor's process ending (killed) where this is raised: no
    ``except Exception`` of the code under test runs."""


def _dies_at_the_release(monkeypatch, when):
    """The conductor dies at the first release it sends to Placement:
    ``before`` it leaves, or ``after`` Placement carried it out."""
    put = placement_client.PlacementClient.release_claim

    def died(self, consumer_uuid, claim):
        if when == 'after':
            put(self, consumer_uuid, claim)
        raise _Died()

    monkeypatch.setattr(placement_client.PlacementClient, 'release_claim',
                        died)


@pytest.fixture
def engine(request, conf):
    """The test's database: SQLite (the ``db`` fixture's), or a fresh
    one of the kind asked (``indirect``) made this process's."""
    kind = getattr(request, 'param', 'sqlite')
    if kind == 'sqlite':
        yield request.getfixturevalue('db')
        return
    with api_fixture.database_in_use(kind) as engine:
        yield engine


@pytest.fixture
def econf(conf, engine, placement_url, fake_nova):
    """``aconf`` on ``engine``'s database."""
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    placement_client.reset_clients()
    return conf


def _unbind_or_delete(aconf, ctx, op, uuid):
    if op == 'unbind':
        arq_binding.unbind(aconf, ctx, [uuid])
    else:
        assert arq_binding.delete(aconf, ctx, arq_uuids=[uuid]) == []


def _left_as_asked(engine, op, uuid):
    """The ARQ is unbound (its handle and consumer gone) or deleted."""
    row = _row(engine, uuid)
    if op == 'unbind':
        assert (row.state, row.consumer_id, row.bind_id,
                row.attach_handle_id) == ('Unbound', None, None, None)
    else:
        assert row is None
    assert seed.handles_in_use(engine) == 0


def _unit_free_once(aconf, ctx, engine, placement_url, device, other):
    """Placement counts the device's one unit free (0) and the record
    forgotten; then another ARQ is allocated it (its attach handle
    free too), and the periodic leaves that allocation's claim."""
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(engine) == []
    result = arq_allocation.allocate(aconf, ctx, other, 'pod-2', 'k8s-pod')
    assert result['device_rp_uuid'] == device.rp_uuid
    assert arq_binding.fail_stuck(aconf, ctx) == 0
    assert _row(engine, other).state == 'Bound'
    assert _usage(placement_url, device.rp_uuid) == 1


@pytest.mark.parametrize('engine, op, when, earlier', [
    (kind, op, when, earlier)
    for op in ('unbind', 'delete')
    for kind, when, earlier in (
        [('sqlite', w, e) for w in ('before', 'after') for e in (0, 1)]
        + [(k, 'after', 1) for k in ('mysql', 'postgresql')])],
    indirect=['engine'])
def test_a_conductor_dying_at_the_release_leaves_it_to_the_periodic(
        econf, engine, ctx, trait, placement_url, monkeypatch, op, when,
        earlier):
    """An unbind or a delete of a standalone-allocated ARQ released its
    Placement claim first, then changed the rows: a conductor killed in
    between left the ARQ Bound, holding its handle and consumer, while
    Placement counted the unit free and offered it again (the next
    allocation of it failed 'no free attach handle'), and nothing noticed.
    The transaction that moves the ARQ records the release, made after
    the commit: the conductor dying at it (before or after Placement
    carried it out) leaves the ARQ as asked and the record, which the
    stuck-bind check (another conductor's) settles, the unit freed once.
    ``earlier``: the ARQ allocated and unbound before (its allocation's
    consumer not its uuid)."""
    device = _provide(econf, engine, trait, total=1)
    uuid, other = _arqs(engine, ctx, {'resources:FPGA': '2',
                                      'trait:' + trait: 'required'},
                        count=2)
    for i in range(earlier):
        arq_allocation.allocate(econf, ctx, uuid, f'pod-{i}', 'k8s-pod')
        arq_binding.unbind(econf, ctx, [uuid])
    arq_allocation.allocate(econf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert _usage(placement_url, device.rp_uuid) == 1
    with monkeypatch.context() as patched:
        _dies_at_the_release(patched, when)
        with pytest.raises(_Died):
            _unbind_or_delete(econf, ctx, op, uuid)
    _left_as_asked(engine, op, uuid)
    assert uuid in _owed(engine)
    assert _usage(placement_url, device.rp_uuid) == (
        1 if when == 'before' else 0)
    assert arq_binding.fail_stuck(econf, ctx) == 0
    _left_as_asked(engine, op, uuid)
    _unit_free_once(econf, ctx, engine, placement_url, device, other)


@pytest.mark.parametrize('op', ['unbind', 'delete'])
def test_an_unbind_or_delete_with_placement_away_is_done(
        aconf, db, ctx, trait, placement_url, op):
    """Placement away: the unbind or delete of a standalone-allocated ARQ
    failed (503), its release first, the ARQ left Bound.  It is done, the
    release recorded, and the stuck-bind check makes it once Placement
    answers."""
    device = _provide(aconf, db, trait, total=1)
    uuid, other = _arqs(db, ctx, {'resources:FPGA': '2',
                                  'trait:' + trait: 'required'}, count=2)
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    front = test_arq_allocation._releases_refused(placement_url)
    with front:
        front.away.set()
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        _unbind_or_delete(aconf, ctx, op, uuid)
        _left_as_asked(db, op, uuid)
        assert _owed(db) == [uuid]
        # Still away: the record stays, the unit held.
        assert arq_binding.fail_stuck(aconf, ctx) == 0
        assert _usage(placement_url, device.rp_uuid) == 1
        assert _owed(db) == [uuid]
    placement_fixture.placement_conf(aconf, placement_url)
    placement_client.reset_clients()
    assert arq_binding.fail_stuck(aconf, ctx) == 0
    _unit_free_once(aconf, ctx, db, placement_url, device, other)


def test_an_unbind_keeps_the_record_of_an_allocation_under_way(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """An unbind of an ARQ whose allocation is still under way (its
    claim not landed): the release after the commit finds nothing; the
    claim lands just then, and the allocation's undo, finding its ARQ
    unbound and Placement away, records it: the record is there already
    (nothing added).  Forgotten then, the claim stayed for good; the
    record is kept for the stuck-bind check, which releases it."""
    device = _provide(aconf, db, trait, total=1)
    uuid, = _arqs(db, ctx, _group(trait))
    now = timeutils.utcnow()
    job = db_api.write_retrying(ctx, arq_allocation._start, ctx, uuid,
                                'pod-1', 'k8s-pod', None, now, aconf.host,
                                aconf.bind_timeout)
    placement = placement_client.get_client(aconf)
    get = placement_client.PlacementClient.get_claim
    landed = []

    def landing_after_the_read(self, consumer_uuid):
        found = get(self, consumer_uuid)
        if consumer_uuid == uuid and not landed:
            landed.append(consumer_uuid)
            assert placement.claim(uuid, {device.rp_uuid: {
                'resources': {'FPGA': 1}}}, 'p1', 'u1', 'K8S_POD')
            arq_allocation._owe_release(ctx, job, exception.PlacementError(
                reason='Placement is away'))
        return found

    monkeypatch.setattr(placement_client.PlacementClient, 'get_claim',
                        landing_after_the_read)
    arq_binding.unbind(aconf, ctx, [uuid])
    monkeypatch.undo()
    assert landed
    assert _row(db, uuid).state == 'Unbound'
    assert _usage(placement_url, device.rp_uuid) == 1
    assert _owed(db) == [uuid]
    assert arq_binding.fail_stuck(aconf, ctx) == 0
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []


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
