"""FPGA programming at bind and by an admin: a recording Glance, the real
(embedded) Placement, and a real agent endpoint with the fake driver over
an in-process (fake://) transport."""

import datetime
import threading
import time
import uuid as uuidlib

import oslo_messaging as messaging
import pytest
import requests
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.agent import reporter as agent_reporter
from cyborg.api import faults
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.conductor import arq_binding, manager, periodics
from cyborg.conductor import placement_sync
from cyborg.conductor import programming
from cyborg.conductor import glance as glance_client
from cyborg.db import api as db_api
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import inventory as inventory_db
from cyborg.db import models
from cyborg.drivers import fake
from cyborg.objects import deployables
from cyborg.objects.health import PROBE_NOT_YET
from cyborg.placement import client as placement_client
from cyborg.placement import provider_tree
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http

HOST = 'fpga-host'
OLD_TRAIT = 'CUSTOM_FPGA_FUNCTION_ID_OLD'
FAKE_TRAIT = 'CUSTOM_FAKE_DEVICE'

# The real Placement, shared by this module's tests.
placement_url = seed.placement_url


glance = recording_http.fake_glance


def programming_conf(conf, placement_url, glance, tmp_path):
    """``conf`` for programmings: the module's Placement and fake Glance,
    bitstreams under ``tmp_path``."""
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('auth_type', 'none', group='glance')
    conf.set_override('endpoint_override', glance.url, group='glance')
    conf.set_override('state_path', str(tmp_path))
    placement_client.reset_clients()
    return conf


@pytest.fixture
def pconf(conf, db, placement_url, glance, tmp_path):
    return programming_conf(conf, placement_url, glance, tmp_path)


@pytest.fixture
def agent(pconf):
    """The agent's RPC endpoint with the fake driver, in this process."""
    driver = fake.FakeDriver(pconf, HOST)
    with seed.agent_endpoint(pconf, HOST, {'fake_driver': driver}):
        yield driver


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


@pytest.fixture
def device(pconf, db):
    return _reported(pconf, db, handles=4,
                     traits={'trait_fake': FAKE_TRAIT,
                             programming.TRAIT_ATTRIBUTE: OLD_TRAIT})


def _reported(conf, db, handles, traits=None, cpid_info=None,
              bitstream_id=None):
    """A device of HOST as its reports leave it, so that every Placement
    sync (the reconcile, a health or status change, the end of a
    programming) computes its provider from the database: a host row, the
    deployable's resource class and ``traits`` ({attribute: trait}) as
    attributes, its provider made by a sync under the host's compute node
    provider (the shared one, made by the first test that needs it)."""
    device = seed.seed_device(db, hostname=HOST, handles=handles,
                              bitstream_id=bitstream_id)
    with db.begin() as c:
        if not c.execute(sa.select(models.Host.hostname)).first():
            c.execute(sa.insert(models.Host).values(hostname=HOST))
        if cpid_info:
            c.execute(sa.update(models.ControlpathID)
                      .where(models.ControlpathID.device_id ==
                             device.device_id)
                      .values(cpid_info=cpid_info))
        for key, value in {'rc': 'FPGA', **(traits or {})}.items():
            c.execute(sa.insert(models.Attribute).values(
                uuid=str(uuidlib.uuid4()), key=key, value=value,
                deployable_id=device.deployable_id))
    client = placement_client.get_client(conf)
    if client.get_provider_by_name(HOST) is None:
        client.create_provider(str(uuidlib.uuid4()), HOST, None)
    placement_sync.sync_host(conf, cyborg_context.get_admin_context(), HOST)
    return device


def _provider(conf, rp_uuid):
    """(reserved, traits but OWNER_CYBORG) of the provider."""
    client = placement_client.get_client(conf)
    _, inventories = client.get_inventories(rp_uuid)
    return (inventories['FPGA']['reserved'],
            client.get_traits(rp_uuid)[1] - {provider_tree.OWNER_TRAIT})


def _bind(conf, ctx, db, device, group):
    profile = seed.seed_profile(db, [dict(group, **{'resources:FPGA':
                                                    '1'})])
    uuid = arq_binding.create(ctx, profile, 'p1')[0]['uuid']
    arq_binding.start_bind(conf, ctx, {uuid: {
        'hostname': device.hostname, 'device_rp_uuid': device.rp_uuid,
        'instance_uuid': str(uuidlib.uuid4())}}).result(60)
    return seed.arq_rows(db)[uuid]


def _loaded(driver):
    """The image the fake FPGA runs, as its next report would say."""
    return driver.discover()[0].deployables[0].bitstream_id


def _bitstream(ctx, device):
    return deployable_db.program_target_by_id(
        ctx, device.deployable_id).bitstream_id


def test_function_id_programs_at_bind_and_replaces_traits(
        pconf, ctx, db, agent, device, glance):
    image = glance.add_image(b'\x00bitstream' * 1000,
                             {'accel:function_id': 'f-new.1'})
    row = _bind(pconf, ctx, db, device, {'accel:function_id': 'f-new.1'})
    assert row.state == 'Bound', row.bind_failure_reason
    assert _loaded(agent) == image
    assert _bitstream(ctx, device) == image
    assert _provider(pconf, device.rp_uuid) == (
        0, {FAKE_TRAIT, 'CUSTOM_FPGA_FUNCTION_ID_F_NEW_1'})
    # Kept as a trait attribute, so the report sync advertises it too.
    with db.connect() as c:
        assert c.execute(sa.select(models.Attribute.value).where(
            models.Attribute.deployable_id == device.deployable_id,
            models.Attribute.key == programming.TRAIT_ATTRIBUTE)).all() \
            == [('CUSTOM_FPGA_FUNCTION_ID_F_NEW_1',)]
    row, = [r for r in inventory_db.host_providers(ctx, HOST)
            if r['uuid'] == device.deployable_uuid]
    desired = provider_tree.provider_for(row, row['attributes'], 'enabled',
                                         None)
    assert 'CUSTOM_FPGA_FUNCTION_ID_F_NEW_1' in desired.traits


def test_bitstream_id_already_loaded_is_not_downloaded(
        pconf, ctx, db, agent, device, glance):
    image = glance.add_image(b'abc' * 100, {'accel:function_id': 'f2'})
    assert _bind(pconf, ctx, db, device,
                 {'accel:bitstream_id': image}).state == 'Bound'
    assert _bind(pconf, ctx, db, device,
                 {'accel:bitstream_id': image}).state == 'Bound'
    assert len(glance.downloads()) == 1
    assert _provider(pconf, device.rp_uuid)[1] == {
        FAKE_TRAIT, 'CUSTOM_FPGA_FUNCTION_ID_F2'}


def test_corrupt_image_fails_the_bind_and_changes_nothing(
        pconf, ctx, db, agent, device, glance):
    image = glance.add_image(b'payload' * 50, corrupt=True)
    row = _bind(pconf, ctx, db, device, {'accel:bitstream_id': image})
    assert row.state == 'BindFailed'
    assert 'sha512 check' in row.bind_failure_reason
    assert row.attach_handle_id is None
    assert seed.handles_in_use(db) == 0
    assert _loaded(agent) is None
    assert _bitstream(ctx, device) is None
    assert _provider(pconf, device.rp_uuid) == (
        0, {FAKE_TRAIT, OLD_TRAIT})


def _device_the_agent_cannot_find(conf, db):
    """A device at an address the fake driver does not know (it knows
    only its own control path): programming it fails on the agent."""
    return _reported(conf, db, handles=1, cpid_info='0000:99:00.0',
                     traits={programming.TRAIT_ATTRIBUTE: OLD_TRAIT})


def test_agent_failure_rolls_back_reservation_and_traits(
        pconf, ctx, db, agent, glance):
    device = _device_the_agent_cannot_find(pconf, db)
    image = glance.add_image(b'data' * 10, {'accel:function_id': 'f3'})
    row = _bind(pconf, ctx, db, device, {'accel:function_id': 'f3'})
    assert row.state == 'BindFailed'
    assert '0000:99:00.0' in row.bind_failure_reason
    assert _bitstream(ctx, device) is None
    assert image in glance.data
    assert _provider(pconf, device.rp_uuid) == (0, {OLD_TRAIT})


def test_missing_image_fails_the_bind(pconf, ctx, db, agent, device):
    row = _bind(pconf, ctx, db, device, {'accel:function_id': 'nope'})
    assert row.state == 'BindFailed'
    assert '0 images in Glance have function id nope' in (
        row.bind_failure_reason)


def test_a_download_glance_stops_sending_is_glance_unavailable(pconf,
                                                               glance):
    """Glance sends part of the bitstream, then nothing: the download
    gives up after [glance]timeout without a read (503 for an admin's
    program; a bind fails), instead of holding its thread forever."""
    pconf.set_override('timeout', 0.5, group='glance')
    image = glance_client.get_image(
        pconf, glance.add_image(b'bitstream' * 10000), 'p1')
    glance.stall_after = 1000
    started = time.monotonic()
    try:
        with pytest.raises(exception.ServiceUnavailable,
                           match='Glance: downloading image'):
            glance_client.download(pconf, image)
    finally:
        glance.release()
    assert time.monotonic() - started < 10


def test_admin_program_is_idempotent(pconf, ctx, db, agent, device, glance):
    image = glance.add_image(b'admin' * 64, {'accel:function_id': 'fa'})
    result = programming.program_deployable(pconf, ctx,
                                            device.deployable_uuid, image)
    assert result['bitstream_id'] == image
    assert result['uuid'] == device.deployable_uuid
    again = programming.program_deployable(pconf, ctx,
                                           device.deployable_uuid, image)
    assert again['bitstream_id'] == image
    assert len(glance.downloads()) == 1
    assert _provider(pconf, device.rp_uuid) == (
        0, {FAKE_TRAIT, 'CUSTOM_FPGA_FUNCTION_ID_FA'})


def _programmings(outcome):
    """(count, seconds observed) of programmings that ended so."""
    labels = {'outcome': outcome}
    return tuple(metrics.REGISTRY.get_sample_value(name, labels) or 0
                 for name in ('cyborg_conductor_programmings_total',
                              'cyborg_conductor_programming_seconds_count'))


def test_programmings_are_counted_and_timed_by_outcome(
        pconf, ctx, db, agent, device, glance):
    """Operators alert on programmings that failed, and above all on
    those whose outcome is unknown (the card was taken out)."""
    before = {o: _programmings(o)
              for o in ('programmed', 'failed', 'outcome_unknown')}
    programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                   glance.add_image(b'counted' * 10))
    refused = _device_the_agent_cannot_find(pconf, db)
    with pytest.raises(messaging.ExpectedException):
        manager.ConductorManager(pconf, 'c1').deployable_program(
            ctx, refused.deployable_uuid, glance.add_image(b'no' * 10))
    assert {o: tuple(a - b for a, b in zip(_programmings(o), before[o]))
            for o in before} == {'programmed': (1, 1), 'failed': (1, 1),
                                 'outcome_unknown': (0, 0)}


def test_admin_program_refuses_a_device_in_use(pconf, ctx, db, agent,
                                               device, glance):
    first = glance.add_image(b'one' * 10)
    assert _bind(pconf, ctx, db, device,
                 {'accel:bitstream_id': first}).state == 'Bound'
    second = glance.add_image(b'two' * 10)
    with pytest.raises(exception.InUse):
        programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                       second)
    assert _bitstream(ctx, device) == first


def test_admin_program_refuses_a_card_another_vf_of_it_holds(
        pconf, ctx, db, agent, device, glance):
    """A card with VFs is programmed whole (through its PF), whichever VF
    asks: an instance holding a handle of another of the card's
    deployables (another VF) makes it in use.  Only the asking
    deployable's handles were counted: the card was rewritten under that
    instance."""
    with db.begin() as c:
        cpid_id = c.execute(sa.select(models.ControlpathID.id).where(
            models.ControlpathID.device_id == device.device_id)).scalar()
        other = c.execute(sa.insert(models.Deployable).values(
            uuid=str(uuidlib.uuid4()), name=f'{HOST}_vf1',
            num_accelerators=1, device_id=device.device_id,
            driver_name='fake_driver', rp_uuid=str(uuidlib.uuid4()))
        ).inserted_primary_key[0]
        c.execute(sa.insert(models.AttachHandle).values(
            uuid=str(uuidlib.uuid4()), deployable_id=other, cpid_id=cpid_id,
            in_use=True, attach_type='PCI', attach_info='{}'))
    image = glance.add_image(b'other vf' * 10)
    with pytest.raises(exception.InUse):
        programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                       image)
    assert _bitstream(ctx, device) is None


def test_admin_program_the_agent_refuses_is_a_409_saying_why(
        pconf, ctx, db, agent, glance, caplog):
    """The agent's refusal (here: the card is not at that address; also a
    card already being programmed, or the vendor tool failing) answers
    409 with the agent's reason, not a 500; the agent's RPC server logs no
    traceback for a refusal."""
    device = _device_the_agent_cannot_find(pconf, db)
    image = glance.add_image(b'refused' * 10)
    endpoint = manager.ConductorManager(pconf, 'c1')
    with pytest.raises(messaging.ExpectedException) as caught:
        endpoint.deployable_program(ctx, device.deployable_uuid, image)
    error = caught.value.exc_info[1]
    assert isinstance(error, exception.Conflict)
    assert str(error).startswith(
        f'Conflict: the agent on {HOST} could not program 0000:99:00.0: ')
    assert 'Traceback' not in str(error)
    assert _bitstream(ctx, device) is None
    assert _provider(pconf, device.rp_uuid) == (0, {OLD_TRAIT})
    assert not [r for r in caplog.records
                if 'Exception during message handling' in r.getMessage()]


def test_admin_program_unknown_image_or_deployable(pconf, ctx, db, agent,
                                                   device):
    with pytest.raises(exception.Invalid, match='not found in Glance'):
        programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                       str(uuidlib.uuid4()))
    with pytest.raises(exception.NotFound):
        programming.program_deployable(pconf, ctx, str(uuidlib.uuid4()),
                                       str(uuidlib.uuid4()))


def _program_while(conf, ctx, device, glance, meanwhile):
    """Program the device with a new image, the agent's driver calling
    ``meanwhile()`` before it writes the card; returns the image."""

    class Driver(fake.FakeDriver):
        def program(self, controlpath_id, image_path, image_uuid):
            meanwhile()
            super().program(controlpath_id, image_path, image_uuid)

    with seed.agent_endpoint(conf, HOST, {'fake_driver': Driver(conf,
                                                                HOST)}):
        image = glance.add_image(b'meanwhile' * 10)
        target = deployable_db.program_target(ctx, device.deployable_uuid)
        assert programming.program(
            conf, ctx, target, {'id': image, **glance.images[image]},
            timeutils.utcnow() + datetime.timedelta(minutes=1),
            own_handles=0)
    return image


def test_provider_is_reserved_while_programming(pconf, ctx, db, device,
                                                glance):
    """What Placement says while the agent programs: reserved = total."""
    seen = []
    image = _program_while(pconf, ctx, device, glance, lambda: seen.append(
        _provider(pconf, device.rp_uuid)[0]))
    assert seen == [4]
    assert _provider(pconf, device.rp_uuid)[0] == 0
    assert requests.get(glance.url + '/v2/images/' + image).ok


def _device_health(db, device):
    with db.connect() as c:
        return c.execute(sa.select(models.Device.health).where(
            models.Device.id == device.device_id)).scalar()


def _health(db, device):
    with db.connect() as c:
        return tuple(c.execute(
            sa.select(models.Deployable.health,
                      models.Deployable.health_reason)
            .where(models.Deployable.id == device.deployable_id)).one())


def test_the_reconcile_keeps_a_card_being_programmed_reserved(
        pconf, ctx, db, device, glance):
    """The reservation while a card is rewritten is in the database too:
    a Placement sync meanwhile (the periodic reconcile, a health change of
    the host) used to put reserved back to 0 mid-write."""
    during = []

    def sync():
        placement_sync.sync_host(pconf, ctx, HOST, trust_memory=False)
        during.append(_provider(pconf, device.rp_uuid)[0])

    _program_while(pconf, ctx, device, glance, sync)
    assert during == [4]
    placement_sync.sync_host(pconf, ctx, HOST, trust_memory=False)
    assert _provider(pconf, device.rp_uuid)[0] == 0


@pytest.mark.parametrize('meanwhile', ['maintenance', 'fatal fault'])
def test_a_card_that_went_out_while_programmed_stays_out_after(
        pconf, ctx, db, device, glance, meanwhile):
    """What the card became while it was programmed decides its
    reservation after: an admin's maintenance or a fault kept it out (it
    was put back to the reservation seen before the programming, 0)."""
    from cyborg.conductor import device_status
    from cyborg.conductor import health

    def go_out():
        if meanwhile == 'maintenance':
            device_status.set_status(pconf, ctx, device.device_uuid,
                                     'maintaining')
        else:
            health.handle_report(pconf, ctx, HOST, {
                'full': False, 'readings': [{
                    'device': 'PCI:0000:0c:00.0', 'severity': 'fatal',
                    'source': 'fake', 'reason': 'fell over'}]})

    _program_while(pconf, ctx, device, glance, go_out)
    assert _provider(pconf, device.rp_uuid)[0] == 4


def test_placement_away_at_the_end_leaves_the_host_to_the_reconcile(
        pconf, ctx, db, device, glance, placement_url):
    """The sync at the end of a programming fails (Placement away): the
    card stays reserved, and the host is no longer taken as synced, so
    any conductor's reconcile compares its providers and repairs it."""
    from cyborg.db.api import hosts as host_db

    db_api.write_retrying(ctx, host_db.update, ctx, HOST,
                          placement_synced=True)

    def placement_goes_away():
        placement_fixture.placement_conf(pconf, 'http://127.0.0.1:9')
        placement_client.reset_clients()

    _program_while(pconf, ctx, device, glance, placement_goes_away)
    assert host_db.get(ctx, HOST)['placement_synced'] is False
    placement_fixture.placement_conf(pconf, placement_url)
    placement_client.reset_clients()
    assert _provider(pconf, device.rp_uuid)[0] == 4
    placement_sync.reconcile_all(pconf, ctx)
    assert _provider(pconf, device.rp_uuid)[0] == 0
    assert host_db.get(ctx, HOST)['placement_synced'] is True


def test_a_programming_its_conductor_left_is_taken_out_once_overdue(
        pconf, ctx, db, device):
    """A conductor that died while the agent programmed leaves the
    programming marked, with its time to end: the card stays reserved,
    and once that time has passed any conductor's periodic job makes it
    unhealthy (what it holds is unknown), so it comes back only through a
    re-probe."""
    image = str(uuidlib.uuid4())
    until = (timeutils.utcnow() + datetime.timedelta(minutes=5)).replace(
        microsecond=0)
    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(bitstream_id=image, programming_until=until))
    # What the API shows from microversion 2.10.
    assert deployables.Deployable.get(
        ctx, device.deployable_uuid).programming_until == until
    assert programming.take_out_overdue(pconf, ctx) == 0
    placement_sync.sync_host(pconf, ctx, HOST, trust_memory=False)
    assert _provider(pconf, device.rp_uuid)[0] == 4
    assert _health(db, device)[0] == 'healthy'

    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(programming_until=(
                      timeutils.utcnow() - datetime.timedelta(seconds=1))))
    abandoned = _programmings('abandoned')[0]
    assert programming.take_out_overdue(pconf, ctx) == 1
    assert _programmings('abandoned')[0] == abandoned + 1
    health, reason = _health(db, device)
    assert health == 'unhealthy'
    assert reason.startswith('a programming did not end by ')
    assert 'outcome is unknown' in reason
    assert _bitstream(ctx, device) is None
    reserved, traits = _provider(pconf, device.rp_uuid)
    assert reserved == 4 and 'CUSTOM_ACCEL_UNHEALTHY' in traits
    assert OLD_TRAIT not in traits
    # Done once: the mark is gone.
    assert programming.take_out_overdue(pconf, ctx) == 0
    # Every conductor runs it.
    assert [periodics._load(path) for name, option, path in periodics.JOBS
            if name == 'take_out_overdue_programmings'] == [
        programming.take_out_overdue]


def test_a_programming_the_agent_does_not_finish_in_time_keeps_the_card_out(
        pconf, ctx, db, device, glance):
    """The conductor gives up at the deadline while the vendor tool may
    still be writing the card: what the card holds is unknown, so it must
    not go back into the schedule (it did: the reservation was restored
    at once).  It stays reserved, is marked unhealthy with the reason,
    forgets its image and function trait, and comes back through the
    health hold-down and a re-probe."""
    release = threading.Event()

    class SlowDriver(fake.FakeDriver):
        def program(self, controlpath_id, image_path, image_uuid):
            release.wait(30)
            super().program(controlpath_id, image_path, image_uuid)

    with seed.agent_endpoint(pconf, HOST, {
            'fake_driver': SlowDriver(pconf, HOST)}):
        image = glance.add_image(b'slow' * 10, {'accel:function_id': 'f9'})
        target = deployable_db.program_target(ctx, device.deployable_uuid)
        # Long enough for the download and the mark's Placement sync
        # before the agent is asked, on a loaded machine too.
        deadline = timeutils.utcnow() + datetime.timedelta(seconds=5)
        try:
            with pytest.raises(exception.ServiceUnavailable) as caught:
                programming.program(pconf, ctx, target,
                                    {'id': image, **glance.images[image]},
                                    deadline, own_handles=0)
        finally:
            release.set()
    assert (f'the agent on {HOST} did not finish programming 0000:0c:00.0'
            in str(caught.value))
    reserved, traits = _provider(pconf, device.rp_uuid)
    assert reserved == 4
    assert 'CUSTOM_ACCEL_UNHEALTHY' in traits and OLD_TRAIT not in traits
    assert _bitstream(ctx, device) is None
    health, reason = _health(db, device)
    assert health == 'unhealthy'
    assert reason.startswith('programming with image ')
    assert 'outcome is unknown' in reason


class _ReportedFPGA:
    """The fake FPGA of HOST as a real agent reports it: its driver (which
    records the image it programs), and the agent's reporter, answered by
    the conductor's report endpoint in this process (as over RPC), so
    that a delta the conductor refuses is followed by a full report
    (``conductor``: another endpoint standing for it)."""

    def __init__(self, conf, db, driver=None, conductor=None):
        conf.set_override('resource_provider_name', HOST, group='agent')
        client = placement_client.get_client(conf)
        if client.get_provider_by_name(HOST) is None:
            client.create_provider(str(uuidlib.uuid4()), HOST, None)
        self.driver = driver or fake.FakeDriver(conf, HOST)
        self.reporter = agent_reporter.Reporter(
            conf, HOST, {'fake_driver': self.driver},
            conductor_api=conductor or manager.ConductorManager(conf, 'c1'))
        self.reporter.report_now()
        with db.connect() as c:
            self.row = c.execute(sa.select(
                models.Deployable.id.label('deployable_id'),
                models.Deployable.uuid.label('deployable_uuid'),
                models.Deployable.rp_uuid)).one()

    def report(self):
        """The agent's next periodic report: whether it was a full one."""
        self.reporter.report_now()
        return self.reporter.last_report['full']


def test_an_overdue_mark_keeps_the_image_the_agent_reported_after_it(
        pconf, ctx, db, glance):
    """A conductor died while the agent ran the vendor tool, which
    succeeded: the agent's next report (a delta) recorded the image.  The
    overdue mark makes the conductor forget it; the agent's inventory
    does not change again, so its later reports were unchanged deltas,
    and the database said the card ran nothing (and the next bind for
    the image loaded it again).  The conductor now asks for a full
    report, which records the image; the card stays out until a
    re-probe, and asking for the image only advertises its trait."""
    image = glance.add_image(b'late' * 10, {'accel:function_id': 'f7'})
    fpga = _ReportedFPGA(pconf, db)
    card = fpga.row
    assert _provider(pconf, card.rp_uuid)[0] == 0
    assert _bitstream(ctx, card) is None
    # A conductor began programming and was killed: its mark stays.
    until = (timeutils.utcnow() + datetime.timedelta(minutes=5)).replace(
        microsecond=0)
    with db.begin() as c:
        c.execute(sa.update(models.Deployable).values(
            programming_until=until))
    # The tool succeeded: the agent reports the image.
    fpga.driver.program(fake.CONTROLPATH_ADDRESS, None, image)
    assert not fpga.report()
    assert _bitstream(ctx, card) == image

    with db.begin() as c:
        c.execute(sa.update(models.Deployable).values(
            programming_until=timeutils.utcnow()
            - datetime.timedelta(seconds=1)))
    assert programming.take_out_overdue(pconf, ctx) == 1
    # Forgotten until the agent says again what the card runs.
    assert _bitstream(ctx, card) is None
    full = fpga.report()
    assert _bitstream(ctx, card) == image
    assert full                 # the conductor asked for it
    assert deployables.Deployable.get(
        ctx, card.deployable_uuid).bitstream_id == image
    assert not fpga.report()    # then unchanged deltas again
    # Still out of the schedule until a re-probe finds it well.
    assert _health(db, card)[0] == 'unhealthy'
    reserved, traits = _provider(pconf, card.rp_uuid)
    assert reserved == fake.NUM_ACCELERATORS
    assert 'CUSTOM_ACCEL_UNHEALTHY' in traits
    # A bind (or an admin) asking for the image does not load it again.
    target = deployable_db.program_target(ctx, card.deployable_uuid)
    assert not programming.program(
        pconf, ctx, target, {'id': image, **glance.images[image]},
        timeutils.utcnow() + datetime.timedelta(minutes=1), own_handles=0)
    assert glance.downloads() == []
    assert 'CUSTOM_FPGA_FUNCTION_ID_F7' in _provider(pconf, card.rp_uuid)[1]


def test_an_image_reported_before_the_conductor_gave_up_is_kept(
        pconf, ctx, db, glance):
    """The tool succeeded and the agent's report recorded the image just
    before the conductor stopped waiting for the agent's answer: the card
    is taken out (its outcome is unknown to the conductor), and the
    agent's next report, a full one, records the image again."""
    image = glance.add_image(b'just' * 10, {'accel:function_id': 'f8'})
    release = threading.Event()
    reported = []

    class LateDriver(fake.FakeDriver):
        def program(self, controlpath_id, image_path, image_uuid):
            super().program(controlpath_id, image_path, image_uuid)
            reported.append(fpga.report())
            release.wait(30)    # the answer comes too late

    driver = LateDriver(pconf, HOST)
    fpga = _ReportedFPGA(pconf, db, driver)
    card = fpga.row
    target = deployable_db.program_target(ctx, card.deployable_uuid)
    with seed.agent_endpoint(pconf, HOST, {'fake_driver': driver}):
        try:
            with pytest.raises(exception.ServiceUnavailable):
                programming.program(
                    pconf, ctx, target,
                    {'id': image, **glance.images[image]},
                    # Time for the Placement syncs of the mark and of
                    # the agent's report before the conductor gives up.
                    timeutils.utcnow() + datetime.timedelta(seconds=6),
                    own_handles=0)
        finally:
            release.set()
    # The agent's delta was taken (it recorded the image), and the
    # conductor forgot the image after it.
    assert reported == [False]
    assert _bitstream(ctx, card) is None
    assert _health(db, card)[0] == 'unhealthy'
    full = fpga.report()
    assert _bitstream(ctx, card) == image
    assert full
    assert _provider(pconf, card.rp_uuid)[0] == fake.NUM_ACCELERATORS


def test_an_image_already_loaded_gets_its_function_trait(pconf, ctx, db,
                                                         agent, glance):
    """The card runs the image already (the agent's report says so: after
    a programming the conductor stopped waiting for, or one made before
    cyborg ran), but its function trait was never advertised: asking for
    the image does not program it again, and advertises the trait."""
    image = glance.add_image(b'early' * 10, {'accel:function_id': 'f5'})
    device = _reported(pconf, db, handles=1, bitstream_id=image)
    target = deployable_db.program_target(ctx, device.deployable_uuid)
    deadline = timeutils.utcnow() + datetime.timedelta(minutes=1)
    assert not programming.program(pconf, ctx, target,
                                   {'id': image, **glance.images[image]},
                                   deadline, own_handles=0)
    assert glance.downloads() == []
    assert _provider(pconf, device.rp_uuid) == (
        0, {'CUSTOM_FPGA_FUNCTION_ID_F5'})
    with db.connect() as c:
        assert c.execute(sa.select(models.Attribute.value).where(
            models.Attribute.deployable_id == device.deployable_id,
            models.Attribute.key == programming.TRAIT_ATTRIBUTE)
        ).scalar() == 'CUSTOM_FPGA_FUNCTION_ID_F5'


def test_a_card_being_programmed_takes_no_instance_that_does_not_program_it(
        pconf, ctx, db, device):
    """Nova may have placed an instance on a card before an admin (or
    another instance's bind) began rewriting it: its bind is refused
    rather than start it on a card whose image changes under it."""
    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(programming_until=(
                      timeutils.utcnow() + datetime.timedelta(minutes=5))))
    with pytest.raises(exception.BindFailed, match='is being programmed'):
        _bind(pconf, ctx, db, device, {})


def test_a_bind_that_took_a_handle_before_the_mark_stops_the_programming(
        pconf, ctx, db, agent, device, glance, monkeypatch):
    """A bind that checked the card before the programming marked it, and
    took a handle while the image downloaded, is counted again once the
    mark is set: the programming is refused, and undone."""
    image = glance.add_image(b'race' * 10)
    download = glance_client.download

    def download_while_a_bind_takes_a_handle(conf, meta):
        with db.begin() as c:
            c.execute(sa.update(models.AttachHandle)
                      .where(models.AttachHandle.deployable_id ==
                             device.deployable_id)
                      .values(in_use=True))
        return download(conf, meta)

    monkeypatch.setattr(glance_client, 'download',
                        download_while_a_bind_takes_a_handle)
    with pytest.raises(exception.InUse):
        programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                       image)
    assert _loaded(agent) is None
    assert _provider(pconf, device.rp_uuid)[0] == 0
    assert deployable_db.program_target(
        ctx, device.deployable_uuid).programming_until is None


def test_a_card_taken_out_by_an_unfinished_programming_comes_back_by_probe(
        pconf, ctx, db, device):
    """The way back: the hold-down on good readings, a re-probe that the
    agent answers "being programmed" while the tool still runs (the card
    stays out), then one that finds it well (the card is offered again)."""
    from cyborg.conductor import health

    pconf.set_override('hold_down', 0, 'health')
    target = deployable_db.program_target(ctx, device.deployable_uuid)
    programming._out_until_probed(pconf, ctx, target, None,
                                  "programming with image x did not end")
    key = 'PCI:0000:0c:00.0'

    def report(severity, source, full=False, reason='', about=(None,)):
        # A probe's transient is the agent's "not yet" here.
        code = (PROBE_NOT_YET if (source, severity) == ('probe', 'transient')
                else None)
        health.handle_report(pconf, ctx, HOST, {'full': full, 'readings': [
            {'device': key, 'severity': severity, 'source': source,
             'reason': reason, 'deployable': deployable, 'code': code}
            for deployable in about]})
        health.run_timers(pconf, ctx)   # the hold-down (0 s) is over
        return _health(db, device)[0], _provider(pconf, device.rp_uuid)

    # The agent's periodic snapshot reads the device well: re-probe.
    state, (reserved, _) = report('ok', 'fake', full=True)
    assert (state, reserved) == ('probing', 4)
    # The agent's answer while the tool still runs: the device's and its
    # deployable's.
    state, (reserved, _) = report('transient', 'probe',
                                  reason='being programmed (for 300 s)',
                                  about=(None, device.name))
    assert (state, reserved) == ('unhealthy', 4)
    assert _health(db, device)[1] == 'being programmed (for 300 s)'
    assert _device_health(db, device) == 'healthy'  # no fault of its own
    # Re-probed a [health]probe_timeout later (a zero hold-down), good
    # readings or not: one meanwhile brings it no nearer.
    assert report('ok', 'fake', full=True)[0] == 'unhealthy'
    table = models.Deployable.__table__
    with db.begin() as c:
        where = table.c.id == device.deployable_id
        due = c.execute(sa.select(table.c.health_due_at).where(
            where)).scalar()
        c.execute(sa.update(table).where(where).values(
            health_due_at=due - datetime.timedelta(
                seconds=pconf.health.probe_timeout)))
    assert report('ok', 'fake', full=True)[0] == 'probing'
    state, (reserved, traits) = report('ok', 'probe')
    assert (state, reserved) == ('healthy', 0)
    assert 'CUSTOM_ACCEL_UNHEALTHY' not in traits


def test_a_card_out_for_an_unfinished_programming_on_a_host_not_watching(
        pconf, ctx, db, device):
    """An agent with health watching off sends no readings, yet answers
    re-probes: the card comes back by its hold-down and a re-probe alone,
    no good reading and no admin needed (it stayed out until an admin
    enabled the device)."""
    from cyborg.conductor import health
    from tests.unit.conductor import agent_endpoint

    pconf.set_override('hold_down', 60, 'health')
    pconf.set_override('probe_timeout', 30, 'health')
    key = 'PCI:0000:0c:00.0'
    table = models.Deployable.__table__

    def hold_down_over():
        # Time passes: the re-probe scheduled is due.
        with db.begin() as c:
            where = table.c.id == device.deployable_id
            due = c.execute(sa.select(table.c.health_due_at).where(
                where)).scalar()
            assert due is not None, 'no re-probe scheduled'
            c.execute(sa.update(table).where(where).values(
                health_due_at=due - datetime.timedelta(seconds=61)))

    def answer(severity, about):
        health.handle_report(pconf, ctx, HOST, {'full': False, 'readings': [
            {'device': key, 'severity': severity, 'source': 'probe',
             'deployable': deployable, 'reason': 'being programmed',
             'code': PROBE_NOT_YET if severity == 'transient' else None}
            for deployable in about]})

    with agent_endpoint.serving(pconf, HOST,
                                agent_endpoint.RecordingAgent()) as agent:
        target = deployable_db.program_target(ctx, device.deployable_uuid)
        programming._out_until_probed(pconf, ctx, target, None,
                                      "programming with image x did not "
                                      "end")
        assert _health(db, device)[0] == 'unhealthy'
        assert _provider(pconf, device.rp_uuid)[0] == 4
        assert health.run_timers(pconf, ctx) == 0   # held down meanwhile
        for attempt in (1, 2):
            hold_down_over()
            assert health.run_timers(pconf, ctx) == 1
            assert _health(db, device)[0] == 'probing'
            assert agent.probed.wait(10)
            assert agent.probes == [[key]] * attempt
            agent.probed.clear()
            if attempt == 1:
                # The tool still runs: "not yet", for the device and its
                # deployable.  Probed again after the next hold-down.
                answer('transient', (None, device.name))
                assert _health(db, device) == ('unhealthy',
                                               'being programmed')
        answer('ok', (None,))
    state, (reserved, traits) = _health(db, device)[0], _provider(
        pconf, device.rp_uuid)
    assert (state, reserved) == ('healthy', 0)
    assert 'CUSTOM_ACCEL_UNHEALTHY' not in traits
    assert _device_health(db, device) == 'healthy'


def test_a_device_probed_while_an_admin_programs_it_waits_its_turn(
        pconf, ctx, db, device):
    """A device out for a fault of its own, vouched for by an admin
    (re-probed at once) while an admin programs it: the agent's "not yet"
    sends the device back out with that reason (it waited for the probe
    timeout), and its healthy deployable stays healthy (it was made
    suspect)."""
    from cyborg.conductor import device_status
    from cyborg.conductor import health

    def report(severity, about, reason=''):
        health.handle_report(pconf, ctx, HOST, {'full': False, 'readings': [
            {'device': 'PCI:0000:0c:00.0', 'severity': severity,
             'source': 'probe' if severity == 'transient' else 'fake',
             'code': PROBE_NOT_YET if severity == 'transient' else None,
             'reason': reason, 'deployable': deployable}
            for deployable in about]})

    report('fatal', [None], 'fell off the bus')
    device_status.set_status(pconf, ctx, device.device_uuid, 'enabled')
    assert _device_health(db, device) == 'probing'
    report('transient', [None, device.name],
           'being programmed (for 3 s); probed again after the next '
           'hold-down')
    assert _device_health(db, device) == 'unhealthy'
    assert _health(db, device) == ('healthy', None)
    with db.connect() as c:
        assert c.execute(sa.select(models.Device.health_reason).where(
            models.Device.id == device.device_id)).scalar().startswith(
            'being programmed (for 3 s)')
    assert _provider(pconf, device.rp_uuid)[0] == 4


def test_a_vendor_tool_that_fails_takes_the_card_out(pconf, ctx, db, device,
                                                     glance):
    """The tool ran and failed: it may have written part of the card, so
    the image recorded before is no longer trusted.  The card stays out
    (unhealthy, image and function trait forgotten) until a re-probe;
    the caller gets a 409 with the tool's reason, as before."""

    class FailingDriver(fake.FakeDriver):
        def program(self, controlpath_id, image_path, image_uuid):
            raise exception.FPGAToolFailed(
                message='FPGA programming with fpgaconf failed: exit 3')

    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(bitstream_id=str(uuidlib.uuid4())))
    unknown = _programmings('outcome_unknown')
    with seed.agent_endpoint(pconf, HOST, {
            'fake_driver': FailingDriver(pconf, HOST)}):
        image = glance.add_image(b'fail' * 10)
        with pytest.raises(exception.Conflict) as caught:
            programming.program_deployable(pconf, ctx,
                                           device.deployable_uuid, image)
    assert caught.value.code == 409
    assert _programmings('outcome_unknown') == tuple(n + 1 for n in unknown)
    assert 'fpgaconf failed: exit 3' in str(caught.value)
    assert _bitstream(ctx, device) is None
    health, reason = _health(db, device)
    assert health == 'unhealthy'
    assert reason.startswith(f'programming with image {image} failed: ')
    assert reason.endswith("the card's outcome is unknown")
    reserved, traits = _provider(pconf, device.rp_uuid)
    assert reserved == 4 and OLD_TRAIT not in traits
    assert deployable_db.program_target(
        ctx, device.deployable_uuid).programming_until is None


def test_the_agent_s_answer_is_read_the_same_rebuilt_or_remote():
    """Over RabbitMQ the agent's exceptions arrive as RemoteError (their
    module is not one oslo.messaging may rebuild); in process as
    themselves."""
    from cyborg.agent import rpcapi as agent_rpcapi

    remote = messaging.RemoteError('FPGAToolFailed',
                                   'FPGA programming with xbutil failed\n'
                                   'Traceback ...')
    rebuilt = exception.FPGAToolFailed(message='FPGA programming failed')
    for error in (remote, rebuilt):
        assert agent_rpcapi.raised(error, exception.FPGAToolFailed)
        assert not agent_rpcapi.raised(error, exception.Conflict)
    assert agent_rpcapi.refusal(remote) == \
        'FPGA programming with xbutil failed'
    assert agent_rpcapi.refusal(messaging.MessagingTimeout()) is None



def test_programmings_of_one_deployable_wait_their_turn_and_leave_no_lock():
    """One lock per deployable while it is wanted: the second programming
    waits for the first, and none is kept after (a conductor used to keep
    one for every deployable it ever programmed)."""
    order, inside, go = [], threading.Event(), threading.Event()

    def first():
        with programming._deployable_lock(7):
            order.append('first in')
            inside.set()
            go.wait(10)
            order.append('first out')

    def second():
        with programming._deployable_lock(7):
            order.append('second in')

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert inside.wait(10)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    for _ in range(1000):       # until the second one waits
        if programming._LOCKS[7][1] == 2:
            break
        time.sleep(0.01)
    assert programming._LOCKS[7][1] == 2 and order == ['first in']
    go.set()
    for thread in threads:
        thread.join(10)
    assert order == ['first in', 'first out', 'second in']
    assert 7 not in programming._LOCKS


def _mark(db, device, minutes=5):
    """The card marked as another conductor marks what it programs."""
    until = (timeutils.utcnow() + datetime.timedelta(minutes=minutes)
             ).replace(microsecond=0)
    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(programming_until=until))
    return until


def test_a_card_another_conductor_programs_is_not_programmed_again(
        pconf, ctx, db, agent, device, glance):
    """Another conductor's mark (an admin's retry landing elsewhere, a
    bind on another conductor) was overwritten, and cleared by the second
    programming when the agent refused it: the card was offered while the
    first one's tool still wrote it.  And a bind asking for the image the
    card runs took it while it was being rewritten.  Both are refused now,
    the mark left as it was."""
    loaded = glance.add_image(b'running' * 10)
    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(bitstream_id=loaded))
    until = _mark(db, device)
    new = glance.add_image(b'another' * 10)
    with pytest.raises(exception.Conflict, match='is being programmed'):
        programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                       new)
    # Refused at once: the PATCH (400, nothing written).
    with pytest.raises(exception.BindFailed, match='is being programmed'):
        _bind(pconf, ctx, db, device, {'accel:bitstream_id': loaded})
    assert deployable_db.program_target(
        ctx, device.deployable_uuid).programming_until == until
    assert _loaded(agent) is None
    assert seed.handles_in_use(db) == 0


def test_a_bind_unbound_while_its_image_downloads_programs_nothing(
        pconf, ctx, db, agent, device, glance, monkeypatch):
    """A bind that programs is unbound while its image downloads, and
    another instance's bind (nothing to program) takes the handle it let
    go: the first bind counted that handle as its own, and rewrote the
    card under the other instance."""
    image = glance.add_image(b'late' * 10)
    download = glance_client.download
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    other, = arq_binding.create(ctx, profile, 'p1')
    programs = seed.seed_profile(db, [{'resources:FPGA': '1',
                                       'accel:bitstream_id': image}])
    first, = arq_binding.create(ctx, programs, 'p1')

    def binding(arq):
        return {arq['uuid']: {
            'hostname': device.hostname, 'device_rp_uuid': device.rp_uuid,
            'instance_uuid': str(uuidlib.uuid4())}}

    def download_while_unbound_and_bound_again(conf, meta):
        arq_binding.unbind(pconf, ctx, [first['uuid']])
        arq_binding.start_bind(pconf, ctx, binding(other)).result(60)
        return download(conf, meta)

    monkeypatch.setattr(glance_client, 'download',
                        download_while_unbound_and_bound_again)
    arq_binding.start_bind(pconf, ctx, binding(first)).result(60)
    rows = seed.arq_rows(db)
    assert rows[other['uuid']].state == 'Bound'
    assert rows[first['uuid']].state == 'Unbound'
    assert _loaded(agent) is None
    assert seed.handles_in_use(db) == 1
    assert deployable_db.program_target(
        ctx, device.deployable_uuid).programming_until is None


def test_an_agent_error_after_the_tool_ran_is_an_unknown_outcome(
        pconf, ctx, db, device, glance):
    """The agent failed after its vendor tool ran (recording the image,
    its privileged daemon): the card may run the new image.  It was taken
    for a refusal before the tool ('the card is as it was'): the old
    image and function trait stayed advertised, and the card offered."""

    class Driver(fake.FakeDriver):
        def program(self, controlpath_id, image_path, image_uuid):
            super().program(controlpath_id, image_path, image_uuid)
            raise OSError(28, 'No space left on device')

    with seed.agent_endpoint(pconf, HOST, {'fake_driver': Driver(pconf,
                                                                 HOST)}):
        image = glance.add_image(b'written' * 10)
        with pytest.raises(exception.ProgrammingOutcomeUnknown) as caught:
            programming.program_deployable(pconf, ctx,
                                           device.deployable_uuid, image)
    assert caught.value.code == 409
    assert 'No space left on device' in str(caught.value)
    assert _health(db, device)[0] == 'unhealthy'
    reserved, traits = _provider(pconf, device.rp_uuid)
    assert reserved == 4 and OLD_TRAIT not in traits


def test_an_advertised_trait_placement_missed_is_left_to_the_reconcile(
        pconf, ctx, db, agent, glance, placement_url):
    """The card runs the image; its function trait is advertised while
    Placement is away.  The host stayed marked synced, so the reconcile
    trusted what this conductor last wrote and never added the trait."""
    from cyborg.db.api import hosts as host_db

    image = glance.add_image(b'early' * 10, {'accel:function_id': 'f6'})
    device = _reported(pconf, db, handles=1, bitstream_id=image)
    placement_sync.reconcile_all(pconf, ctx)
    assert host_db.get(ctx, HOST)['placement_synced']
    placement_fixture.placement_conf(pconf, 'http://127.0.0.1:9')
    placement_client.reset_clients()
    target = deployable_db.program_target(ctx, device.deployable_uuid)
    assert not programming.program(
        pconf, ctx, target, {'id': image, **glance.images[image]},
        timeutils.utcnow() + datetime.timedelta(minutes=1), own_handles=0)
    assert not host_db.get(ctx, HOST)['placement_synced']
    placement_fixture.placement_conf(pconf, placement_url)
    placement_client.reset_clients()
    placement_sync.reconcile_all(pconf, ctx)
    assert _provider(pconf, device.rp_uuid)[1] == {
        'CUSTOM_FPGA_FUNCTION_ID_F6'}


def test_only_an_active_image_is_programmed(pconf, ctx, db, agent, device,
                                            glance):
    """A new version of a bitstream still being uploaded, beside the
    active one with the same function id, failed every bind asking for
    that function ('2 images ... want exactly one'); an image that is not
    active was only found out at its download (a 503)."""
    image = glance.add_image(b'active' * 10, {'accel:function_id': 'f7'})
    queued = glance.add_image(b'upload' * 10, {'accel:function_id': 'f7'})
    glance.images[queued]['status'] = 'queued'
    row = _bind(pconf, ctx, db, device, {'accel:function_id': 'f7'})
    assert row.state == 'Bound', row.bind_failure_reason
    assert _loaded(agent) == image
    glance.images[image]['status'] = 'deactivated'
    with pytest.raises(exception.Invalid, match='is deactivated in Glance'):
        programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                       image)


def test_a_download_that_uses_up_the_time_is_a_503_of_its_own(
        pconf, ctx, db, agent, device, glance):
    """Glance took the programming's whole time ([DEFAULT]bind_timeout):
    an administrator's program answered 400 "Binding failed: timed out
    before programming", as if the request were wrong, about a bind there
    is none of.  It is a 503 saying that nothing was programmed."""
    image = glance.add_image(b'slow glance' * 10, {'accel:function_id': 'fs'})
    glance.delay = 1.5
    target = deployable_db.program_target(ctx, device.deployable_uuid)
    deadline = timeutils.utcnow() + datetime.timedelta(seconds=1)
    try:
        with pytest.raises(exception.ProgrammingTimedOut) as caught:
            programming.program(pconf, ctx, target,
                                {'id': image, **glance.images[image]},
                                deadline, own_handles=0)
    finally:
        glance.release()
    error = caught.value
    assert error.code == 503
    assert str(error).startswith(
        f'Could not program deployable {device.deployable_uuid} with '
        f'image {image} in time: ')
    assert 'downloading the bitstream from Glance took' in str(error)
    assert str(error).endswith('nothing was programmed')
    # As the API reads it from the conductor's answer.
    answered = faults.as_cyborg_exception(messaging.RemoteError(
        type(error).__name__, str(error)))
    assert (answered.code, str(answered)) == (503, str(error))
    assert _loaded(agent) is None
    assert _bitstream(ctx, device) is None
    assert _provider(pconf, device.rp_uuid) == (0, {FAKE_TRAIT, OLD_TRAIT})


def test_a_bitstream_over_the_limit_is_refused_before_its_download(
        pconf, ctx, db, agent, device, glance):
    """The conductor sends the bitstream to the agent in one RPC message:
    one larger than the broker takes failed obscurely, after its whole
    download.  Glance gives the size: refused before anything downloads,
    a 400 saying why, for an administrator and a bind alike."""
    pconf.set_override('max_bitstream_size', 100, group='glance')
    image = glance.add_image(b'x' * 101, {'accel:function_id': 'fbig'})
    with pytest.raises(messaging.ExpectedException) as caught:
        manager.ConductorManager(pconf, 'c1').deployable_program(
            ctx, device.deployable_uuid, image)
    error = caught.value.exc_info[1]
    assert isinstance(error, exception.BitstreamTooLarge)
    assert error.code == 400
    assert str(error).startswith(
        f'Image {image} is too large to program (101 bytes); '
        f'[glance]max_bitstream_size is 100 bytes')
    row = _bind(pconf, ctx, db, device, {'accel:bitstream_id': image})
    assert row.state == 'BindFailed'
    assert row.bind_failure_reason == str(error)
    assert glance.downloads() == []
    assert _loaded(agent) is None
    assert _provider(pconf, device.rp_uuid) == (0, {FAKE_TRAIT, OLD_TRAIT})
    # At the limit, it is programmed.
    fits = glance.add_image(b'y' * 100)
    programming.program_deployable(pconf, ctx, device.deployable_uuid, fits)
    assert _loaded(agent) == fits


def test_a_bitstream_glance_gives_no_size_of_is_refused_while_downloaded(
        pconf, glance):
    """Without Glance's size (or with a wrong one), the download stops as
    soon as it passes the limit, rather than reading the rest (here Glance
    stalls after that: reading on would wait for [glance]timeout)."""
    pconf.set_override('max_bitstream_size', 10000, group='glance')
    pconf.set_override('download_chunk_size', 4096, group='glance')
    pconf.set_override('timeout', 5, group='glance')
    image_uuid = glance.add_image(b'z' * 100000)
    glance.images[image_uuid]['size'] = None
    image = glance_client.get_image(pconf, image_uuid, 'p1')
    glance.stall_after = 30000
    started = time.monotonic()
    try:
        with pytest.raises(exception.BitstreamTooLarge,
                           match='more than 10000 bytes downloaded; Glance '
                                 'gave no size'):
            glance_client.download(pconf, image)
    finally:
        glance.release()
    assert time.monotonic() - started < 4
    assert len(glance.downloads()) == 1
