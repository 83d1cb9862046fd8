"""Standalone allocation (cyborg.conductor.arq_allocation) on SQLite
against the real (embedded) Placement: claim, bind, release, and every
refusal leaving the ARQ and Placement as they were."""

import datetime
import threading
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import placement_releases as release_db
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http

# The real Placement, shared by this module's tests: each test gives its
# device a trait of its own so that it never sees another test's providers.
placement_url = seed.placement_url
fake_nova = recording_http.fake_nova

aconf = seed.bind_conf
ctx = seed.service_ctx


@pytest.fixture
def trait():
    return 'CUSTOM_T_' + uuidlib.uuid4().hex.upper()


def _provide(conf, db, trait, total=2, hostname=None, status='enabled',
             resource_class='FPGA', **handles):
    """A seeded device whose provider Placement offers: ``total`` units of
    ``resource_class`` under a compute node provider, with OWNER_CYBORG
    and ``trait``; ``handles``: how seed_device makes its attach handles
    (attach_type, asked_type)."""
    hostname = hostname or 'host-' + uuidlib.uuid4().hex[:8]
    device = seed.seed_device(db, hostname=hostname, handles=total,
                              status=status, **handles)
    placement = placement_client.get_client(conf)
    compute = str(uuidlib.uuid4())
    placement.create_provider(compute, hostname, None)
    placement.create_provider(device.rp_uuid, device.name, compute)
    placement.set_inventories(device.rp_uuid, {
        resource_class: {'total': total, 'max_unit': total}})
    placement.ensure_traits([trait])
    placement.set_traits(device.rp_uuid, {'OWNER_CYBORG', trait})
    with db.begin() as connection:
        connection.execute(sa.insert(models.Host).values(
            hostname=hostname, compute_rp_uuid=compute,
            placement_synced=True))
    device.compute = compute
    return device


def _arqs(db, ctx, group, count=1):
    profile = seed.seed_profile(db, [group])
    return [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')][:count]


def _held(url, consumer):
    return requests.get(f'{url}/allocations/{consumer}',
                        headers=placement_fixture.HEADERS,
                        timeout=10).json()


def _usage(url, rp_uuid):
    return requests.get(f'{url}/resource_providers/{rp_uuid}/usages',
                        headers=placement_fixture.HEADERS,
                        timeout=10).json()['usages'].get('FPGA', 0)


def _row(db, uuid):
    return seed.arq_rows(db).get(uuid)


# -- the request Placement is asked -----------------------------------------

def test_request_query_has_one_unit_and_the_group_s_traits():
    query = arq_allocation.request_query(
        {'resources:FPGA': '3', 'trait:CUSTOM_A': 'required',
         'trait:CUSTOM_B': 'forbidden', 'accel:bitstream_id': 'x'},
        compute_rp_uuid='c0ffee')
    sfx = arq_allocation.SUFFIX
    assert query == {'resources' + sfx: 'FPGA:1',
                     'required' + sfx: 'CUSTOM_A,OWNER_CYBORG,!CUSTOM_B,'
                                       '!MISC_SHARES_VIA_AGGREGATE',
                     'in_tree' + sfx: 'c0ffee',
                     'limit': arq_allocation.CANDIDATES}


def test_request_query_leaves_out_a_class_asked_for_zero_times():
    """As quotas and the profile's size count it: a group naming a class
    with amount 0 besides its one class was refused (two classes)."""
    query = arq_allocation.request_query(
        {'resources:FPGA': '1', 'resources:CUSTOM_X': '0'})
    assert query['resources' + arq_allocation.SUFFIX] == 'FPGA:1'


@pytest.mark.parametrize('group, message', [
    ({'resources:FPGA': '1', 'resources:CUSTOM_X': '1'},
     'exactly one resource class'),
    ({'trait:CUSTOM_A': 'required'}, 'exactly one resource class'),
    ({'resources:FPGA': '1', 'trait:OWNER_CYBORG': 'forbidden'},
     'both requires and forbids OWNER_CYBORG'),
])
def test_request_query_refuses_what_one_provider_cannot_serve(group,
                                                              message):
    with pytest.raises(exception.Invalid, match=message):
        arq_allocation.request_query(group)


def test_placement_consumer_type_is_placement_s_spelling():
    assert arq_allocation.placement_consumer_type('k8s-pod') == 'K8S_POD'
    assert arq_allocation.placement_consumer_type('a b.c') == 'A_B_C'


# -- allocate ---------------------------------------------------------------

def test_allocate_claims_and_binds_without_nova(aconf, db, ctx, trait,
                                                placement_url, fake_nova):
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    result = arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert result == {'uuid': uuid, 'device_rp_uuid': device.rp_uuid,
                      'hostname': device.hostname}
    row = _row(db, uuid)
    assert row.state == 'Bound'
    assert (row.consumer_id, row.consumer_type) == ('pod-1', 'k8s-pod')
    assert row.hostname == device.hostname
    assert row.device_rp_uuid == device.rp_uuid
    assert row.instance_uuid is None
    assert row.attach_handle_id is not None
    assert seed.handles_in_use(db) == 1
    held = _held(placement_url, uuid)
    assert {rp: a['resources'] for rp, a in held['allocations'].items()} \
        == {device.rp_uuid: {'FPGA': 1}}
    assert held['project_id'] == 'p1'
    assert held['consumer_type'] == 'K8S_POD'
    # No instance, so nothing to tell Nova.
    assert fake_nova.events == []
    with db.connect() as c:
        assert c.scalar(sa.select(sa.func.count()).select_from(
            models.NovaEvent)) == 0


def test_delete_releases_the_allocation(aconf, db, ctx, trait,
                                        placement_url):
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert _usage(placement_url, device.rp_uuid) == 1
    assert arq_binding.delete(aconf, ctx, arq_uuids=[uuid]) == []
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _held(placement_url, uuid)['allocations'] == {}
    assert _row(db, uuid) is None
    assert seed.handles_in_use(db) == 0


def test_a_delete_with_a_claim_to_release_reads_its_arqs_twice(
        aconf, db, ctx, trait, placement_url):
    # Once in the transaction that finds the claim (it deletes nothing
    # then) and once, locked, in the one that deletes after the release:
    # what the first read found is what is released, not read again.
    _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    reads = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        # The reads of whole ARQs to change: they join the profile.
        if (statement.lstrip().upper().startswith('SELECT')
                and 'profile_json' in statement):
            reads.append(statement)

    sa.event.listen(db, 'before_cursor_execute', seen)
    try:
        assert arq_binding.delete(aconf, ctx, arq_uuids=[uuid]) == []
    finally:
        sa.event.remove(db, 'before_cursor_execute', seen)
    assert len(reads) == 2, reads
    assert _held(placement_url, uuid)['allocations'] == {}
    assert _row(db, uuid) is None


def test_unbind_releases_it_and_the_arq_can_be_allocated_again(
        aconf, db, ctx, trait, placement_url):
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    arq_binding.unbind(aconf, ctx, [uuid])
    row = _row(db, uuid)
    assert row.state == 'Unbound'
    assert row.consumer_id is None and row.consumer_type is None
    assert _usage(placement_url, device.rp_uuid) == 0
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
    assert _row(db, uuid).consumer_id == 'pod-2'
    assert _usage(placement_url, device.rp_uuid) == 1


def test_the_last_unit_goes_to_one_consumer_only(aconf, db, ctx, trait,
                                                 placement_url):
    device = _provide(aconf, db, trait, total=1)
    first, second = _arqs(db, ctx, {'resources:FPGA': '2',
                                    'trait:' + trait: 'required'}, count=2)
    arq_allocation.allocate(aconf, ctx, first, 'pod-1', 'k8s-pod')
    with pytest.raises(exception.NoCandidate) as e:
        arq_allocation.allocate(aconf, ctx, second, 'pod-2', 'k8s-pod')
    assert e.value.code == 409
    assert 'Placement offers none' in str(e.value)
    assert trait in str(e.value)
    row = _row(db, second)
    assert (row.state, row.consumer_id, row.bind_started_at) == (
        'Initial', None, None)
    assert _held(placement_url, second)['allocations'] == {}
    assert _usage(placement_url, device.rp_uuid) == 1


def test_a_lost_claim_tries_the_next_candidate(aconf, db, ctx, trait,
                                               placement_url, monkeypatch):
    """Placement's answer to a claim that lost the race (409) moves on to
    the next candidate."""
    one = _provide(aconf, db, trait, total=1)
    two = _provide(aconf, db, trait, total=1)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    placement = placement_client.get_client(aconf)
    offered = placement.allocation_candidates(
        arq_allocation.request_query({'resources:FPGA': '1',
                                      'trait:' + trait: 'required'}))
    first_rp = next(iter(offered[0]))
    # Someone else takes the first candidate's unit between our asking
    # and our claim.
    real = placement.allocation_candidates

    def candidates_then_race(query):
        found = real(query)
        placement_fixture.hold_allocation(placement_url, str(uuidlib.uuid4()),
                                          {first_rp: {'FPGA': 1}})
        return found

    monkeypatch.setattr(placement, 'allocation_candidates',
                        candidates_then_race)
    result = arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    other = ({one.rp_uuid, two.rp_uuid} - {first_rp}).pop()
    assert result['device_rp_uuid'] == other
    assert _row(db, uuid).state == 'Bound'


def test_host_constraint(aconf, db, ctx, trait, placement_url):
    _provide(aconf, db, trait, hostname='near-' + trait[-6:])
    far = _provide(aconf, db, trait, hostname='far-' + trait[-6:])
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    result = arq_allocation.allocate(aconf, ctx, uuid, 'job-7', 'slurm-job',
                                     hostname=far.hostname)
    assert result['device_rp_uuid'] == far.rp_uuid
    assert result['hostname'] == far.hostname


def test_unknown_host_is_400_and_writes_nothing(aconf, db, ctx, trait):
    _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1'})
    with pytest.raises(exception.Invalid, match='host nowhere has no'):
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod',
                                hostname='nowhere')
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Initial', None)


def test_only_initial_or_unbound_arqs_are_allocated(aconf, db, ctx, trait):
    _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    with pytest.raises(exception.Conflict, match='is Bound'):
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
    assert _row(db, uuid).consumer_id == 'pod-1'
    with pytest.raises(exception.ARQNotFound):
        arq_allocation.allocate(aconf, ctx, str(uuidlib.uuid4()), 'p', 't')


def test_another_project_s_arq_is_not_found(aconf, db, ctx, trait):
    _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1'})
    stranger = cyborg_context.RequestContext(project_id='p2', user_id='u2',
                                             roles=['member'])
    with pytest.raises(exception.ARQNotFound):
        arq_allocation.allocate(aconf, stranger, uuid, 'pod-1', 'k8s-pod')


def test_a_failed_bind_releases_the_claim(aconf, db, ctx, trait,
                                          placement_url):
    """Placement offers a device the database holds in maintenance (the
    reservation not synced yet): the bind is refused, the claim released,
    the ARQ back in Initial."""
    device = _provide(aconf, db, trait, status='maintaining')
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    with pytest.raises(exception.BindFailed, match='no enabled device'):
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    row = _row(db, uuid)
    assert (row.state, row.consumer_id, row.hostname) == ('Initial', None,
                                                          None)
    assert _usage(placement_url, device.rp_uuid) == 0
    assert seed.handles_in_use(db) == 0


def _forwarding(placement_url, lose):
    """A Placement front forwarding every request to the real one; a
    request ``lose(request)`` picks is carried out but answered 502, as
    when the answer is lost on the way back."""
    return recording_http.RecordingServer(_forwarder(placement_url, lose))


def _forwarder(placement_url, lose):
    """The responder of ``_forwarding``."""
    def respond(request):
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ('host', 'content-length')}
        answer = requests.request(
            request.method, placement_url + request.path,
            params=request.query, headers=headers, data=request.body,
            timeout=30)
        if lose(request):
            return 502, {}, {'errors': [{'status': 502,
                                         'detail': 'the answer was lost'}]}
        kept = {k: v for k, v in answer.headers.items()
                if k.lower() in ('content-type', 'openstack-api-version')}
        return answer.status_code, kept, answer.content
    return respond


def test_a_claim_whose_answer_is_lost_is_released(aconf, db, ctx, trait,
                                                  placement_url):
    """Placement made the claim but its answer never came: the claim may
    hold a unit, so it is released as any other, and the ARQ is back in
    Initial."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    with _forwarding(placement_url, lambda request: (
            request.method == 'PUT'
            and request.path == '/allocations/' + uuid
            and not _is_release(request, uuid))) as front:
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        with pytest.raises(exception.PlacementError, match='502'):
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
        # The claim, then its release: what the consumer holds is read,
        # and emptied at the generation read.
        assert [r.method for r in front.requests
                if r.path == '/allocations/' + uuid] == ['PUT', 'GET', 'PUT']
        assert front.requests[-1].json()['allocations'] == {}
    assert _held(placement_url, uuid)['allocations'] == {}
    assert _usage(placement_url, device.rp_uuid) == 0
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Initial', None)


def test_an_allocation_under_way_is_its_conductor_s(aconf, db, ctx, trait,
                                                    placement_url):
    """While it claims, the ARQ records the conductor carrying it out:
    one that starts again after dying there fails it and releases the
    claim (arq_binding.recover), as for Nova's binds."""
    _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    seen = []

    def watch(request):
        if request.method == 'PUT' and request.path == '/allocations/' + uuid:
            row = _row(db, uuid)
            seen.append((row.state, row.bind_owner))
        return False

    with _forwarding(placement_url, watch) as front:
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert seen == [('BindStarted', aconf.host)]
    assert _row(db, uuid).state == 'Bound'


def test_no_free_handle_releases_the_claim(aconf, db, ctx, trait,
                                           placement_url):
    """Placement offers more than the database has handles for."""
    device = _provide(aconf, db, trait, total=1)
    placement_client.get_client(aconf).set_inventories(
        device.rp_uuid, {'FPGA': {'total': 2, 'max_unit': 2}})
    first, second = _arqs(db, ctx, {'resources:FPGA': '2',
                                    'trait:' + trait: 'required'}, count=2)
    arq_allocation.allocate(aconf, ctx, first, 'pod-1', 'k8s-pod')
    with pytest.raises(exception.BindFailed, match='no free attach handle'):
        arq_allocation.allocate(aconf, ctx, second, 'pod-2', 'k8s-pod')
    assert _row(db, second).state == 'Initial'
    assert _usage(placement_url, device.rp_uuid) == 1


def _abandoned_claim(aconf, db, ctx, trait):
    """(device, ARQ uuid): an allocation whose conductor died after
    claiming, an hour ago."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    long_ago = timeutils.utcnow() - datetime.timedelta(hours=1)
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(models.ExtARQ.uuid == uuid)
                  .values(state='BindStarted', consumer_id='pod-1',
                          consumer_type='k8s-pod', bind_started_at=long_ago,
                          bind_id=str(uuidlib.uuid4())))
    placement_client.get_client(aconf).claim(
        uuid, {device.rp_uuid: {'resources': {'FPGA': 1}}}, 'p1', 'u1',
        'K8S_POD')
    return device, uuid


def test_a_stuck_allocation_is_failed_and_released(aconf, db, ctx, trait,
                                                   placement_url):
    """A conductor that died after claiming: fail_stuck fails the ARQ and
    releases what it claimed."""
    device, uuid = _abandoned_claim(aconf, db, ctx, trait)
    assert _usage(placement_url, device.rp_uuid) == 1
    assert arq_binding.fail_stuck(aconf, ctx) == 1
    assert _row(db, uuid).state == 'BindFailed'
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []


def test_a_stuck_allocation_is_failed_with_placement_away(
        aconf, db, ctx, trait, placement_url):
    """Placement away when the stuck-bind check fails an abandoned
    allocation: the ARQ is failed all the same, the release of its claim
    recorded in the transaction that fails it, and the check releases it
    once Placement answers.  The check used to release before failing
    (an allocation only slow could end Bound in between, with no claim)
    and so kept the ARQ BindStarted while Placement was away."""
    device, uuid = _abandoned_claim(aconf, db, ctx, trait)
    front = _releases_refused(placement_url, uuid)
    with front:
        front.away.set()
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        assert arq_binding.fail_stuck(aconf, ctx) == 1
        assert _row(db, uuid).state == 'BindFailed'
        assert _owed(db) == [uuid]
        # Still away: the record stays.
        assert arq_binding.fail_stuck(aconf, ctx) == 0
        assert _usage(placement_url, device.rp_uuid) == 1
        assert _owed(db) == [uuid]
    placement_fixture.placement_conf(aconf, placement_url)
    placement_client.reset_clients()
    assert arq_binding.fail_stuck(aconf, ctx) == 0
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []
    assert _row(db, uuid).state == 'BindFailed'


@pytest.mark.parametrize('unknown', ['trait:CUSTOM_NEVER_SEEN_{}',
                                     'resources:CUSTOM_NEVER_SEEN_{}'])
def test_a_name_placement_does_not_know_matches_nothing(aconf, db, ctx,
                                                        trait, unknown):
    """A profile naming a trait or resource class Placement has never
    heard of: Placement answers 400, which is "no accelerator matches"
    (409), not Placement failing (503)."""
    _provide(aconf, db, trait)
    name = unknown.format(uuidlib.uuid4().hex.upper())
    group = {'resources:FPGA': '1', 'trait:' + trait: 'required'}
    if name.startswith('trait:'):
        group[name] = 'required'
    else:
        group = {name: '1'}
    uuid, = _arqs(db, ctx, group)
    with pytest.raises(exception.NoCandidate, match='No such'):
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Initial', None)


def test_a_stale_allocation_leaves_the_newer_one_s_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """An allocation slow in binding (here: the ARQ unbound and allocated
    again for another pod while it binds) found its ARQ taken and undid
    its claim by deleting the consumer's allocations, the ARQ's uuid's:
    the newer allocation's.  Its ARQ stayed Bound with nothing held in
    Placement, which offered the unit again."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    bind = arq_allocation._bind
    calls = []

    def unbound_and_allocated_again_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            arq_binding.unbind(aconf, ctx, [uuid])
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-2', 'k8s-pod')
        return bind(*args, **kwargs)

    monkeypatch.setattr(arq_allocation, '_bind',
                        unbound_and_allocated_again_first)
    with pytest.raises(exception.Conflict):
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Bound', 'pod-2')
    # The newer allocation claims under a consumer of its own.
    assert row.bind_id != uuid
    assert {rp: a['resources'] for rp, a in _held(
        placement_url, row.bind_id)['allocations'].items()} == {
        device.rp_uuid: {'FPGA': 1}}
    assert _usage(placement_url, device.rp_uuid) == 1


def test_an_unbind_racing_an_allocation_releases_its_claim(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """An unbind that read its ARQ before an allocation ended (nothing to
    release then) moved the newly Bound ARQ to Unbound, freeing its
    handle, but left its Placement claim for good: nothing else releases
    a standalone claim.  It releases what the ARQ holds now."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    detach = arq_binding.remote_pools.detach_for_release
    calls = []

    def allocated_meanwhile(conf, context, rows):
        calls.append(1)
        if len(calls) == 1:
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
        return detach(conf, context, rows)

    monkeypatch.setattr(arq_binding.remote_pools, 'detach_for_release',
                        allocated_meanwhile)
    arq_binding.unbind(aconf, ctx, [uuid])
    row = _row(db, uuid)
    assert (row.state, row.consumer_id) == ('Unbound', None)
    assert _held(placement_url, uuid)['allocations'] == {}
    assert _usage(placement_url, device.rp_uuid) == 0
    assert seed.handles_in_use(db) == 0


def test_an_allocation_refuses_a_device_out_of_the_schedule(
        aconf, db, ctx, trait, placement_url):
    """A device that turned unhealthy after Placement offered it (its
    provider not reserved yet): a pod would get a broken device.  Nova's
    bind refuses it; a standalone allocation bound it."""
    device = _provide(aconf, db, trait)
    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(health='unhealthy', health_reason='XID 79'))
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    with pytest.raises(exception.BindFailed, match='is unhealthy: XID 79'):
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert _row(db, uuid).state == 'Initial'
    assert _held(placement_url, uuid)['allocations'] == {}
    assert seed.handles_in_use(db) == 0


def test_a_remote_pool_is_no_candidate(aconf, db, ctx, trait,
                                       placement_url):
    """A remote pool's sharing provider (an aggregate's, OWNER_CYBORG, of
    the same class) was a candidate: claimed, then refused as "no enabled
    device here" (400), no other candidate tried.  It is not asked for:
    with no device free, the answer is that none is (409)."""
    device = _provide(aconf, db, trait, total=1)
    other, = _arqs(db, ctx, {'resources:FPGA': '1',
                             'trait:' + trait: 'required'})
    arq_allocation.allocate(aconf, ctx, other, 'pod-0', 'k8s-pod')
    placement = placement_client.get_client(aconf)
    pool = str(uuidlib.uuid4())
    placement.create_provider(pool, 'remote_pool_' + pool[:8], None)
    placement.set_inventories(pool, {'FPGA': {'total': 1, 'max_unit': 1}})
    placement.ensure_traits([trait])
    placement.set_traits(pool, {trait, 'OWNER_CYBORG',
                                'MISC_SHARES_VIA_AGGREGATE'})
    aggregate = str(uuidlib.uuid4())
    placement.set_aggregates(pool, {aggregate})
    compute = placement.get_provider_by_name(device.hostname)['uuid']
    placement.set_aggregates(compute, {aggregate})
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    with pytest.raises(exception.NoCandidate):
        arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
    assert _held(placement_url, uuid)['allocations'] == {}
    assert _row(db, uuid).state == 'Initial'


def _is_release(request, consumer=None):
    """Whether ``request`` releases ``consumer``'s allocations (None:
    any consumer's)."""
    if consumer is None:
        consumer = request.path.rsplit('/', 1)[-1]
    return request.path == '/allocations/' + consumer and (
        request.method == 'DELETE' or (request.method == 'PUT'
                                       and request.json()['allocations']
                                       == {}))


def _releases_refused(placement_url, consumer=None):
    """A Placement front forwarding every request to the real one, but
    answering a release of ``consumer``'s allocations (None: of any
    consumer's) 503, without forwarding it, while ``front.away`` is set:
    Placement gone."""
    away = threading.Event()
    forward = _forwarder(placement_url, lambda request: False)

    def respond(request):
        if away.is_set() and _is_release(request, consumer):
            return 503, {}, {'errors': [{'status': 503,
                                         'detail': 'Placement is away'}]}
        return forward(request)

    front = recording_http.RecordingServer(respond)
    front.away = away
    return front


def _allocated_racing(aconf, ctx, uuid, meanwhile, placement_url,
                      monkeypatch):
    """Allocate ARQ ``uuid`` while ``meanwhile()`` (a delete or an unbind
    of it) runs its release just before the claim lands, Placement then
    going away before the allocation can release the claim itself."""
    claim = arq_allocation._claim

    def released_first(placement, context, job):
        meanwhile()
        front.away.set()
        return claim(placement, context, job)

    monkeypatch.setattr(arq_allocation, '_claim', released_first)
    front = _releases_refused(placement_url)
    with front:
        placement_fixture.placement_conf(aconf, front.url)
        placement_client.reset_clients()
        with pytest.raises(exception.Conflict, match='deleted or unbound'):
            arq_allocation.allocate(aconf, ctx, uuid, 'pod-1', 'k8s-pod')
        # Placement still away: the claim stays, and so does the record.
        assert arq_binding.fail_stuck(aconf, ctx) == 0
        # The consumer the claim was made under.
        consumer, = {r.path.rsplit('/', 1)[-1] for r in front.requests
                     if r.method == 'PUT' and not _is_release(r)}
        assert _held(placement_url, consumer)['allocations'] != {}
    placement_fixture.placement_conf(aconf, placement_url)
    placement_client.reset_clients()
    return consumer


def _owed(db):
    with db.connect() as c:
        return c.scalars(sa.select(
            models.PlacementRelease.consumer_uuid)).all()


def test_a_claim_a_delete_raced_is_released_once_placement_is_back(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """A delete released the ARQ's claim before the allocation's landed;
    the allocation, finding the ARQ gone, could not release it (Placement
    away) and said the stuck-bind check would: that check works on ARQ
    rows, and there was none.  The claim held the unit for good."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    _allocated_racing(aconf, ctx, uuid, lambda: arq_binding.delete(
        aconf, ctx, arq_uuids=[uuid]), placement_url, monkeypatch)
    assert _row(db, uuid) is None
    assert _usage(placement_url, device.rp_uuid) == 1
    # Placement back: the periodic releases it, and forgets it.
    assert arq_binding.fail_stuck(aconf, ctx) == 0
    assert _held(placement_url, uuid)['allocations'] == {}
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []


def test_a_claim_an_unbind_raced_is_released_once_placement_is_back(
        aconf, db, ctx, trait, placement_url, monkeypatch):
    """An unbind that raced the allocation leaves the ARQ Unbound, with no
    consumer: deleting it released nothing, and the claim stayed for
    good.  Then it was released only once the ARQ was gone: an Unbound
    ARQ kept the unit until its next allocation or its deletion.  The
    stuck-bind check releases it while the ARQ is in no bind."""
    device = _provide(aconf, db, trait)
    uuid, = _arqs(db, ctx, {'resources:FPGA': '1',
                            'trait:' + trait: 'required'})
    _allocated_racing(aconf, ctx, uuid, lambda: arq_binding.unbind(
        aconf, ctx, [uuid]), placement_url, monkeypatch)
    assert (_row(db, uuid).state, _row(db, uuid).consumer_id) == (
        'Unbound', None)
    assert _usage(placement_url, device.rp_uuid) == 1
    assert arq_binding.fail_stuck(aconf, ctx) == 0
    assert _held(placement_url, uuid)['allocations'] == {}
    assert _usage(placement_url, device.rp_uuid) == 0
    assert _owed(db) == []
    assert _row(db, uuid).state == 'Unbound'


def test_a_release_owed_is_recorded_once(ctx, db):
    """Two allocations of one ARQ (unbound between them) may both leave
    its claim behind: one record."""
    consumer = str(uuidlib.uuid4())
    for _ in range(2):
        db_api.write_retrying(ctx, release_db.add, ctx, consumer)
    assert _owed(db) == [consumer]
    assert release_db.owed(ctx) == [consumer]
    db_api.write_retrying(ctx, release_db.forget, ctx, consumer)
    assert _owed(db) == []
