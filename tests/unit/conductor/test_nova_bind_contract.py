"""What Nova makes of the answer to its bind (PATCH
/v2/accelerator_requests).

Nova's compute (``_get_bound_arq_resources``), once the PATCH answered
2xx, reads the instance's resolved ARQs and takes every one for done
without reading its state; where they are not exactly those it bound, it
reads every ARQ of the instance and its virt driver attaches each PCI
handle among them.  So:

- a bind that can only end BindFailed must refuse the PATCH (400, nothing
  written): answered 202 and failed, the instance booted without its
  device.  Only binds with slow work left (programming, an mdev to make,
  a fabric attach) are answered before they can fail, and those fail
  after the answer only for what the slow work finds (Glance, the agent,
  the fabric): a programming refused at once (no free handle, the card
  being programmed by another request, a function id Placement cannot
  take, the card used by another instance while the bind surely loads
  another image) refuses the PATCH;
- a bind for an instance that still holds ARQs on another host (a build
  rescheduled after its claim failed there, its ARQs left) is refused:
  accepted, the second host's compute attached the first host's device
  too.  Nova then ends the build and deletes the instance's ARQs.

Conductor-level tests first, then the API as Nova calls it.
"""

import datetime
import json
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa
import webob

from cyborg.common import exception
from cyborg.conductor import arq_binding
from cyborg.conductor import programming
from cyborg.db import models
from cyborg.db.api import deployables as deployable_db
from cyborg.placement import client as placement_client
from cyborg.placement import embedded
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http
from tests.unit.conductor import test_programming_take_out_race as tor

# The real Placement, shared by this module's tests.
placement_url = seed.placement_url
fake_nova = recording_http.fake_nova
glance = recording_http.fake_glance

aconf = seed.bind_conf
ctx = seed.service_ctx

FPGA = {'resources:FPGA': '1'}


def _create(db, ctx, groups=(FPGA,)):
    profile = seed.seed_profile(db, list(groups))
    return [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]


def _binding(device, instance, hostname=None):
    return {'hostname': hostname or device.hostname,
            'device_rp_uuid': device.rp_uuid, 'instance_uuid': instance}


def _events_recorded(engine, arq_uuids):
    with engine.connect() as c:
        return c.scalar(sa.select(sa.func.count()).select_from(
            models.NovaEvent).where(models.NovaEvent.arq_uuid.in_(
                list(arq_uuids))))


def _untouched(row):
    """An ARQ as a refused bind must leave it: Initial, no binding."""
    return (row.state, row.hostname, row.instance_uuid, row.device_rp_uuid,
            row.attach_handle_id, row.bind_id, row.bind_started_at) == (
        'Initial', None, None, None, None, None, None)


# -- no free attach handle ----------------------------------------------------

def test_a_patch_one_of_whose_arqs_finds_no_handle_writes_nothing(
        aconf, db, ctx, fake_nova):
    """One ARQ short of a handle (another instance's ARQ holds the only
    one: Nova deleted it while cyborg was away) refuses the whole PATCH,
    its other ARQ too: no handle taken, no Nova event recorded."""
    roomy = seed.seed_device(db, hostname='host-a', handles=2)
    full = seed.seed_device(db, hostname='host-a', handles=1)
    leaked, = _create(db, ctx)
    arq_binding.start_bind(aconf, ctx, {leaked: _binding(
        full, str(uuidlib.uuid4()))}).result(30)
    fake_nova.wait_for_events(1)
    instance = str(uuidlib.uuid4())
    first, second = _create(db, ctx, [{'resources:FPGA': '2'}])
    with pytest.raises(exception.BindFailed) as e:
        arq_binding.start_bind(aconf, ctx, {
            first: _binding(roomy, instance),
            second: _binding(full, instance)})
    assert e.value.code == 400
    assert str(e.value) == (f'Binding failed: no free attach handle on '
                            f'resource provider {full.rp_uuid}')
    rows = seed.arq_rows(db)
    assert _untouched(rows[first]) and _untouched(rows[second])
    assert seed.handles_in_use(db) == 1
    assert _events_recorded(db, [first, second]) == 0
    assert [e['tag'] for e in fake_nova.events] == [leaked]


def test_an_mdev_bind_that_finds_no_handle_is_refused(aconf, db, ctx):
    """An mdev still to be made is slow work, but its handle is taken in
    the PATCH's transaction: none free, the PATCH is refused."""
    gpu = seed.seed_device(db, hostname='gpu-host', handles=0,
                           attach_type='MDEV')
    uuid, = _create(db, ctx, [{'resources:VGPU': '1'}])
    with pytest.raises(exception.BindFailed,
                       match='no free attach handle') as e:
        arq_binding.start_bind(aconf, ctx, {uuid: _binding(
            gpu, str(uuidlib.uuid4()))})
    assert e.value.code == 400
    assert _untouched(seed.arq_rows(db)[uuid])
    assert _events_recorded(db, [uuid]) == 0


def _mark(db, device):
    """A programming mark on the device, as another conductor's (or an
    admin's) programming of its card sets it."""
    until = datetime.datetime(2100, 1, 1)
    with db.begin() as c:
        c.execute(sa.update(models.Deployable).where(
            models.Deployable.id == device.deployable_id).values(
            programming_until=until))
    return until


@pytest.fixture
def gconf(aconf, glance):
    """``aconf``, and a Glance holding no image."""
    aconf.set_override('auth_type', 'none', group='glance')
    aconf.set_override('endpoint_override', glance.url, group='glance')
    return aconf


def test_a_bind_that_programs_and_finds_no_handle_is_refused(
        aconf, db, ctx):
    """A bind that programs the card takes its handle in the PATCH's
    transaction too: none free, the PATCH is refused (it used to be
    answered 202 and end BindFailed at once, before Nova's first read)."""
    full = seed.seed_device(db, hostname='host-a', handles=0)
    uuid, = _create(db, ctx, [dict(FPGA, **{'accel:function_id': 'f1'})])
    with pytest.raises(exception.BindFailed) as e:
        arq_binding.start_bind(aconf, ctx, {uuid: _binding(
            full, str(uuidlib.uuid4()))})
    assert e.value.code == 400
    assert str(e.value) == (f'Binding failed: no free attach handle on '
                            f'resource provider {full.rp_uuid}')
    assert _untouched(seed.arq_rows(db)[uuid])
    assert _events_recorded(db, [uuid]) == 0


@pytest.mark.parametrize('group, reason', [
    ({'accel:function_id': 'f' * 300}, 'too long to name a Placement trait'),
    ({'accel:function_id': 'f1', 'accel:bitstream_id': 'b1'},
     'a group may name accel:bitstream_id or accel:function_id, not both')])
def test_a_bind_whose_programming_is_refused_at_once_is_refused(
        aconf, db, ctx, group, reason):
    device = seed.seed_device(db, hostname='host-a', handles=1)
    uuid, = _create(db, ctx, [dict(FPGA, **group)])
    with pytest.raises(exception.BindFailed, match=reason) as e:
        arq_binding.start_bind(aconf, ctx, {uuid: _binding(
            device, str(uuidlib.uuid4()))})
    assert e.value.code == 400
    assert _untouched(seed.arq_rows(db)[uuid])
    assert seed.handles_in_use(db) == 0


def test_a_bind_that_programs_a_card_being_programmed_is_refused(
        aconf, db, ctx):
    """Another request programs the card (another conductor's bind, an
    admin): the bind's programming would be refused at once, so the
    PATCH is, saying why as the programming does."""
    device = seed.seed_device(db, hostname='host-a', handles=1)
    _mark(db, device)
    uuid, = _create(db, ctx, [dict(FPGA, **{'accel:bitstream_id': 'b1'})])
    with pytest.raises(exception.BindFailed) as e:
        arq_binding.start_bind(aconf, ctx, {uuid: _binding(
            device, str(uuidlib.uuid4()))})
    assert e.value.code == 400
    assert str(e.value) == (
        f'Binding failed: deployable {device.deployable_uuid} is being '
        f'programmed (until 2100-01-01 00:00:00 UTC)')
    assert _untouched(seed.arq_rows(db)[uuid])
    assert seed.handles_in_use(db) == 0


def test_a_bind_that_programs_waits_for_this_conductor_s_programming(
        gconf, db, ctx, fake_nova):
    """A programming of the same deployable running in this conductor:
    the bind's programming waits for it (then reads the card again), so
    the PATCH is answered."""
    device = seed.seed_device(db, hostname='host-a', handles=1)
    uuid, = _create(db, ctx, [dict(FPGA, **{'accel:function_id': 'f1'})])
    instance = str(uuidlib.uuid4())
    with programming._deployable_lock(device.deployable_id):
        _mark(db, device)
        # Answered (refused, it raised BindFailed here).
        future = arq_binding.start_bind(gconf, ctx, {uuid: _binding(
            device, instance)})
        with db.begin() as c:
            c.execute(sa.update(models.Deployable).where(
                models.Deployable.id == device.deployable_id).values(
                programming_until=None))
    future.result(30)
    # Glance has no image for the function: failed after the answer, and
    # Nova is told.
    row = seed.arq_rows(db)[uuid]
    assert row.state == 'BindFailed'
    assert ('0 images in Glance have function id f1'
            in row.bind_failure_reason)
    assert seed.handles_in_use(db) == 0
    event, = fake_nova.wait_for_events(1)
    assert (event['tag'], event['status'], event['server_uuid']) == (
        uuid, 'failed', instance)


# -- a card another instance uses (SQLite, MariaDB, PostgreSQL) --------------

engine = tor.engine

# The image a card runs, and another.
RUNS = '0b6f4c4e-2d7e-4f0c-9d55-3a1f6c0a8e11'
OTHER = '7c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f'


@pytest.fixture
def econf(conf, engine, placement_url, fake_nova, glance):
    """The conductor's configuration on ``engine``: the module's
    Placement, recording Nova and recording Glance."""
    placement_fixture.placement_conf(conf, placement_url)
    for group, url in (('nova', fake_nova.url), ('glance', glance.url)):
        conf.set_override('auth_type', 'none', group=group)
        conf.set_override('endpoint_override', url, group=group)
    placement_client.reset_clients()
    return conf


def _card(engine, bitstream_id=None, trait=None, handles=2):
    """A card running ``bitstream_id``, with the function trait
    ``trait`` recorded with it (as a programming leaves it)."""
    device = seed.seed_device(engine, hostname='host-a', handles=handles,
                              bitstream_id=bitstream_id)
    if trait:
        with engine.begin() as c:
            c.execute(sa.insert(models.Attribute).values(
                uuid=str(uuidlib.uuid4()), deployable_id=device.deployable_id,
                key=programming.TRAIT_ATTRIBUTE, value=trait))
    return device


def _used_by_another_instance(conf, engine, ctx, fake_nova, device):
    """Another instance's ARQ bound to the card (its Nova event sent)."""
    other, = _create(engine, ctx)
    arq_binding.start_bind(conf, ctx, {other: _binding(
        device, str(uuidlib.uuid4()))}).result(30)
    fake_nova.wait_for_events(1)


@pytest.mark.parametrize('runs, trait, group', [
    (RUNS, None, {'accel:bitstream_id': OTHER}),
    (RUNS, 'CUSTOM_FPGA_FUNCTION_ID_F_OLD', {'accel:function_id': 'f-new'}),
    (None, None, {'accel:function_id': 'f-new'}),
], ids=['another image', 'another function', 'no image'])
def test_a_bind_that_would_reprogram_a_card_in_use_is_refused(
        econf, engine, ctx, fake_nova, runs, trait, group):
    """Another instance uses the card, and the bind surely loads another
    image than the one it runs: its programming would be refused (another
    instance uses it with its current bitstream), which Glance need not
    be asked to tell.  The PATCH is refused, nothing written (it was
    answered 202 and ended BindFailed before Nova's first read)."""
    device = _card(engine, runs, trait)
    _used_by_another_instance(econf, engine, ctx, fake_nova, device)
    uuid, = _create(engine, ctx, [dict(FPGA, **group)])
    with pytest.raises(exception.BindFailed) as e:
        arq_binding.start_bind(econf, ctx, {uuid: _binding(
            device, str(uuidlib.uuid4()))})
    assert e.value.code == 400
    assert str(e.value) == (
        f'Binding failed: Deployable {device.deployable_uuid} is in use: '
        f'another instance uses it with its current bitstream')
    assert _untouched(seed.arq_rows(engine)[uuid])
    assert seed.handles_in_use(engine) == 1
    assert _events_recorded(engine, [uuid]) == 0


@pytest.mark.parametrize('case', [
    'the image it runs', 'the function it runs',
    'its image, no trait recorded'])
def test_a_bind_on_a_card_in_use_only_glance_can_tell_about_is_answered(
        econf, engine, ctx, fake_nova, glance, case):
    """Where the image the bind loads may be the one the card runs, only
    Glance can tell: the PATCH is answered and the programming decides
    (here the image is loaded already: the ARQ ends Bound).  A card's
    image a report recorded (after a programming whose outcome was not
    known) has no function trait recorded with it."""
    image = glance.add_image(b'bitstream' * 10, {'accel:function_id': 'f1'})
    group = {'accel:function_id': 'f1'}
    trait = 'CUSTOM_FPGA_FUNCTION_ID_F1'
    if case == 'the image it runs':
        group = {'accel:bitstream_id': image}
    elif case == 'its image, no trait recorded':
        trait = None
    device = _card(engine, image, trait)
    _used_by_another_instance(econf, engine, ctx, fake_nova, device)
    uuid, = _create(engine, ctx, [dict(FPGA, **group)])
    arq_binding.start_bind(econf, ctx, {uuid: _binding(
        device, str(uuidlib.uuid4()))}).result(30)
    row = seed.arq_rows(engine)[uuid]
    assert row.state == 'Bound', row.bind_failure_reason
    assert glance.downloads() == []


def test_a_bind_s_own_handle_is_not_another_instance_s(econf, engine, ctx):
    """The handle the bind just took is its own: on a card nobody else
    uses, a bind that reprograms it is answered, and its programming
    goes on (here Glance has no image for the function: it fails after
    the answer, as before)."""
    device = _card(engine)
    uuid, = _create(engine, ctx, [dict(FPGA, **{
        'accel:function_id': 'f-none'})])
    arq_binding.start_bind(econf, ctx, {uuid: _binding(
        device, str(uuidlib.uuid4()))}).result(30)
    row = seed.arq_rows(engine)[uuid]
    assert row.state == 'BindFailed'
    assert '0 images in Glance have function id f-none' in (
        row.bind_failure_reason)


# SQLite serialises writers: nothing commits meanwhile.
@pytest.mark.parametrize('engine', ['mysql', 'postgresql'], indirect=True)
def test_a_mark_committed_after_the_bind_began_reading_is_seen(
        econf, engine, ctx, monkeypatch):
    """A programming's mark committed while a bind that programs the card
    is under way, before it reads the card: MariaDB's REPEATABLE READ
    read the card as of the transaction's first read (its targets), and
    the bind, missing the mark, was answered 202 and failed once its
    programming found it.  The card is read with a share lock: as last
    committed (PostgreSQL reads each statement anew)."""
    device = _card(engine, RUNS, handles=1)
    uuid, = _create(engine, ctx, [dict(FPGA, **{
        'accel:bitstream_id': OTHER})])
    bind_targets = deployable_db.bind_targets

    def marked_meanwhile(context, rp_uuids):
        found = bind_targets(context, rp_uuids)
        _mark(engine, device)       # committed by another transaction
        return found

    monkeypatch.setattr(deployable_db, 'bind_targets', marked_meanwhile)
    with pytest.raises(exception.BindFailed) as e:
        arq_binding.start_bind(econf, ctx, {uuid: _binding(
            device, str(uuidlib.uuid4()))})
    assert e.value.code == 400
    assert str(e.value) == (
        f'Binding failed: deployable {device.deployable_uuid} is being '
        f'programmed (until 2100-01-01 00:00:00 UTC)')
    assert _untouched(seed.arq_rows(engine)[uuid])
    assert seed.handles_in_use(engine) == 0


# -- ARQs the instance holds on another host ----------------------------------

def _hold(db, uuid, state):
    """Leave a bound ARQ in ``state``, as a bind in progress, an unbind
    that failed, or a bind that failed (its handle freed) would."""
    values = {'state': state}
    row = seed.arq_rows(db)[uuid]
    with db.begin() as c:
        if state == 'BindFailed':
            values.update(attach_handle_id=None,
                          bind_failure_reason='earlier failure')
            c.execute(sa.update(models.AttachHandle).where(
                models.AttachHandle.id == row.attach_handle_id).values(
                in_use=False))
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == uuid).values(**values))


@pytest.mark.parametrize('state, refused', [
    ('Bound', True), ('BindStarted', True), ('UnbindFailed', True),
    ('BindFailed', False)])
def test_arqs_held_on_another_host_refuse_the_bind(aconf, db, ctx, state,
                                                   refused):
    """Nova rescheduled a build whose claim failed on host-a without
    deleting its ARQ there, and binds a new one on host-b."""
    a = seed.seed_device(db, hostname='host-a', handles=1)
    b = seed.seed_device(db, hostname='host-b', handles=1)
    instance = str(uuidlib.uuid4())
    earlier, = _create(db, ctx)
    arq_binding.start_bind(aconf, ctx, {earlier: _binding(
        a, instance)}).result(30)
    _hold(db, earlier, state)
    new, = _create(db, ctx)
    if not refused:
        arq_binding.start_bind(aconf, ctx, {new: _binding(
            b, instance)}).result(30)
        assert seed.arq_rows(db)[new].state == 'Bound'
        return
    with pytest.raises(exception.BindFailed) as e:
        arq_binding.start_bind(aconf, ctx, {new: _binding(b, instance)})
    assert e.value.code == 400
    assert str(e.value) == (
        f'Binding failed: instance {instance} already holds accelerator '
        f'requests bound on host host-a ({earlier} {state}): they must be '
        f'deleted before accelerator requests are bound for it on host '
        f'host-b')
    rows = seed.arq_rows(db)
    assert _untouched(rows[new])
    assert rows[earlier].state == state
    assert seed.handles_in_use(db) == 1
    assert _events_recorded(db, [new]) == 0


def test_arqs_held_on_the_same_host_are_allowed(aconf, db, ctx):
    """Nova binds a port's device profile after the instance's own, on
    the same host; Nova's name for it (the compute node's) and the
    agent's are the same host."""
    device = seed.seed_device(db, hostname='host-a', handles=3)
    node = 'host-a.cloud.example.org'
    with db.begin() as c:
        c.execute(sa.insert(models.Host).values(
            hostname='host-a', compute_node_name=node,
            placement_synced=True))
    instance = str(uuidlib.uuid4())
    own, port, late = _create(db, ctx, [{'resources:FPGA': '3'}])
    arq_binding.start_bind(aconf, ctx, {own: _binding(
        device, instance, node)}).result(30)
    arq_binding.start_bind(aconf, ctx, {port: _binding(
        device, instance, node)}).result(30)
    arq_binding.start_bind(aconf, ctx, {late: _binding(
        device, instance)}).result(30)
    assert {r.state for r in seed.arq_rows(db).values()} == {'Bound'}


def test_an_evacuation_binds_on_the_destination(aconf, db, ctx):
    """Nova's evacuation deletes the instance's ARQs, then binds new ones
    on the destination."""
    source = seed.seed_device(db, hostname='host-a', handles=1)
    destination = seed.seed_device(db, hostname='host-b', handles=1)
    instance = str(uuidlib.uuid4())
    first, = _create(db, ctx)
    arq_binding.start_bind(aconf, ctx, {first: _binding(
        source, instance)}).result(30)
    assert arq_binding.delete(aconf, ctx, instance_uuid=instance) == []
    second, = _create(db, ctx)
    arq_binding.start_bind(aconf, ctx, {second: _binding(
        destination, instance)}).result(30)
    assert seed.arq_rows(db)[second].state == 'Bound'


# -- through the API, as Nova calls it ----------------------------------------

NOVA = {'X-Project-Id': 'tenant-a', 'X-User-Id': 'nova-user',
        'X-Roles': 'member,reader', 'X-Service-Token': 'nova-service-token',
        'Content-Type': 'application/json'}
ADMIN = {'X-Project-Id': 'admin', 'X-User-Id': 'admin',
         'X-Roles': 'admin,member,reader', 'Content-Type': 'application/json'}
PLACEMENT = {'x-auth-token': embedded.NOAUTH_TOKEN,
             'OpenStack-API-Version': 'placement 1.39'}


def _call(app, method, path, body=None, headers=NOVA):
    req = webob.Request.blank('/v2' + path, method=method)
    req.headers.update(headers)
    if body is not None:
        req.body = json.dumps(body).encode()
    resp = req.get_response(app)
    return resp.status_int, (resp.json if resp.body else None)


def _fault(body):
    return json.loads(body['error_message'])['faultstring']


def _placement(url, method, path, body=None):
    response = requests.request(method, url + path, json=body,
                                headers=PLACEMENT, timeout=10)
    assert response.status_code in (200, 204), response.text
    return response.json() if response.content else None


def _provider(url, device, total):
    _placement(url, 'POST', '/resource_providers',
               {'name': device.name, 'uuid': device.rp_uuid})
    _placement(url, 'PUT', f'/resource_providers/{device.rp_uuid}/'
                           f'inventories',
               {'resource_provider_generation': 0,
                'inventories': {'FPGA': {'total': total}}})


def _allocate(url, instance, allocations):
    """What Nova's scheduler claims for ``instance`` ({provider: FPGAs}),
    moved from wherever it was."""
    current = _placement(url, 'GET', f'/allocations/{instance}')
    _placement(url, 'PUT', f'/allocations/{instance}', {
        'allocations': {rp: {'resources': {'FPGA': count}}
                        for rp, count in allocations.items()},
        'project_id': 'tenant-a', 'user_id': 'nova-user',
        'consumer_generation': current.get('consumer_generation'),
        'consumer_type': 'INSTANCE'})


def _new_arq(app, profile='dp1'):
    status, body = _call(app, 'POST', '/accelerator_requests',
                         {'device_profile_name': profile})
    assert status == 201, body
    return body['arqs'][0]['uuid']


def _nova_bind(app, arq, hostname, rp_uuid, instance):
    """nova/accelerator/cyborg.py bind_arqs, for one ARQ."""
    return _call(app, 'PATCH', '/accelerator_requests', {arq: [
        {'path': '/hostname', 'op': 'add', 'value': hostname},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]})


def _nova_accel_info(app, instance, bound):
    """nova/compute/manager.py _get_bound_arq_resources, once the bind
    answered 2xx: the ARQs its virt driver is given."""
    status, body = _call(app, 'GET', '/accelerator_requests?instance=' +
                         instance + '&bind_state=resolved')
    assert status == 200, body
    resolved = body['arqs']
    if sorted(a['uuid'] for a in resolved) != sorted(bound):
        status, body = _call(app, 'GET',
                             '/accelerator_requests?instance=' + instance)
        return body['arqs']
    return resolved


def _pci_attached(accel_info):
    """(host, PCI address) of what libvirt is given as hostdevs."""
    return sorted((a['hostname'], a['attach_handle_info']['device'])
                  for a in accel_info if a['attach_handle_type'] == 'PCI')


@pytest.fixture
def nova_api(placement_url, fake_nova):
    with api_fixture.api_service({
            ('placement', 'auth_type'): 'none',
            ('placement', 'endpoint_override'): placement_url,
            ('nova', 'auth_type'): 'none',
            ('nova', 'endpoint_override'): fake_nova.url}) as service:
        status, body = _call(service.app, 'POST', '/device_profiles',
                             [{'name': 'dp1', 'groups': [FPGA]}],
                             headers=ADMIN)
        assert status == 201, body
        yield service


def test_nova_s_bind_with_no_free_handle_is_400(nova_api, placement_url,
                                                fake_nova):
    """The only handle is held by an ARQ Nova deleted while cyborg was
    unreachable (its allocation gone); Placement puts the next instance
    there.  Its bind is refused with nothing written: Nova ends the build
    (and deletes the ARQ) instead of booting it without its device."""
    app, engine = nova_api.app, nova_api.engine
    device = seed.seed_device(engine, hostname='cmp-a', handles=1)
    _provider(placement_url, device, 1)
    gone = str(uuidlib.uuid4())
    _allocate(placement_url, gone, {device.rp_uuid: 1})
    leaked = _new_arq(app)
    assert _nova_bind(app, leaked, 'cmp-a', device.rp_uuid, gone)[0] == 202
    _allocate(placement_url, gone, {})
    fake_nova.wait_for_events(1)

    instance = str(uuidlib.uuid4())
    _allocate(placement_url, instance, {device.rp_uuid: 1})
    arq = _new_arq(app)
    status, body = _nova_bind(app, arq, 'cmp-a', device.rp_uuid, instance)
    assert status == 400, body
    assert _fault(body) == (f'Binding failed: no free attach handle on '
                            f'resource provider {device.rp_uuid}')
    status, body = _call(app, 'GET', '/accelerator_requests/' + arq)
    assert (body['state'], body['hostname'], body['instance_uuid'],
            body['attach_handle_type']) == ('Initial', None, None, '')
    assert _call(app, 'GET', '/accelerator_requests?instance=' +
                 instance)[1]['arqs'] == []
    assert seed.handles_in_use(engine) == 1
    assert _events_recorded(engine, [arq]) == 0
    assert [e['tag'] for e in fake_nova.events] == [leaked]


def test_nova_s_programming_bind_with_no_free_handle_is_400(
        nova_api, placement_url):
    """A bind whose profile programs the card, on a card with no free
    handle: refused as any bind is, nothing written (it was answered 202
    and resolved BindFailed before Nova's compute read it)."""
    app, engine = nova_api.app, nova_api.engine
    status, body = _call(app, 'POST', '/device_profiles', [{
        'name': 'dp-fn', 'groups': [dict(FPGA, **{
            'accel:function_id': 'f1'})]}], headers=ADMIN)
    assert status == 201, body
    device = seed.seed_device(engine, hostname='cmp-a', handles=0)
    _provider(placement_url, device, 1)
    instance = str(uuidlib.uuid4())
    _allocate(placement_url, instance, {device.rp_uuid: 1})
    arq = _new_arq(app, 'dp-fn')
    status, body = _nova_bind(app, arq, 'cmp-a', device.rp_uuid, instance)
    assert status == 400, body
    assert _fault(body) == (f'Binding failed: no free attach handle on '
                            f'resource provider {device.rp_uuid}')
    status, body = _call(app, 'GET', '/accelerator_requests/' + arq)
    assert (body['state'], body['instance_uuid']) == ('Initial', None)
    assert _events_recorded(engine, [arq]) == 0


def test_nova_s_rebind_after_a_reschedule_is_400_naming_the_first_host(
        nova_api, placement_url):
    """The build's claim failed on cmp-a after its ARQ was bound there;
    Nova reschedules to cmp-b with a new ARQ, the first one left Bound.
    Refused: accepted, cmp-b's compute attached cmp-a's PCI address too.
    Once Nova deleted the instance's ARQs, a bind on cmp-b (a new build,
    and a port's device profile after it on the same host) goes through
    and attaches cmp-b's devices only."""
    app, engine = nova_api.app, nova_api.engine
    a = seed.seed_device(engine, hostname='cmp-a', handles=1)
    b = seed.seed_device(engine, hostname='cmp-b', handles=2)
    _provider(placement_url, a, 1)
    _provider(placement_url, b, 2)
    instance = str(uuidlib.uuid4())
    _allocate(placement_url, instance, {a.rp_uuid: 1})
    first = _new_arq(app)
    assert _nova_bind(app, first, 'cmp-a', a.rp_uuid, instance)[0] == 202

    _allocate(placement_url, instance, {b.rp_uuid: 1})
    second = _new_arq(app)
    status, body = _nova_bind(app, second, 'cmp-b', b.rp_uuid, instance)
    assert status == 400, body
    assert _fault(body) == (
        f'Binding failed: instance {instance} already holds accelerator '
        f'requests bound on host cmp-a ({first} Bound): they must be '
        f'deleted before accelerator requests are bound for it on host '
        f'cmp-b')
    status, body = _call(app, 'GET', '/accelerator_requests/' + second)
    assert (body['state'], body['instance_uuid']) == ('Initial', None)
    assert _events_recorded(engine, [second]) == 0
    assert seed.handles_in_use(engine) == 1

    # Nova's build failed: it deletes the instance's ARQs.
    assert _call(app, 'DELETE', '/accelerator_requests?instance=' +
                 instance)[0] == 204
    assert seed.handles_in_use(engine) == 0
    assert _nova_bind(app, second, 'cmp-b', b.rp_uuid, instance)[0] == 202
    assert _pci_attached(_nova_accel_info(app, instance, [second])) == [
        ('cmp-b', '00')]
    _allocate(placement_url, instance, {b.rp_uuid: 2})
    port = _new_arq(app)
    assert _nova_bind(app, port, 'cmp-b', b.rp_uuid, instance)[0] == 202
    assert _pci_attached(_nova_accel_info(app, instance, [port])) == [
        ('cmp-b', '00'), ('cmp-b', '01')]
