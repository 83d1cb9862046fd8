"""The ARQ state machine on SQLite, against the real (embedded) Placement
and a recording Nova endpoint."""

import datetime
import time
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import arq_binding, awaited, nova
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.placement import client as placement_client
from cyborg.placement import embedded
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes
from tests.fixtures import recording_http

# The real Placement, shared by this module's tests.
placement_url = seed.placement_url


fake_nova = recording_http.fake_nova

aconf = seed.bind_conf
ctx = seed.service_ctx


@pytest.fixture
def device(db):
    return seed.seed_device(db, handles=4)


def _create(db, ctx, groups=({'resources:FPGA': '1'},)):
    profile = seed.seed_profile(db, list(groups))
    return [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]


def _binding(device, instance=None):
    return {'hostname': device.hostname, 'device_rp_uuid': device.rp_uuid,
            'instance_uuid': instance or str(uuidlib.uuid4())}


def _bind(conf, ctx, bindings):
    arq_binding.start_bind(conf, ctx, bindings).result(30)


def _take_handle(db, ctx, job):
    """Take the job's handle in a transaction of its own, as a bind that
    has something slow to do before it ends (programming, an mdev), for
    the bind the ARQ is in."""
    job['bind_id'] = seed.arq_rows(db)[job['uuid']].bind_id
    return db_api.write_retrying(ctx, arq_binding._take_handle_in, ctx,
                                 job)[0]


def _state(db, uuid):
    return seed.arq_rows(db)[uuid]


def test_create_makes_n_arqs_per_group(conf, db, ctx):
    groups = [{'resources:FPGA': '2', 'trait:CUSTOM_X': 'required'},
              {'resources:CUSTOM_A': '1', 'resources:CUSTOM_B': '2'}]
    profile = seed.seed_profile(db, groups, name='two-groups')
    created = arq_binding.create(ctx, profile, 'p1')
    assert [a['device_profile_group_id'] for a in created] == [0, 0, 1, 1, 1]
    assert {a['state'] for a in created} == {'Initial'}
    assert {a['device_profile_name'] for a in created} == {'two-groups'}
    assert {a['attach_handle_type'] for a in created} == {''}
    rows = seed.arq_rows(db)
    assert set(rows) == {a['uuid'] for a in created}
    assert {r.project_id for r in rows.values()} == {'p1'}


def test_create_unknown_profile_is_404_and_writes_nothing(conf, db, ctx):
    with pytest.raises(exception.DeviceProfileNotFound) as e:
        arq_binding.create(ctx, str(uuidlib.uuid4()), 'p1')
    assert e.value.code == 404
    assert seed.arq_rows(db) == {}


def test_a_profile_that_requests_no_accelerator_is_400(conf, db, ctx):
    """Such profiles are refused at creation; one stored before (or in
    OpenStack Cyborg's database) makes no ARQs: a 400 saying why, not a
    201 with none."""
    profile = seed.seed_profile(db, [{'trait:CUSTOM_FPGA_INTEL': 'required'}],
                                name='traits-only')
    with pytest.raises(exception.Invalid) as e:
        arq_binding.create(ctx, profile, 'p1')
    assert e.value.code == 400
    assert 'traits-only requests no accelerator' in str(e.value)
    assert seed.arq_rows(db) == {}


def test_create_by_name_sees_only_what_the_project_may(conf, db, ctx):
    """RPC 1.6: the conductor finds the profile by name in the create's
    transaction, with the caller's view of private profiles."""
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}],
                                name='theirs')
    with sa.orm.Session(db) as session, session.begin():
        session.execute(sa.update(models.DeviceProfile)
                        .where(models.DeviceProfile.uuid == profile)
                        .values(visibility='private', project_id='p2'))
    with pytest.raises(exception.DeviceProfileNotFound) as e:
        arq_binding.create(ctx, None, 'p1', device_profile_name='theirs',
                           visible_to='p1')
    assert 'theirs' in str(e.value) and seed.arq_rows(db) == {}
    created = arq_binding.create(ctx, None, 'p2',
                                 device_profile_name='theirs',
                                 visible_to='p2')
    assert [a['device_profile_name'] for a in created] == ['theirs']
    # An admin's view (None) sees every profile.
    assert len(arq_binding.create(ctx, None, 'p1',
                                  device_profile_name='theirs',
                                  visible_to=None)) == 1


def test_bind_ends_bound_with_a_handle_and_tells_nova(aconf, db, ctx, device,
                                                      fake_nova):
    uuid, = _create(db, ctx)
    binding = _binding(device)
    _bind(aconf, ctx, {uuid: binding})
    row = _state(db, uuid)
    assert row.state == 'Bound'
    assert row.hostname == device.hostname
    assert row.device_rp_uuid == device.rp_uuid
    assert row.instance_uuid == binding['instance_uuid']
    assert row.attach_handle_id is not None
    assert seed.handles_in_use(db) == 1
    assert fake_nova.events == [{
        'name': 'accelerator-request-bound', 'tag': uuid, 'status':
            'completed', 'server_uuid': binding['instance_uuid']}]
    post = fake_nova.event_posts()[0]
    assert post.headers['OpenStack-API-Version'] == 'compute 2.82'
    with db.connect() as c:
        assert c.scalar(sa.select(sa.func.count()).select_from(
            models.NovaEvent)) == 0


def test_one_event_request_per_patch(aconf, db, ctx, device, fake_nova):
    uuids = _create(db, ctx, [{'resources:FPGA': '3'}])
    instance = str(uuidlib.uuid4())
    _bind(aconf, ctx, {u: _binding(device, instance) for u in uuids})
    assert len(fake_nova.event_posts()) == 1
    assert sorted(e['tag'] for e in fake_nova.events) == sorted(uuids)
    assert seed.handles_in_use(db) == 3


@pytest.mark.parametrize('change, message', [
    ({'hostname': 'elsewhere'}, 'is not on host elsewhere'),
    ({'device_rp_uuid': str(uuidlib.uuid4())}, 'no device provides'),
])
def test_bad_target_is_400_and_writes_nothing(aconf, db, ctx, device,
                                              change, message):
    good, bad = _create(db, ctx, [{'resources:FPGA': '2'}])
    bindings = {good: _binding(device), bad: dict(_binding(device),
                                                  **change)}
    with pytest.raises(exception.BindFailed, match=message) as e:
        arq_binding.start_bind(aconf, ctx, bindings)
    assert e.value.code == 400
    assert {r.state for r in seed.arq_rows(db).values()} == {'Initial'}
    assert seed.handles_in_use(db) == 0


def test_device_in_maintenance_or_gone_is_400(aconf, db, ctx):
    maintaining = seed.seed_device(db, status='maintaining', handles=1)
    uuid, = _create(db, ctx)
    with pytest.raises(exception.BindFailed, match='maintenance'):
        arq_binding.start_bind(aconf, ctx, {uuid: _binding(maintaining)})
    gone = seed.seed_device(db, handles=1)
    with db.begin() as c:
        c.execute(sa.update(models.Deployable).where(
            models.Deployable.id == gone.deployable_id).values(gone=True))
    with pytest.raises(exception.BindFailed, match='no device provides'):
        arq_binding.start_bind(aconf, ctx, {uuid: _binding(gone)})
    assert _state(db, uuid).state == 'Initial'


@pytest.mark.parametrize('model, health, bindable', [
    (models.Device, 'unhealthy', False),
    (models.Deployable, 'probing', False),
    (models.Device, 'lost', False),
    (models.Deployable, 'suspect', True),
])
def test_a_device_out_of_the_schedule_is_not_bound(aconf, db, ctx, model,
                                                   health, bindable):
    """A device that left the schedule after Nova chose it (a fault
    between the scheduler's claim and the bind) is refused with its
    reason; a suspect one (a transient fault) is still bound."""
    device = seed.seed_device(db, handles=1)
    row_id = device.device_id if model is models.Device \
        else device.deployable_id
    with db.begin() as c:
        c.execute(sa.update(model).where(model.id == row_id).values(
            health=health, health_reason='XID 79: fallen off the bus'))
    uuid, = _create(db, ctx)
    if bindable:
        arq_binding.start_bind(aconf, ctx, {uuid: _binding(device)})
        assert _state(db, uuid).state == 'Bound'
        return
    with pytest.raises(exception.BindFailed,
                       match=f'is {health}: XID 79') as e:
        arq_binding.start_bind(aconf, ctx, {uuid: _binding(device)})
    assert e.value.code == 400
    assert _state(db, uuid).state == 'Initial'
    assert seed.handles_in_use(db) == 0


def test_an_instance_that_is_not_a_uuid_is_400(aconf, db, ctx, device):
    """Refused with nothing written and Placement never asked about it
    (the API refuses it too; this is the conductor's own RPC)."""
    uuid, = _create(db, ctx)
    binding = dict(_binding(device), instance_uuid='not-a-uuid')
    with pytest.raises(exception.Invalid, match='is not a uuid') as e:
        arq_binding.start_bind(aconf, ctx, {uuid: binding})
    assert e.value.code == 400
    assert _state(db, uuid).state == 'Initial'


def test_unknown_or_foreign_arq_is_404(aconf, db, ctx, device):
    uuid, = _create(db, ctx)
    with pytest.raises(exception.ARQNotFound):
        arq_binding.start_bind(aconf, ctx,
                               {str(uuidlib.uuid4()): _binding(device)})
    other = cyborg_context.RequestContext(project_id='p2')
    with pytest.raises(exception.ARQNotFound):
        arq_binding.start_bind(aconf, other, {uuid: _binding(device)})
    assert _state(db, uuid).state == 'Initial'


def test_arqs_an_instance_holds_count_against_its_allocation(
        aconf, db, ctx, device, placement_url):
    """What an instance already holds on the host it is bound on counts
    against its allocation on the provider.  ARQs it holds on another
    host (Nova rescheduled a build that failed on its first host before
    using them, a claim or a late affinity check, without deleting them)
    refuse the bind: Nova's compute would attach them too
    (test_nova_bind_contract.py); once Nova deleted them, the bind on
    the other host goes through."""
    other = seed.seed_device(db, hostname='host-b', handles=2)
    _providers(aconf, (device.rp_uuid, device.name),
               (other.rp_uuid, other.name))
    first, = _create(db, ctx)
    second, = _create(db, ctx)
    instance = str(uuidlib.uuid4())
    _allocate(placement_url, instance, device.rp_uuid)
    _bind(aconf, ctx, {first: _binding(device, instance)})
    # Another request's ARQ on the same provider: one FPGA allocated, two
    # would be held.
    with pytest.raises(exception.BindFailed, match='holds 1 unit of FPGA'):
        arq_binding.start_bind(aconf, ctx, {second: _binding(device,
                                                             instance)})
    assert _state(db, second).state == 'Initial'
    # Rescheduled: the allocation moved to another host's provider, the
    # first ARQ still Bound on the first host.
    _placement_put(placement_url, '/allocations/' + instance, {
        'allocations': {other.rp_uuid: {'resources': {'FPGA': 1}}},
        'project_id': 'p1', 'user_id': 'u1', 'consumer_generation': 1,
        'consumer_type': 'INSTANCE'})
    with pytest.raises(exception.BindFailed,
                       match=f'already holds accelerator requests bound on '
                             f'host {device.hostname} \\({first} Bound\\)'):
        arq_binding.start_bind(aconf, ctx, {second: _binding(other,
                                                             instance)})
    assert _state(db, second).state == 'Initial'
    assert _state(db, first).state == 'Bound'
    assert seed.handles_in_use(db) == 1
    # Nova's delete by instance takes the first; a new request binds.
    assert arq_binding.delete(aconf, ctx, [first]) == []
    _bind(aconf, ctx, {second: _binding(other, instance)})
    assert _state(db, second).state == 'Bound'
    assert arq_binding.delete(aconf, ctx, instance_uuid=instance) == []
    assert seed.handles_in_use(db) == 0


def test_held_arqs_count_for_every_instance_of_a_patch(
        aconf, db, ctx, device, placement_url):
    """One PATCH binding ARQs of two instances: what the second instance
    (in the check's order) already holds counts against its allocation
    as the first's does."""
    _providers(aconf, (device.rp_uuid, device.name))
    first = '00000000-0000-4000-8000-000000000001'
    second = 'ffffffff-0000-4000-8000-000000000002'
    held, = _create(db, ctx)
    _allocate(placement_url, second, device.rp_uuid)
    _bind(aconf, ctx, {held: _binding(device, second)})
    _allocate(placement_url, first, device.rp_uuid)
    a, b = _create(db, ctx), _create(db, ctx)
    with pytest.raises(exception.BindFailed, match=f'instance {second} '
                       f'holds 1 unit of FPGA'):
        arq_binding.start_bind(aconf, ctx, {
            a[0]: _binding(device, first), b[0]: _binding(device, second)})
    assert {_state(db, u[0]).state for u in (a, b)} == {'Initial'}


def test_rebinding_a_bound_arq_is_409(aconf, db, ctx, device):
    uuid, = _create(db, ctx)
    binding = _binding(device)
    _bind(aconf, ctx, {uuid: binding})
    handle = _state(db, uuid).attach_handle_id
    with pytest.raises(exception.Conflict):
        arq_binding.start_bind(aconf, ctx, {uuid: binding})
    assert _state(db, uuid).attach_handle_id == handle
    assert seed.handles_in_use(db) == 1


def _placement_put(url, path, body):
    response = requests.put(url + path, json=body, headers={
        'x-auth-token': embedded.NOAUTH_TOKEN,
        'OpenStack-API-Version': 'placement 1.39'})
    assert response.status_code in (200, 204), response.text


def _providers(aconf, *rps):
    """Providers of 4 FPGAs each, (uuid, name) pairs."""
    client = placement_client.get_client(aconf)
    for rp, name in rps:
        client.create_provider(rp, name, None)
        client.set_inventories(rp, {'FPGA': {'total': 4, 'max_unit': 4}})


def _allocate(placement_url, instance, rp, generation=None, fpgas=1):
    """``fpgas`` FPGAs of ``rp`` allocated to ``instance``, as Nova
    would."""
    _placement_put(placement_url, '/allocations/' + instance, {
        'allocations': {rp: {'resources': {'FPGA': fpgas}}},
        'project_id': 'p1', 'user_id': 'u1',
        'consumer_generation': generation, 'consumer_type': 'INSTANCE'})


def _answer_late(monkeypatch, seconds):
    """The real Placement answers allocation lookups ``seconds`` late;
    returns (asked, answered): the monotonic times of each question and
    answer."""
    asked, answered = [], []
    lookup = placement_client.PlacementClient.get_allocations_for_consumer

    def late(self, consumer_uuid):
        asked.append(time.monotonic())
        time.sleep(seconds)
        try:
            return lookup(self, consumer_uuid)
        finally:
            answered.append(time.monotonic())
    monkeypatch.setattr(placement_client.PlacementClient,
                        'get_allocations_for_consumer', late)
    return asked, answered


_OVERLAP = pytest.mark.parametrize(
    'overlap', [True, False],
    ids=['writes-while-placement-answers', 'placement-answers-first'])


@_OVERLAP
def test_allocation_must_cover_the_device(aconf, db, ctx, device,
                                          placement_url, monkeypatch,
                                          overlap):
    """Whether the bind's writes run while Placement answers (few lookups
    in flight) or after (many: a storm), a refusal writes nothing."""
    monkeypatch.setattr(arq_binding, 'OVERLAP_LOOKUPS', 4 if overlap else 0)
    other_rp = str(uuidlib.uuid4())
    _providers(aconf, (device.rp_uuid, device.name),
               (other_rp, 'other-' + other_rp))
    instance = str(uuidlib.uuid4())
    _allocate(placement_url, instance, other_rp)
    first, _second = _create(db, ctx, [{'resources:FPGA': '2'}])
    with pytest.raises(exception.BindFailed, match='no allocation'):
        arq_binding.start_bind(aconf, ctx, {first: _binding(device,
                                                            instance)})
    row = _state(db, first)
    assert (row.state, row.attach_handle_id) == ('Initial', None)
    assert seed.handles_in_use(db) == 0
    with db.connect() as c:
        assert c.scalar(sa.select(sa.func.count()).select_from(
            models.NovaEvent)) == 0
    assert arq_binding._lookups_in_flight() == 0
    _allocate(placement_url, instance, device.rp_uuid, generation=1)
    _bind(aconf, ctx, {first: _binding(device, instance)})
    assert _state(db, first).state == 'Bound'


@_OVERLAP
def test_allocation_must_cover_every_arq_bound_to_the_device(
        aconf, db, ctx, device, placement_url, monkeypatch, overlap):
    """Each ARQ is one unit of its group's resource class: an instance
    holding one FPGA of the device cannot have two ARQs bound there."""
    monkeypatch.setattr(arq_binding, 'OVERLAP_LOOKUPS', 4 if overlap else 0)
    _providers(aconf, (device.rp_uuid, device.name))
    instance = str(uuidlib.uuid4())
    _allocate(placement_url, instance, device.rp_uuid)
    arqs = _create(db, ctx, [{'resources:FPGA': '2'}])
    both = {uuid: _binding(device, instance) for uuid in arqs}
    with pytest.raises(exception.BindFailed,
                       match=f'instance {instance} holds 1 unit of FPGA on '
                             f'resource provider {device.rp_uuid}, not the '
                             f'2 its accelerator requests bound there need'):
        arq_binding.start_bind(aconf, ctx, both)
    assert [_state(db, uuid).state for uuid in arqs] == ['Initial'] * 2
    assert seed.handles_in_use(db) == 0
    _allocate(placement_url, instance, device.rp_uuid, generation=1,
              fpgas=2)
    _bind(aconf, ctx, both)
    assert [_state(db, uuid).state for uuid in arqs] == ['Bound'] * 2


@_OVERLAP
def test_writes_overlap_the_allocation_lookup(aconf, db, ctx, device,
                                              placement_url, monkeypatch,
                                              overlap):
    """With few lookups in flight the bind's writes run before Placement
    has answered; past OVERLAP_LOOKUPS they wait for the answer.  The real
    Placement answers, a third of a second late; the statements' times
    come from the engine."""
    monkeypatch.setattr(arq_binding, 'OVERLAP_LOOKUPS', 4 if overlap else 0)
    # Long enough to wait for the late answer inside the transaction.
    monkeypatch.setattr(arq_binding, 'OVERLAP_WAIT', 5)
    _providers(aconf, (device.rp_uuid, device.name))
    instance = str(uuidlib.uuid4())
    _allocate(placement_url, instance, device.rp_uuid)
    uuid, = _create(db, ctx)
    written = []
    _asked, answered = _answer_late(monkeypatch, 0.3)

    def seen(_conn, _cursor, statement, *_args):
        # The bind's own writes, not SQLite's write lock taken as the
        # transaction begins.
        if (statement.lstrip().upper().startswith(('UPDATE', 'INSERT'))
                and 'WHERE 0' not in statement):
            written.append(time.monotonic())
    sa.event.listen(db, 'before_cursor_execute', seen)
    try:
        _bind(aconf, ctx, {uuid: _binding(device, instance)})
    finally:
        sa.event.remove(db, 'before_cursor_execute', seen)
    assert _state(db, uuid).state == 'Bound'
    assert len(answered) == 1 and written
    assert (min(written) < answered[0]) == overlap


def test_a_late_answer_is_waited_for_outside_the_transaction(
        aconf, db, ctx, device, placement_url, monkeypatch):
    """An overlapping bind whose allocation lookup has not been answered
    OVERLAP_WAIT after its writes rolls them back and waits outside any
    transaction: a slow or hung Placement holds no lock (nor SQLite's write
    lock) longer.  The real Placement answers, a second late."""
    monkeypatch.setattr(arq_binding, 'OVERLAP_LOOKUPS', 4)
    monkeypatch.setattr(arq_binding, 'OVERLAP_WAIT', 0.1)
    _providers(aconf, (device.rp_uuid, device.name))
    instance = str(uuidlib.uuid4())
    _allocate(placement_url, instance, device.rp_uuid)
    uuid, = _create(db, ctx)
    asked, answered = _answer_late(monkeypatch, 1.0)
    with databases.transactions(db) as seen:
        _bind(aconf, ctx, {uuid: _binding(device, instance)})
    assert _state(db, uuid).state == 'Bound'
    assert len(answered) == 1
    # The first try's writes and its OVERLAP_WAIT, then nothing open
    # until Placement answered; the bind then commits.
    assert [how for _b, _e, how in seen.spans] == ['rollback', 'commit']
    assert not seen.open_between(asked[0] + 0.6, answered[0])


def test_no_free_handle_is_400_and_writes_nothing(aconf, db, ctx,
                                                  fake_nova):
    """Nova takes a resolved ARQ for done whatever its state: a bind
    ending BindFailed under a 202 booted the instance without its device.
    Refused, Nova ends the build (tests/unit/conductor/
    test_nova_bind_contract.py goes through the API)."""
    device = seed.seed_device(db, handles=1)
    uuids = _create(db, ctx, [{'resources:FPGA': '1'}] * 2)
    _bind(aconf, ctx, {uuids[0]: _binding(device)})
    with pytest.raises(exception.BindFailed,
                       match='no free attach handle') as e:
        arq_binding.start_bind(aconf, ctx, {uuids[1]: _binding(device)})
    assert e.value.code == 400
    rows = seed.arq_rows(db)
    assert [rows[u].state for u in uuids] == ['Bound', 'Initial']
    assert rows[uuids[1]].attach_handle_id is None
    assert seed.handles_in_use(db) == 1
    fake_nova.wait_for_events(1)
    assert [(e['tag'], e['status']) for e in fake_nova.events] == [
        (uuids[0], 'completed')]


def test_unbind_frees_the_handle_and_clears_the_binding(aconf, db, ctx,
                                                        device):
    uuid, = _create(db, ctx)
    _bind(aconf, ctx, {uuid: _binding(device)})
    arq_binding.unbind(aconf, ctx, [uuid])
    row = _state(db, uuid)
    assert row.state == 'Unbound'
    assert (row.hostname, row.device_rp_uuid, row.instance_uuid,
            row.attach_handle_id) == (None, None, None, None)
    assert seed.handles_in_use(db) == 0
    arq_binding.unbind(aconf, ctx, [uuid])  # idempotent
    _bind(aconf, ctx, {uuid: _binding(device)})  # Unbound binds again
    assert _state(db, uuid).state == 'Bound'


def test_delete_by_uuid_reports_missing_and_frees_handles(aconf, db, ctx,
                                                          device):
    bound, initial = _create(db, ctx, [{'resources:FPGA': '2'}])
    _bind(aconf, ctx, {bound: _binding(device)})
    missing = str(uuidlib.uuid4())
    assert arq_binding.delete(aconf, ctx, [bound, missing, initial]) == [
        missing]
    assert seed.arq_rows(db) == {}
    assert seed.handles_in_use(db) == 0


def test_delete_by_instance_is_idempotent(aconf, db, ctx, device):
    uuids = _create(db, ctx, [{'resources:FPGA': '2'}])
    other, = _create(db, ctx)
    instance = str(uuidlib.uuid4())
    _bind(aconf, ctx, {u: _binding(device, instance) for u in uuids})
    assert arq_binding.delete(aconf, ctx, instance_uuid=instance) == []
    assert list(seed.arq_rows(db)) == [other]
    assert arq_binding.delete(aconf, ctx, instance_uuid=instance) == []
    assert seed.handles_in_use(db) == 0


def test_stuck_bind_is_failed_and_nova_told(aconf, db, ctx, device,
                                            fake_nova):
    uuid, = _create(db, ctx)
    binding = _binding(device)
    arq_binding._validate(aconf, ctx, {uuid: binding}, allocations=False)
    long_ago = timeutils.utcnow() - datetime.timedelta(hours=1)
    with db.begin() as c:  # what a conductor killed mid-bind leaves
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == uuid).values(
            state='BindStarted', bind_started_at=long_ago,
            instance_uuid=binding['instance_uuid']))
    assert arq_binding.fail_stuck(aconf, ctx) == 1
    row = _state(db, uuid)
    assert row.state == 'BindFailed'
    assert 'did not finish' in row.bind_failure_reason
    assert [(e['tag'], e['status']) for e in fake_nova.events] == [
        (uuid, 'failed')]
    assert arq_binding.fail_stuck(aconf, ctx) == 0


def test_unbind_while_binding_releases_the_handle_once(aconf, db, ctx,
                                                       device):
    """The worker finds its ARQ unbound under it and gives up cleanly."""
    uuid, = _create(db, ctx)
    jobs = arq_binding._validate(aconf, ctx, {uuid: _binding(device)},
                                 allocations=False)
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == uuid).values(
            state='BindStarted', deployable_id=device.deployable_id,
            bind_id='b1'))
    handle = _take_handle(db, ctx, jobs[0])
    arq_binding.unbind(aconf, ctx, [uuid])
    assert seed.handles_in_use(db) == 0
    deadline = timeutils.utcnow() + datetime.timedelta(minutes=1)
    arq_binding._run_batch(aconf, ctx, 'b1', jobs, deadline)
    assert _state(db, uuid).state == 'Unbound'
    assert seed.handles_in_use(db) == 0
    assert handle.id is not None


def test_no_nova_configured_binds_without_events(conf, db, ctx, device,
                                                 placement_url, fake_nova):
    placement_fixture.placement_conf(conf, placement_url)
    placement_client.reset_clients()
    uuid, = _create(db, ctx)
    _bind(conf, ctx, {uuid: _binding(device)})
    assert _state(db, uuid).state == 'Bound'
    assert fake_nova.requests == []
    assert not nova.enabled(conf)


def test_a_bind_is_one_info_line(aconf, db, ctx, device, fake_nova, caplog):
    caplog.set_level('INFO', logger='cyborg')
    uuids = _create(db, ctx, [{'resources:FPGA': '2'}])
    instance = str(uuidlib.uuid4())
    _bind(aconf, ctx, {u: _binding(device, instance) for u in uuids})
    lines = [r.getMessage() for r in caplog.records
             if r.name == 'cyborg.conductor.arq_binding'
             and r.levelname == 'INFO']
    assert len(lines) == 2
    for uuid, line in zip(sorted(uuids), sorted(lines)):
        assert line.startswith('Accelerator request %s bound on %s'
                               % (uuid, device.hostname))
        assert instance in line and device.rp_uuid in line


def _left_binding(db, uuid, owner, started_at, handle_id=None):
    """What a conductor killed mid-bind leaves: BindStarted, owned."""
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == uuid).values(
            state='BindStarted', bind_started_at=started_at,
            bind_owner=owner, attach_handle_id=handle_id))
        if handle_id is not None:
            c.execute(sa.update(models.AttachHandle).where(
                models.AttachHandle.id == handle_id).values(in_use=True))


def test_restarted_conductor_fails_its_own_binds_at_once(aconf, db, ctx,
                                                         device, fake_nova):
    """Killed after committing BindStarted (one before taking a handle,
    one after): the restarted conductor fails both at once, frees the
    handle and tells Nova; another conductor's bind, and a bind this run
    started, are left alone."""
    aconf.set_override('host', 'conductor-a')
    before_handle, after_handle, theirs, this_run = _create(
        db, ctx, [{'resources:FPGA': '4'}])
    instance = str(uuidlib.uuid4())
    bindings = {u: _binding(device, instance)
                for u in (before_handle, after_handle)}
    # The first transaction of a bind, Placement's answers in hand.
    asked = arq_binding._ask_allocations(aconf, bindings)
    for answer in asked.values():
        answer.result(30)
    arq_binding._start(aconf, ctx, bindings, timeutils.utcnow(),
                       arq_binding._Known(asked))
    handle = _take_handle(db, ctx, {
        'uuid': after_handle, 'deployable_id': device.deployable_id,
        'device_rp_uuid': device.rp_uuid, 'group': {}})
    started_at = timeutils.utcnow() + datetime.timedelta(seconds=1)
    earlier = started_at - datetime.timedelta(seconds=5)
    _left_binding(db, theirs, 'conductor-b', earlier)
    _left_binding(db, this_run, 'conductor-a',
                  started_at + datetime.timedelta(seconds=1))

    assert arq_binding.recover(aconf, ctx, started_at) == 2
    rows = seed.arq_rows(db)
    assert rows[before_handle].state == rows[after_handle].state == (
        'BindFailed')
    assert 'conductor-a restarted' in rows[after_handle].bind_failure_reason
    assert rows[after_handle].attach_handle_id is None
    assert handle.id not in {r.attach_handle_id for r in rows.values()}
    assert seed.handles_in_use(db) == 0
    assert rows[theirs].state == rows[this_run].state == 'BindStarted'
    assert sorted((e['tag'], e['status']) for e in fake_nova.events) == (
        sorted([(before_handle, 'failed'), (after_handle, 'failed')]))
    assert arq_binding.recover(aconf, ctx, started_at) == 0


def test_bind_while_placement_is_down_skips_the_check(aconf, db, ctx,
                                                      device, caplog):
    """One WARNING line, no traceback, and the bind ends Bound."""
    with processes.refused_url() as url:
        placement_fixture.placement_conf(aconf, url)
        placement_client.reset_clients()
        uuid, = _create(db, ctx)
        _bind(aconf, ctx, {uuid: _binding(device)})
    assert _state(db, uuid).state == 'Bound'
    warnings = [r for r in caplog.records if 'without checking' in
                r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == 'WARNING'
    assert warnings[0].exc_info is None
    assert 'Traceback' not in caplog.text


def test_bind_names_the_compute_node_as_nova_does(aconf, db, ctx, device):
    """Nova's hostname is the hypervisor's (the compute node provider's
    name), which may differ from the service host the agent reports."""
    node = device.hostname + '.cloud.example.org'
    with db.begin() as c:
        c.execute(sa.insert(models.Host).values(
            hostname=device.hostname, compute_node_name=node,
            placement_synced=True))
    uuid, other = _create(db, ctx, [{'resources:FPGA': '2'}])
    _bind(aconf, ctx, {uuid: dict(_binding(device), hostname=node)})
    assert _state(db, uuid).state == 'Bound'
    assert _state(db, uuid).hostname == node
    with pytest.raises(exception.BindFailed, match='not on host'):
        arq_binding.start_bind(aconf, ctx, {other: dict(
            _binding(device), hostname='elsewhere.example.org')})


def test_a_quick_bind_and_a_plain_delete_commit_once_each(aconf, db, ctx,
                                                          device, fake_nova):
    """Validating, taking the handle, Bound and its Nova event: one
    transaction; so is reading and deleting an ARQ with nothing to release
    outside the database."""
    uuid, = _create(db, ctx)
    with databases.transactions(db) as seen:
        batch = arq_binding.start_bind(aconf, ctx, {uuid: _binding(device)})
        # Answered Bound: what the PATCH's caller reads next.
        assert _state(db, uuid).state == 'Bound'
    assert len(seen.commits) == 1
    # The batch's Nova event, delivered (and its delivery recorded) in the
    # background, before the delete is counted.
    batch.result(30)
    with databases.transactions(db) as seen:
        assert arq_binding.delete(aconf, ctx, [uuid]) == []
    assert len(seen.commits) == 1
    assert seed.arq_rows(db) == {}
    assert seed.handles_in_use(db) == 0


def _nearly_late(ctx):
    """``ctx`` whose caller stops waiting in less than the commit margin:
    not dropped when it arrives, too late to commit."""
    return cyborg_context.RequestContext.from_dict(
        ctx.to_dict(), answer_by=time.time() + awaited.COMMIT_MARGIN / 2)


def test_writes_too_late_for_their_caller_are_rolled_back(aconf, db, ctx,
                                                          device):
    """The API answers 503 when its caller's wait ends: a create, a bind
    or a delete that would commit after that (or just before it) writes
    nothing."""
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    with pytest.raises(exception.ServiceUnavailable) as raised:
        arq_binding.create(_nearly_late(ctx), profile, 'p1')
    assert 'rolled back, nothing written' in str(raised.value)
    assert seed.arq_rows(db) == {}

    uuid, = _create(db, ctx)
    with pytest.raises(exception.ServiceUnavailable):
        arq_binding.start_bind(aconf, _nearly_late(ctx),
                               {uuid: _binding(device)})
    assert _state(db, uuid).state == 'Initial'
    assert seed.handles_in_use(db) == 0

    _bind(aconf, ctx, {uuid: _binding(device)})
    with pytest.raises(exception.ServiceUnavailable):
        arq_binding.delete(aconf, _nearly_late(ctx), [uuid])
    assert _state(db, uuid).state == 'Bound'
    assert seed.handles_in_use(db) == 1

    # In time, each commits as ever.
    in_time = cyborg_context.RequestContext.from_dict(
        ctx.to_dict(), answer_by=time.time() + 20)
    assert arq_binding.delete(aconf, in_time, [uuid]) == []
    assert seed.arq_rows(db) == {}


def test_a_bind_whose_outcome_cannot_be_recorded_leaves_the_rest_going(
        aconf, db, ctx, device, fake_nova, monkeypatch):
    """The background work of one PATCH: the first ARQ's failure could not
    be written (the database away longer than the retries).  That error
    left the loop: the other ARQs were never bound, the batch's events
    never sent, and nothing logged (the future's exception was never
    read)."""
    from oslo_db import exception as db_exc

    first, second = _create(db, ctx, [{'resources:FPGA': '2'}])
    instance = str(uuidlib.uuid4())
    jobs = arq_binding._validate(aconf, ctx, {
        first: _binding(device, instance),
        second: _binding(device, instance)}, allocations=False)
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid.in_([first, second])).values(
            state='BindStarted', deployable_id=device.deployable_id,
            instance_uuid=instance, hostname=device.hostname,
            device_rp_uuid=device.rp_uuid, bind_id='b1'))
    for job in jobs:
        job['bind_id'] = 'b1'
    bind_one, fail = arq_binding._bind_one, arq_binding._fail

    def first_one_breaks(conf, context, batch_id, job, *args, **kwargs):
        if job['uuid'] == first:
            raise RuntimeError('the agent went away')
        return bind_one(conf, context, batch_id, job, *args, **kwargs)

    def database_away(conf, context, batch_id, arq_uuid, *args, **kwargs):
        if arq_uuid == first:
            raise db_exc.DBConnectionError('database away')
        return fail(conf, context, batch_id, arq_uuid, *args, **kwargs)

    monkeypatch.setattr(arq_binding, '_bind_one', first_one_breaks)
    monkeypatch.setattr(arq_binding, '_fail', database_away)
    deadline = timeutils.utcnow() + datetime.timedelta(minutes=1)
    # Returns the future of the events' delivery.
    assert arq_binding._run_batch(aconf, ctx, 'b1', jobs, deadline).result(30)
    assert _state(db, first).state == 'BindStarted'
    assert _state(db, second).state == 'Bound'
    assert [(e['tag'], e['status']) for e in fake_nova.events] == [
        (second, 'completed')]


def test_a_stuck_bind_is_failed_only_while_the_arq_is_still_in_it(
        aconf, db, ctx, device, fake_nova):
    """The stuck-bind check (and a restarted conductor's) read the ARQs,
    then failed them: one unbound and bound again in between, a new bind
    well under way, was failed for the old one (and its remote handle
    detached).  What is failed is the bind found stuck."""
    uuid, = _create(db, ctx)
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == uuid).values(
            state='BindStarted', deployable_id=device.deployable_id,
            instance_uuid=str(uuidlib.uuid4()), hostname=device.hostname,
            device_rp_uuid=device.rp_uuid, bind_id='the-new-bind'))
    assert arq_binding._fail_abandoned(aconf, ctx, {uuid: 'the-old-bind'},
                                       'stuck') == 0
    assert _state(db, uuid).state == 'BindStarted'
    assert fake_nova.events == []
    assert arq_binding._fail_abandoned(aconf, ctx, {uuid: 'the-new-bind'},
                                       'stuck') == 1
    assert _state(db, uuid).state == 'BindFailed'


def test_a_caller_with_no_project_binds_no_one_s_arqs(aconf, db, ctx,
                                                      device):
    """The conductor applies the API's ownership rule too: a caller that
    names no project (and is neither an admin nor a service) owns no ARQ;
    it does not see every project's."""
    uuid, = _create(db, ctx)
    nobody = cyborg_context.RequestContext(user_id='u1', roles=['member'])
    with pytest.raises(exception.ARQNotFound):
        arq_binding.bind(aconf, nobody, {uuid: _binding(device)})
    assert _state(db, uuid).state == 'Initial'
