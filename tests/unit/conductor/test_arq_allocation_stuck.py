"""The stuck-bind check (``arq_binding.fail_stuck``) against standalone
allocations that were only slow, not dead, on SQLite and the real
(embedded) Placement: whichever ends first, the ARQ never stays Bound
without its claim, nor failed with one nobody releases.  And claims that
kept losing to other consumers are not "No free accelerator"."""

import datetime
import uuid as uuidlib

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import exception
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import placement_releases as release_db
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.unit.conductor import test_arq_allocation
from tests.unit.conductor import test_bind_deadlines as deadlines
from tests.unit.conductor.test_arq_allocation import (
    _arqs, _held, _owed, _provide, _releases_refused, _row, _usage)

# The shared Placement and fixtures of test_arq_allocation.
placement_url, fake_nova, aconf, ctx, trait = (
    test_arq_allocation.placement_url, test_arq_allocation.fake_nova,
    test_arq_allocation.aconf, test_arq_allocation.ctx,
    test_arq_allocation.trait)


def _slow_allocation(aconf, db, ctx, trait):
    """(device, job): an allocation started more than ``bind_timeout``
    ago (slow programming or mdev creation), still running: BindStarted,
    nothing claimed yet."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    started = timeutils.utcnow() - datetime.timedelta(
        seconds=aconf.bind_timeout + 1)
    job = db_api.write_retrying(ctx, arq_allocation._start, ctx, uuid,
                                'pod-1', 'k8s-pod', None, started,
                                aconf.host, aconf.bind_timeout)
    return device, job


def _soon():
    return timeutils.utcnow() + datetime.timedelta(minutes=5)


def test_an_allocation_ending_bound_as_it_is_failed_keeps_its_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """The check read the ARQ in BindStarted; the slow allocation then
    ended Bound (its end has no deadline of its own).  The check released
    the claim first and then failed nothing: the ARQ stayed Bound with its
    handle and nothing in Placement, which offered the unit again."""
    device, job = _slow_allocation(aconf, db, ctx, trait)
    placement = placement_client.get_client(aconf)
    claimed = arq_allocation._claim(placement, ctx, job)
    read = arq_db.get_to_change
    ended = []

    def then_bound(context, *args, **kwargs):
        rows = read(context, *args, **kwargs)
        if not ended:
            ended.append(True)
            arq_allocation._bind(aconf, ctx, job, claimed, _soon())
        return rows

    monkeypatch.setattr(arq_db, 'get_to_change', then_bound)
    arq_binding.fail_stuck(aconf, ctx)
    assert ended
    row = _row(db, job['uuid'])
    assert (row.state, row.consumer_id) == ('Bound', 'pod-1')
    assert row.attach_handle_id is not None
    assert _usage(placement_url, device.rp_uuid) == 1
    assert _owed(db) == []


def test_an_allocation_is_its_conductor_s_until_its_own_deadline(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """Its first transaction records its deadline, its conductor's
    bind_timeout after its start: a conductor whose bind_timeout is 30 s
    checking a minute into it (its claim still to make) leaves it be; it
    ends Bound, its deadline gone with BindStarted."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    quick = deadlines.conductor('conductor-b', 30, placement_url)
    claim = arq_allocation._claim
    seen = []

    def checked_then_claimed(placement, context, job):
        row = _row(db, uuid)
        seen.append((row.state, row.bind_timeout))
        deadlines.passed(db, uuid, 60)
        seen.append(arq_binding.fail_stuck(quick, ctx))
        return claim(placement, context, job)

    monkeypatch.setattr(arq_allocation, '_claim', checked_then_claimed)
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert seen == [('BindStarted', aconf.bind_timeout), 0]
    row = _row(db, uuid)
    assert (row.state, row.bind_timeout) == ('Bound', None)
    assert _usage(placement_url, device.rp_uuid) == 1


def test_an_allocation_ending_after_it_was_failed_releases_its_claim(
        aconf, db, ctx, trait, placement_url):
    """The other order: the check fails the ARQ and releases the claim;
    the allocation's end then finds its ARQ failed, undoes its bind (its
    own release finding nothing left) and says why (it said the ARQ was
    deleted or unbound)."""
    device, job = _slow_allocation(aconf, db, ctx, trait)
    placement = placement_client.get_client(aconf)
    claimed = arq_allocation._claim(placement, ctx, job)
    assert arq_binding.fail_stuck(aconf, ctx) == 1
    assert _row(db, job['uuid']).state == 'BindFailed'
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []
    with pytest.raises(arq_binding._Lost) as lost:
        arq_allocation._bind(aconf, ctx, job, claimed, _soon())
    with pytest.raises(exception.Conflict,
                       match='was failed while it was being allocated: it '
                             r'took longer than \[DEFAULT\]bind_timeout'):
        arq_allocation._undo(placement, ctx, job, claimed, lost.value)
    row = _row(db, job['uuid'])
    assert (row.state, row.attach_handle_id) == ('BindFailed', None)
    assert _usage(placement_url, device.rp_uuid) == 0
    assert seed.handles_in_use(db) == 0


def test_a_claim_landing_after_its_allocation_was_failed_is_released(
        aconf, db, ctx, trait, placement_url):
    """The check failed the allocation before its claim landed (nothing
    to release then); the allocation, finding its ARQ failed, could not
    release the claim (Placement away) and left it to the stuck-bind
    check, which works on BindStarted rows only: the BindFailed ARQ held
    the unit until it was unbound or deleted.  Its release is recorded,
    and done once Placement is back."""
    device, job = _slow_allocation(aconf, db, ctx, trait)
    assert arq_binding.fail_stuck(aconf, ctx) == 1
    assert _row(db, job['uuid']).state == 'BindFailed'
    placement = placement_client.get_client(aconf)
    claimed = arq_allocation._claim(placement, ctx, job)
    assert _usage(placement_url, device.rp_uuid) == 1
    with pytest.raises(arq_binding._Lost) as lost:
        arq_allocation._bind(aconf, ctx, job, claimed, _soon())
    with _releases_refused(placement_url, job['uuid']) as front:
        front.away.set()
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        with pytest.raises(exception.Conflict):
            arq_allocation._undo(placement_client.get_client(aconf), ctx,
                                 job, claimed, lost.value)
        assert arq_binding.fail_stuck(aconf, ctx) == 0
    assert _owed(db) == [job['uuid']]
    assert _usage(placement_url, device.rp_uuid) == 1
    placement_fixture.placement_conf(aconf, placement_url)
    placement_client.reset_clients()
    assert arq_allocation.release_left_claims(aconf, ctx) == 1
    assert _held(placement_url, job['uuid'])['allocations'] == {}
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []
    assert _row(db, job['uuid']).state == 'BindFailed'


def test_a_failed_arq_owed_a_release_keeps_a_newer_allocation_s_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """A failed ARQ's recorded release is done on behalf of the failed
    bind: where the ARQ was unbound and allocated again between the
    periodic's query and its release, the newer claim stays (and the
    record is the newer allocation's, which settled it)."""
    device, job = _slow_allocation(aconf, db, ctx, trait)
    uuid = job['uuid']
    arq_allocation._claim(placement_client.get_client(aconf), ctx, job)
    with _releases_refused(placement_url, uuid) as front:
        front.away.set()
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        assert arq_binding.fail_stuck(aconf, ctx) == 1
    placement_fixture.placement_conf(aconf, placement_url)
    placement_client.reset_clients()
    assert (_row(db, uuid).state, _owed(db)) == ('BindFailed', [uuid])
    query = release_db.owed_in_no_bind

    def then_allocated(context, **kwargs):
        found = query(context, **kwargs)
        arq_binding.unbind(aconf, ctx, [uuid])
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
        return found

    monkeypatch.setattr(release_db, 'owed_in_no_bind',
                        then_allocated)
    assert arq_allocation.release_left_claims(aconf, ctx) == 0
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Bound', 'pod-2')
    # Under pod-2's allocation's own consumer.
    assert list(_held(placement_url, row.bind_id)['allocations']) == [
        device.rp_uuid]
    assert _usage(placement_url, device.rp_uuid) == 1
    assert _owed(db) == []


# -- claims that keep losing ----------------------------------------------

def test_claims_that_keep_losing_are_no_lack_of_accelerators(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """Every caller is offered the same first candidates: under a burst,
    ``MAX_CLAIMS`` claims may all go to other consumers while Placement
    still has more to offer.  That was answered '409 No free accelerator
    matches ...', as if none were left; it says the claims kept losing,
    and a later try gets one."""
    devices = [_provide(aconf, db, trait, total=1)
               for _ in range(arq_allocation.MAX_CLAIMS + 2)]
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    placement = placement_client.get_client(aconf)
    real = placement.allocation_candidates

    def others_take_them(query):
        """Other consumers claim each candidate offered before we do."""
        found = real(query)
        for allocations in found:
            placement_fixture.hold_allocation(
                placement_url, str(uuidlib.uuid4()),
                {rp: {'FPGA': 1} for rp in allocations})
        return found

    monkeypatch.setattr(placement, 'allocation_candidates',
                        others_take_them)
    with pytest.raises(exception.Conflict) as e:
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert not isinstance(e.value, exception.NoCandidate)
    assert e.value.code == 409
    assert str(e.value) == (
        f'Conflict: accelerator request {uuid} could not be claimed: '
        f'{arq_allocation.MAX_CLAIMS} lost to other consumers claiming '
        f'the same accelerators at the same time; try again')
    assert _row(db, uuid).state == 'Initial'
    monkeypatch.undo()
    # Capacity was left, and the next try gets it.
    free = {d.rp_uuid for d in devices
            if _usage(placement_url, d.rp_uuid) == 0}
    assert len(free) == 2
    result = arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert result['device_rp_uuid'] in free


# -- the records, on the real databases -----------------------------------

@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_the_records_settled_are_read_and_forgotten_by_bind(kind, ctx):
    """Which records ``release_left_claims`` settles, and on behalf of
    which bind: an ARQ gone, in no bind, or BindFailed (its failed bind);
    never one in a live bind, whose record a bind other than its own
    does not forget."""
    with api_fixture.database_in_use(kind) as engine:
        idle, failed, binding, bound = _arqs(
            engine, ctx, {'resources:FPGA': '4'}, count=4)
        binds = {}
        for uuid, state in ((failed, 'BindFailed'), (binding, 'BindStarted'),
                            (bound, 'Bound')):
            binds[uuid] = str(uuidlib.uuid4())
            with engine.begin() as c:
                c.execute(sa.update(models.ExtARQ)
                          .where(models.ExtARQ.uuid == uuid)
                          .values(state=state, bind_id=binds[uuid]))
        gone = str(uuidlib.uuid4())
        for consumer in (idle, failed, binding, bound, gone):
            db_api.write_retrying(ctx, release_db.add, ctx, consumer)
        assert release_db.owed(ctx) == [gone]
        assert release_db.owed_in_no_bind(ctx) == [(idle, None),
                                                   (failed, binds[failed])]

        def forget(consumer, bind_id):
            return db_api.write_retrying(ctx, release_db.forget_settled,
                                         ctx, consumer, bind_id)

        assert not forget(binding, None)
        assert not forget(bound, binds[failed])
        assert forget(binding, binds[binding])
        assert forget(failed, binds[failed])
        assert forget(idle, None)
        assert forget(gone, None)
        assert not forget(gone, None)
        assert release_db.owed_in_no_bind(ctx) == []
        assert release_db.count_owed(ctx) == 1
