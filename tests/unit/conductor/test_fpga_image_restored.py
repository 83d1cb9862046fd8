"""An FPGA whose image a reboot took away, under the Bound ARQs whose
bind programmed it, is programmed again: the agent's report after the
reboot shows the card with no image, and the conductor loads the image
those ARQs asked for once more (after the report's transaction, in the
background; the periodic check retries).  It was only named in a
WARNING, for an operator to reprogram by hand.

Holders asking for different images are left to the WARNING, so is
every card with ``[conductor]restore_fpga_images`` off, and a failed
attempt is tried again only after ``[conductor]reprogram_retry_interval``.

The fake FPGA of HOST as a real agent reports it (its driver records
the image it programs and forgets it at a "reboot"), the agent's RPC
endpoint in this process, a recording Glance, the real (embedded)
Placement, on every database."""

import contextlib
import datetime
import json
import logging
import os
import threading
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_binding
from cyborg.conductor import glance as glance_module
from cyborg.conductor import periodics
from cyborg.conductor import programming
from cyborg.db import models
from cyborg.drivers import fake
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_programming as tp
from tests.unit.conductor import test_programming_take_out_race as tor

placement_url = tp.placement_url
glance = tp.glance

HOST = tp.HOST

# SQLite, MariaDB and PostgreSQL.
engine = tor.engine

# How long a test waits for the restore a report started, at most.
WAIT = 60


@pytest.fixture
def rconf(conf, engine, placement_url, glance, tmp_path):
    conf.set_override('send_events', False, group='nova')
    yield tp.programming_conf(conf, placement_url, glance, tmp_path)
    assert programming.wait_restores(WAIT)
    # A failed attempt's back-off is this process's: not the next test's.
    programming._FAILED.clear()


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


class _Watched(fake.FakeDriver):
    """The fake FPGA, recording each programming the agent asks of it:
    (image uuid, the bitstream, what Placement reserved of the card's
    provider meanwhile)."""

    rp_uuid = None

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.conf = conf
        self.calls = []

    def program(self, controlpath_id, image_path, image_uuid):
        with open(image_path, 'rb') as f:
            data = f.read()
        self.calls.append((image_uuid, data,
                           tp._provider(self.conf, self.rp_uuid)[0]))
        super().program(controlpath_id, image_path, image_uuid)

    def reboot(self):
        """The host rebooted: the card runs its flash default, which the
        agent reports as no image."""
        self.remember(fake.CONTROLPATH_ADDRESS, None)


class _Card:
    def __init__(self, fpga, driver, image, data, arq):
        self.fpga, self.driver = fpga, driver
        self.image, self.data, self.arq = image, data, arq
        self.row = fpga.row


def _bind(conf, ctx, engine, card, group):
    profile = seed.seed_profile(engine, [dict(group, **{
        'resources:FPGA': '1'})])
    uuid = arq_binding.create(ctx, profile, 'p1')[0]['uuid']
    arq_binding.start_bind(conf, ctx, {uuid: {
        'hostname': HOST, 'device_rp_uuid': card.rp_uuid,
        'instance_uuid': str(uuidlib.uuid4())}}).result(WAIT)
    row = seed.arq_rows(engine)[uuid]
    assert row.state == 'Bound', row.bind_failure_reason
    return row


def _programmed(conf, ctx, engine, glance, driver, ask):
    """The fake FPGA reported, an ARQ Bound by a bind that programmed
    it (``ask``: the profile group's key), the host reported again."""
    fpga = tp._ReportedFPGA(conf, engine, driver=driver)
    driver.rp_uuid = fpga.row.rp_uuid
    data = b'\x00restored' * 100
    image = glance.add_image(data, {'accel:function_id': 'f-r'})
    row = _bind(conf, ctx, engine, fpga.row, {
        ask: image if ask == 'accel:bitstream_id' else 'f-r'})
    assert [call[0] for call in driver.calls] == [image]
    fpga.report()
    assert tp._bitstream(ctx, fpga.row) == image
    return _Card(fpga, driver, image, data, row.uuid)


@pytest.fixture
def ask():
    """The key of the profile group that programmed the card."""
    return 'accel:bitstream_id'


@pytest.fixture
def card(rconf, ctx, engine, glance, ask):
    """``_programmed``, the agent's endpoint serving meanwhile."""
    driver = _Watched(rconf, HOST)
    with seed.agent_endpoint(rconf, HOST, {'fake_driver': driver}):
        yield _programmed(rconf, ctx, engine, glance, driver, ask)


def _rebooted(card):
    """The host rebooted, and its agent reports; the restore that report
    started (if any) waited for."""
    card.driver.reboot()
    card.fpga.report()
    assert programming.wait_restores(WAIT)


def _warnings(caplog, logger):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == logger]


@pytest.mark.parametrize('ask', ['accel:bitstream_id', 'accel:function_id'])
def test_an_image_a_reboot_took_is_programmed_again(
        rconf, ctx, engine, glance, card, caplog, ask):
    downloads = len(glance.downloads())
    with caplog.at_level(logging.INFO):
        _rebooted(card)
    # The agent was asked for the same bitstream, the card's providers
    # reserved whole while it ran.
    assert card.driver.calls[1:] == [
        (card.image, card.data, fake.NUM_ACCELERATORS)]
    assert len(glance.downloads()) == downloads + 1
    assert tp._bitstream(ctx, card.row) == card.image
    assert tp._loaded(card.driver) == card.image
    assert tp._provider(rconf, card.row.rp_uuid) == (
        0, {tp.FAKE_TRAIT, 'CUSTOM_FPGA_FUNCTION_ID_F_R'})
    assert seed.arq_rows(engine)[card.arq].state == 'Bound'
    assert not _warnings(caplog, 'cyborg.conductor.inventory_apply')
    assert not _warnings(caplog, 'cyborg.conductor.programming')
    said = [r.getMessage() for r in caplog.records
            if r.name == 'cyborg.conductor.programming'
            and 'again' in r.getMessage()]
    assert len(said) == 2 and all(card.arq in line for line in said), said
    # Nothing more to do: the periodic check finds the image loaded.
    assert programming.restore_lost(rconf, ctx) == 0
    card.fpga.report()
    assert len(card.driver.calls) == 2


def _hold(engine, card, group, project='p1'):
    """A second ARQ Bound to another handle of the card, of a profile
    asking for ``group``, of ``project``: its uuid."""
    profile = seed.seed_profile(engine, [dict(group, **{
        'resources:FPGA': '1'})])
    h, a = models.AttachHandle, models.ExtARQ
    with engine.begin() as c:
        handle = c.execute(sa.select(h.id).where(
            h.deployable_id == card.row.deployable_id,
            h.in_use == sa.false()).order_by(h.id).limit(1)).scalar()
        c.execute(sa.update(h).where(h.id == handle).values(in_use=True))
        profile_id = c.scalar(sa.select(models.DeviceProfile.id).where(
            models.DeviceProfile.uuid == profile))
        uuid = str(uuidlib.uuid4())
        c.execute(sa.insert(a).values(
            uuid=uuid, state='Bound', device_profile_id=profile_id,
            device_profile_group_id=0, project_id=project, hostname=HOST,
            instance_uuid=str(uuidlib.uuid4()), attach_handle_id=handle,
            deployable_id=card.row.deployable_id, bind_id=''))
    return uuid


@pytest.mark.parametrize('group', [
    {'accel:bitstream_id': str(uuidlib.uuid4())},
    {}], ids=['another image', 'no image'])
def test_holders_asking_for_different_images_get_only_the_warning(
        rconf, ctx, engine, glance, card, caplog, group):
    other = _hold(engine, card, group)
    with caplog.at_level(logging.WARNING):
        _rebooted(card)
    warned = _warnings(caplog, 'cyborg.conductor.inventory_apply')
    assert len(warned) == 1, warned
    assert card.arq in warned[0] and other in warned[0]
    assert programming.restore_lost(rconf, ctx) == 0
    assert len(card.driver.calls) == 1
    assert tp._bitstream(ctx, card.row) is None


def test_a_failed_programming_is_retried_after_the_back_off(
        rconf, ctx, engine, glance, card, caplog):
    rconf.set_override('reprogram_retry_interval', 3600, group='conductor')
    fail = fake.health_file(rconf)
    with open(fail, 'w') as f:
        json.dump({'program': 'fail'}, f)
    with caplog.at_level(logging.WARNING):
        _rebooted(card)
    assert len(card.driver.calls) == 2
    warned = _warnings(caplog, 'cyborg.conductor.programming')
    failed = [line for line in warned if 'failed' in line
              and card.arq in line]
    assert len(failed) == 1, warned
    assert tp._bitstream(ctx, card.row) is None
    os.unlink(fail)
    # Not before the back-off: neither the periodic check nor a report.
    assert programming.restore_lost(rconf, ctx) == 0
    card.fpga.report()
    assert programming.wait_restores(WAIT)
    assert len(card.driver.calls) == 2
    # Once it has passed.
    rconf.set_override('reprogram_retry_interval', 0, group='conductor')
    assert programming.restore_lost(rconf, ctx) == 1
    assert card.driver.calls[2][:2] == (card.image, card.data)
    assert tp._bitstream(ctx, card.row) == card.image
    assert seed.arq_rows(engine)[card.arq].state == 'Bound'


def test_turned_off_only_the_warning_then_the_periodic_check_restores(
        rconf, ctx, engine, glance, card, caplog):
    rconf.set_override('restore_fpga_images', False, group='conductor')
    with caplog.at_level(logging.WARNING):
        _rebooted(card)
    warned = _warnings(caplog, 'cyborg.conductor.inventory_apply')
    assert len(warned) == 1 and card.arq in warned[0], warned
    assert programming.restore_lost(rconf, ctx) == 0
    assert len(card.driver.calls) == 1
    assert tp._bitstream(ctx, card.row) is None
    # Turned on (or a conductor that died before it restored the card):
    # the periodic job does it.
    rconf.set_override('restore_fpga_images', True, group='conductor')
    periodics.run_job(rconf, 'restore_fpga_images', dict(
        (name, path) for name, _option, path in periodics.JOBS)[
            'restore_fpga_images'])
    assert card.driver.calls[1] == (card.image, card.data,
                                    fake.NUM_ACCELERATORS)
    assert tp._bitstream(ctx, card.row) == card.image


@pytest.mark.parametrize('ask', ['accel:bitstream_id', 'accel:function_id'])
def test_two_conductors_restoring_one_card_program_it_once(
        rconf, ctx, engine, glance, card, caplog, monkeypatch, ask):
    """Conductor B reads the card (no image) and downloads the image;
    conductor A restores the card meanwhile (its mark set, the agent
    asked, the image recorded, the mark cleared).  B, its mark set in
    turn, reads the card again: it runs the image, and B's mark is
    released without asking the agent (the card was programmed twice,
    under the instance it was restored for)."""
    rconf.set_override('restore_fpga_images', False, group='conductor')
    _rebooted(card)
    rconf.set_override('restore_fpga_images', True, group='conductor')
    # Two conductors: no lock of this process between them.
    monkeypatch.setattr(programming, '_deployable_lock',
                        lambda _id: contextlib.nullcontext())
    real = glance_module.download
    other = []

    def download(conf, image):
        if not other:
            # Conductor A, while B downloads (A's own download is not
            # held up).
            other.append(None)
            saved = set(programming._RESTORING)
            programming._RESTORING.clear()
            other[0] = programming.restore_lost(rconf, ctx)
            programming._RESTORING.update(saved)
        return real(conf, image)

    monkeypatch.setattr(glance_module, 'download', download)
    with caplog.at_level(logging.DEBUG):
        assert programming.restore_lost(rconf, ctx) == 0       # B
    assert other == [1]
    assert [call[0] for call in card.driver.calls] == [card.image] * 2
    assert tp._bitstream(ctx, card.row) == card.image
    assert _mark(engine, card) is None
    assert tp._provider(rconf, card.row.rp_uuid) == (
        0, {tp.FAKE_TRAIT, 'CUSTOM_FPGA_FUNCTION_ID_F_R'})
    assert not _warnings(caplog, 'cyborg.conductor.programming')
    assert not programming._FAILED
    assert seed.arq_rows(engine)[card.arq].state == 'Bound'


def _mark(engine, card):
    with engine.begin() as c:
        return c.scalar(sa.select(models.Deployable.programming_until).where(
            models.Deployable.id == card.row.deployable_id))


def _set_mark(engine, card, until):
    with engine.begin() as c:
        c.execute(sa.update(models.Deployable).where(
            models.Deployable.id == card.row.deployable_id).values(
                programming_until=until))


def test_a_restore_losing_the_mark_race_tries_again_without_backing_off(
        rconf, ctx, engine, glance, card, caplog, monkeypatch):
    """Another conductor's programming marks the card while this one
    downloads: not now (DEBUG), no WARNING, no back-off; the next
    attempt restores the card."""
    rconf.set_override('restore_fpga_images', False, group='conductor')
    _rebooted(card)
    rconf.set_override('restore_fpga_images', True, group='conductor')
    rconf.set_override('reprogram_retry_interval', 3600, group='conductor')
    real = glance_module.download
    marked = []

    def download(conf, image):
        if not marked:
            # Another conductor sets its mark meanwhile.
            marked.append(True)
            _set_mark(engine, card, datetime.datetime.utcnow() +
                      datetime.timedelta(hours=1))
        return real(conf, image)

    monkeypatch.setattr(glance_module, 'download', download)
    with caplog.at_level(logging.DEBUG, 'cyborg.conductor.programming'):
        assert programming.restore_lost(rconf, ctx) == 0
    assert marked and len(card.driver.calls) == 1
    assert not _warnings(caplog, 'cyborg.conductor.programming')
    assert any('not programmed again now' in r.getMessage()
               and r.levelno == logging.DEBUG for r in caplog.records)
    assert not programming._FAILED
    # That programming ends (its mark cleared): the next attempt, well
    # within the back-off, restores the card.
    _set_mark(engine, card, None)
    assert programming.restore_lost(rconf, ctx) == 1
    assert card.driver.calls[1][:2] == (card.image, card.data)
    assert tp._bitstream(ctx, card.row) == card.image


def test_a_holder_still_binding_gets_the_warning_not_the_promise(
        rconf, ctx, engine, glance, card, caplog):
    """A card held by a Bound ARQ that asked for an image and by one
    still binding: the periodic check never restores it
    (``lost_cards``), so the report warns rather than say it is
    programmed again."""
    other = _hold(engine, card, {})
    with engine.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == other).values(state='BindStarted'))
    with caplog.at_level(logging.INFO):
        _rebooted(card)
    promised = [r.getMessage() for r in caplog.records
                if 'it is programmed again' in r.getMessage()]
    warned = _warnings(caplog, 'cyborg.conductor.inventory_apply')
    assert not promised, promised
    assert len(warned) == 1 and card.arq in warned[0], warned
    assert programming.restore_lost(rconf, ctx) == 0
    assert len(card.driver.calls) == 1


def test_a_stopping_conductor_waits_for_the_restore_a_report_started(
        rconf, ctx, engine, glance, card, monkeypatch):
    """The conductor's background work (``BackgroundBinds``, waited for
    within ``[DEFAULT]graceful_shutdown_timeout``) includes the restores
    reports started: a stop does not cut one off mid-programming."""
    real = glance_module.download
    downloading, go_on = threading.Event(), threading.Event()

    def download(conf, image):
        downloading.set()
        assert go_on.wait(WAIT)
        return real(conf, image)

    monkeypatch.setattr(glance_module, 'download', download)
    card.driver.reboot()
    card.fpga.report()
    assert downloading.wait(WAIT)
    stop = threading.Thread(target=arq_binding.BackgroundBinds().wait)
    stop.start()
    try:
        stop.join(1)
        assert stop.is_alive(), 'the stop did not wait for the restore'
    finally:
        go_on.set()
        stop.join(WAIT)
    assert not stop.is_alive()
    assert [call[0] for call in card.driver.calls] == [card.image] * 2
    assert tp._bitstream(ctx, card.row) == card.image


@pytest.mark.parametrize('ask', ['accel:function_id'])
def test_a_restore_ignores_another_projects_image_of_the_function(
        rconf, ctx, engine, glance, card, caplog, ask):
    """Another project uploads a private image with the card's function
    id after the bind: the restore still finds the one image the ARQ's
    project may use (it counted both, and failed), and never programs
    the other's."""
    glance.add_image(b'\x00evil' * 100, {'accel:function_id': 'f-r'},
                     owner='tenant-attacker', visibility='private')
    with caplog.at_level(logging.WARNING):
        _rebooted(card)
    assert card.driver.calls[1:] == [
        (card.image, card.data, fake.NUM_ACCELERATORS)]
    assert tp._bitstream(ctx, card.row) == card.image
    assert not _warnings(caplog, 'cyborg.conductor.programming')


@pytest.mark.parametrize('ask', ['accel:bitstream_id', 'accel:function_id'])
def test_a_restore_programs_only_an_image_the_holders_project_may_use(
        rconf, ctx, engine, glance, card, caplog, ask):
    """Read for the project of the ARQs bound to the card: their own
    private image is programmed again; once it is another project's
    (Glance's owner changed), it is not found, and the card is left
    as it is."""
    image = glance.images[card.image]
    image.update(owner='p1', visibility='private')
    _rebooted(card)
    assert [call[0] for call in card.driver.calls] == [card.image] * 2
    assert tp._bitstream(ctx, card.row) == card.image
    card.fpga.report()
    image.update(owner='another-project')
    with caplog.at_level(logging.WARNING):
        _rebooted(card)
    assert len(card.driver.calls) == 2
    warned = _warnings(caplog, 'cyborg.conductor.programming')
    assert len(warned) == 1 and card.arq in warned[0], warned
    assert (f'image {card.image} is not one project p1 may use'
            if ask == 'accel:bitstream_id'
            else '0 images in Glance have function id f-r') in warned[0]
    assert tp._bitstream(ctx, card.row) is None


@pytest.mark.parametrize('ask', ['accel:function_id'])
def test_a_holders_own_image_of_the_function_does_not_block_the_others(
        rconf, ctx, engine, glance, card, caplog, ask):
    """Holders of two projects, one of which has its own private image
    with the card's function id: looked up once, among the trusted
    owners' and the public images, the operator's image is programmed
    again for both (looked up per project, that holder's found two, and
    the whole card stayed without its image)."""
    other = _hold(engine, card, {'accel:function_id': 'f-r'},
                  project='tenant-attacker')
    glance.add_image(b'\x00evil' * 100, {'accel:function_id': 'f-r'},
                     owner='tenant-attacker', visibility='private')
    listed = len(glance.listings())
    with caplog.at_level(logging.WARNING):
        _rebooted(card)
    assert card.driver.calls[1:] == [
        (card.image, card.data, fake.NUM_ACCELERATORS)]
    assert tp._bitstream(ctx, card.row) == card.image
    assert not _warnings(caplog, 'cyborg.conductor.programming')
    assert seed.arq_rows(engine)[other].state == 'Bound'
    # One lookup: the public images (no trusted owner here), no
    # holder's own.
    assert [r.query.get('visibility') for r in
            glance.listings()[listed:]] == ['public']


def test_a_restored_image_one_holders_project_may_not_use_is_named(
        rconf, ctx, engine, glance, card, caplog):
    """An accel:bitstream_id: the image read once, then checked for the
    project of each holder; the one that may not use it is named."""
    glance.images[card.image].update(owner='p1', visibility='private')
    _hold(engine, card, {'accel:bitstream_id': card.image},
          project='p2')
    shown = [r for r in glance.requests
             if r.path == f'/v2/images/{card.image}']
    with caplog.at_level(logging.WARNING):
        _rebooted(card)
    assert len(card.driver.calls) == 1
    warned = _warnings(caplog, 'cyborg.conductor.programming')
    assert len(warned) == 1, warned
    assert f'image {card.image} is not one project p2 may use' in warned[0]
    assert len([r for r in glance.requests
                if r.path == f'/v2/images/{card.image}']) == len(shown) + 1
