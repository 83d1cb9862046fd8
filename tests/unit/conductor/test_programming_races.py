"""A card with VFs is programmed whole (through its PF), whichever of its
deployables asks: a programming and a bind on two deployables of one card
exclude each other as they do on one deployable.

The database-level tests run on SQLite and on the real servers, whose row
locks decide what a transaction waits for; each race is interleaved by
holding one transaction open (on its own thread, as in another process)
while the other runs."""

import contextlib
import datetime
import re
import threading
import uuid as uuidlib

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import health
from cyborg.conductor import placement_sync
from cyborg.conductor import programming
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import clock as clock_db
from cyborg.db.api import deployables as deployable_db
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.unit.conductor import test_programming as tp
from tests.unit.conductor import test_programming_take_out_race as tor

pconf, ctx, glance = tp.pconf, tp.ctx, tp.glance
placement_url = tp.placement_url

HOST = tp.HOST

# How long a test waits for another thread's step at most.
WAIT = 30


# SQLite, MariaDB and PostgreSQL.
engine = tor.engine


def _another_vf(engine, device, name=None, handles=1):
    """A second deployable (a VF) of ``device``'s card, with its handles;
    its provider made by the host's next sync."""
    name = name or f'{device.hostname}_vf{uuidlib.uuid4().hex[:6]}'
    with engine.begin() as c:
        cpid_id = c.execute(sa.select(models.ControlpathID.id).where(
            models.ControlpathID.device_id == device.device_id)).scalar()
        uuid = str(uuidlib.uuid4())
        deployable_id = c.execute(sa.insert(models.Deployable).values(
            uuid=uuid, name=name, num_accelerators=handles,
            device_id=device.device_id, driver_name='fake_driver',
            rp_uuid=inventory.provider_uuid(name))).inserted_primary_key[0]
        c.execute(sa.insert(models.Attribute).values(
            uuid=str(uuidlib.uuid4()), key='rc', value='FPGA',
            deployable_id=deployable_id))
        for index in range(handles):
            c.execute(sa.insert(models.AttachHandle).values(
                uuid=str(uuidlib.uuid4()), deployable_id=deployable_id,
                cpid_id=cpid_id, in_use=False, attach_type='PCI',
                attach_info=f'{{"vf": {index}}}'))
    return seed.Seeded(hostname=device.hostname, name=name,
                       rp_uuid=inventory.provider_uuid(name),
                       device_id=device.device_id,
                       deployable_id=deployable_id, deployable_uuid=uuid)


def _until(minutes=5):
    return (timeutils.utcnow() + datetime.timedelta(minutes=minutes)
            ).replace(microsecond=0)


def _new_context():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


def _claim(context, deployable_id, until):
    return db_api.write_retrying(context, deployable_db.claim_programming,
                                 context, deployable_id, until)


def _take(context, deployable_id, unless_programmed=True):
    return db_api.write_retrying(context, handle_db.take, context,
                                 deployable_id, unless_programmed)


def _count_held(context, deployable_id):
    return db_api.write_retrying(context, handle_db.count_held, context,
                                 deployable_id)


# A transaction InnoDB's monitor lists as waiting for a lock, and the
# session it runs in.
_INNODB_WAIT = re.compile(r'^LOCK WAIT .*?^\w+ thread id (\d+),',
                          re.MULTILINE | re.DOTALL)


def _waiting_for_a_lock(engine):
    """Whether a session of this test's database waits for a row lock
    (None where that cannot be seen: SQLite, whose one connection the
    waiting thread waits for), as the server sees it now.

    On MariaDB, from InnoDB's monitor (``SHOW ENGINE INNODB STATUS``),
    written when asked, and the sessions of ``processlist``: what
    ``information_schema.innodb_trx`` shows is a copy refreshed only when
    it was last read more than 0.1 s before, by any session of the
    server, so looks at it closer together than that (this test's, or
    another test's at the same time) never see a wait that began after
    the first."""
    if engine.dialect.name not in ('postgresql', 'mysql'):
        return None
    with engine.connect() as c:
        if engine.dialect.name == 'postgresql':
            return bool(c.scalar(sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE "
                "datname = current_database() AND "
                "wait_event_type = 'Lock'")))
        status = c.execute(sa.text('SHOW ENGINE INNODB STATUS')).one()
        sessions = [int(session) for transaction in
                    status.Status.split('\n---TRANSACTION ')[1:]
                    for session in _INNODB_WAIT.findall(transaction)]
        return bool(sessions) and bool(c.scalar(
            sa.text('SELECT count(*) FROM information_schema.processlist '
                    'WHERE id IN :sessions AND db = DATABASE()')
            .bindparams(sa.bindparam('sessions', expanding=True)),
            {'sessions': sessions}))


def _holding(engine, first, then):
    """``first(context)`` in a transaction held open on a thread of its
    own while ``then(context)`` starts on another; the first commits once
    the second waits for one of its locks or has ended (on SQLite, at
    once: its one connection is the first's until it commits).  Returns
    (what first returned, what then returned)."""
    results, errors = {}, []
    opened, commit = threading.Event(), threading.Event()

    def hold():
        context = _new_context()
        try:
            with db_api.writer.using(context):
                results['first'] = first(context)
                opened.set()
                if not commit.wait(WAIT):
                    raise AssertionError(
                        f'the second transaction was neither seen waiting '
                        f'for a lock nor ended within {WAIT} s')
        except Exception as exc:  # reported below, not lost in a thread
            errors.append(exc)
        finally:
            opened.set()

    def run_then():
        try:
            results['then'] = then(_new_context())
        except Exception as exc:
            errors.append(exc)

    holder = threading.Thread(target=hold)
    holder.start()
    assert opened.wait(WAIT)
    second = threading.Thread(target=run_then)
    second.start()
    waiting = threading.Event()
    while second.is_alive() and not waiting.is_set():
        seen = _waiting_for_a_lock(engine)
        if seen is None or seen:
            break
        waiting.wait(0.01)
    commit.set()
    holder.join(WAIT)
    second.join(WAIT)
    assert errors == []
    return results['first'], results['then']


def test_a_take_on_another_vf_of_a_card_being_programmed_takes_nothing(
        conf, engine):
    """The mark is on the deployable the programming asked for; a bind on
    another VF of the card read its own deployable's mark only, and took
    a VF while the card was rewritten."""
    card = seed.seed_device(engine, hostname=HOST, handles=1)
    vf = _another_vf(engine, card)
    context = _new_context()
    assert _claim(context, card.deployable_id, _until())
    assert _take(context, vf.deployable_id) is None
    assert deployable_db.being_programmed(context, vf.deployable_id)
    assert seed.handles_in_use(engine) == 0
    # A bind that programs the card takes its handle, and is refused by
    # the programming itself (below); once the mark is gone any takes.
    with engine.begin() as c:
        c.execute(sa.update(models.Deployable).values(
            programming_until=None))
    assert not deployable_db.being_programmed(context, vf.deployable_id)
    assert _take(context, vf.deployable_id) is not None


def test_one_programming_at_a_time_per_card(conf, engine):
    """Two programmings through two deployables of one card (an admin's
    through the PF, a bind's through a VF) each set their own mark, and
    both rewrote the card."""
    card = seed.seed_device(engine, hostname=HOST, handles=1)
    vf = _another_vf(engine, card)
    context = _new_context()
    until = _until()
    assert _claim(context, card.deployable_id, until)
    assert not _claim(context, vf.deployable_id, _until(6))
    assert deployable_db.card_programming(context, vf.deployable_id) == (
        card.deployable_uuid, until)
    with engine.connect() as c:
        assert c.execute(sa.select(models.Deployable.programming_until)
                         .where(models.Deployable.id == vf.deployable_id)
                         ).scalar() is None


def test_a_claim_waits_for_a_claim_on_another_vf_still_uncommitted(
        conf, engine):
    """Two claims on one card at once: the second waits for the first's
    transaction (the card's rows are locked), then finds its mark."""
    card = seed.seed_device(engine, hostname=HOST, handles=1)
    vf = _another_vf(engine, card)
    first, then = _holding(
        engine,
        lambda c: deployable_db.claim_programming(c, card.deployable_id,
                                                  _until()),
        lambda c: _claim(c, vf.deployable_id, _until(6)))
    assert (first, then) == (True, False)


def test_a_take_and_a_claim_on_one_card_exclude_each_other(conf, engine):
    """A claim not yet committed while a bind on another VF takes a
    handle: either the take finds the mark (it waited for the claim's
    commit: MariaDB), or the programming's count, made once its mark is
    committed, finds the handle (PostgreSQL, where the take read as of
    its statement) and the programming stops.  Never both go on."""
    card = seed.seed_device(engine, hostname=HOST, handles=1)
    vf = _another_vf(engine, card)
    claimed, taken = _holding(
        engine,
        lambda c: deployable_db.claim_programming(c, card.deployable_id,
                                                  _until()),
        lambda c: _take(c, vf.deployable_id))
    assert claimed
    held = _count_held(_new_context(), card.deployable_id)
    assert (taken is None, held) in ((True, 0), (False, 1))


@pytest.mark.parametrize('where', ['the same deployable', 'another VF'])
def test_a_programming_bind_s_count_leaves_the_free_handles_to_others(
        conf, engine, where):
    """A bind that programs reads its card and counts the card's taken
    handles in its PATCH's transaction (``arq_binding._refuse_in_use``),
    held open until it commits (Placement's answer, the PATCH's other
    ARQs).  The count share-locks the taken handles only: one that
    locked the free ones too (as a programming's own count,
    ``count_held``, does in a short transaction of its own) had the binds
    taking a handle of the card meanwhile pass them over (FOR UPDATE SKIP
    LOCKED) and find none free."""
    card = seed.seed_device(engine, hostname=HOST, handles=2)
    vf = _another_vf(engine, card, handles=2)
    other = card if where == 'the same deployable' else vf

    def programming_bind(context):
        seen = deployable_db.card_for_bind(context, card.deployable_id)
        handle = handle_db.take(context, card.deployable_id)
        return (handle is not None,
                handle_db.count_taken(context, seen.deployable_ids))

    counted, taken = _holding(engine, programming_bind,
                              lambda c: _take(c, other.deployable_id))
    assert counted == (True, 1)
    assert taken is not None, 'a free handle was locked by the count'
    assert seed.handles_in_use(engine) == 2


# -- a bind and a programming through another VF, end to end (SQLite, the
# real Placement, the agent's endpoint in this process) ---------------------

def _synced_vf(conf, db, device):
    vf = _another_vf(db, device)
    placement_sync.sync_host(conf, cyborg_context.get_admin_context(), HOST)
    return vf


def test_a_bind_on_another_vf_of_a_card_being_programmed_fails(
        pconf, ctx, db, glance):
    """Nova placed an instance on a VF of a card while an admin rewrote
    it through another deployable: the bind is refused, not bound."""
    device = tp._reported(pconf, db, handles=1)
    vf = _synced_vf(pconf, db, device)
    refused = []

    def bind_on_the_vf():
        with pytest.raises(exception.BindFailed) as caught:
            tp._bind(pconf, ctx, db, vf, {})
        refused.append(str(caught.value))

    tp._program_while(pconf, ctx, device, glance, bind_on_the_vf)
    assert len(refused) == 1
    assert 'is being programmed' in refused[0]
    assert seed.handles_in_use(db) == 0
    # Once it ends, the VF is bound as usual.
    assert tp._bind(pconf, ctx, db, vf, {}).state == 'Bound'


def test_a_programming_through_another_vf_of_a_card_being_programmed(
        pconf, ctx, db, glance):
    """A second programming of the card through another of its
    deployables is refused before anything is downloaded, saying which
    deployable the card is being programmed through."""
    device = tp._reported(pconf, db, handles=1)
    vf = _synced_vf(pconf, db, device)
    second = glance.add_image(b'second' * 10)
    refused = []

    def program_through_the_vf():
        with pytest.raises(exception.Conflict) as caught:
            programming.program_deployable(pconf, ctx, vf.deployable_uuid,
                                           second)
        refused.append(str(caught.value))

    tp._program_while(pconf, ctx, device, glance, program_through_the_vf)
    assert len(refused) == 1
    assert (f'is being programmed through deployable '
            f'{device.deployable_uuid} of the same card') in refused[0]
    assert len(glance.downloads()) == 1
    assert tp._bitstream(ctx, vf) is None


# -- a take-out that outlives OVERDUE_AFTER -----------------------------------

@pytest.fixture
def tconf(conf, engine, placement_url):
    """The conductor's configuration, with the real Placement."""
    placement_fixture.placement_conf(conf, placement_url)
    placement_client.reset_clients()
    return conf


def test_a_take_out_that_outlives_overdue_after_is_not_taken_again(
        tconf, engine, monkeypatch):
    """A conductor takes out a programming left overdue, and a step of
    its take-out (the health change's Placement sync, Placement hung)
    outlives OVERDUE_AFTER: the mark it moved on went overdue in turn,
    and another conductor took the card out a second time (its image
    forgotten again, a second fault reading, counted twice).  The live
    take-out keeps its mark ahead of the clock; only one whose conductor
    stopped goes overdue."""
    device = tp._reported(tconf, engine, handles=2,
                          traits={programming.TRAIT_ATTRIBUTE:
                                  tp.OLD_TRAIT})
    with engine.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(bitstream_id='left-behind',
                          programming_until=timeutils.utcnow()
                          - datetime.timedelta(seconds=1)))
    # Two processes share no lock.
    monkeypatch.setattr(programming, '_deployable_lock',
                        lambda _id: contextlib.nullcontext())
    monkeypatch.setattr(programming, '_KEEP_EVERY', 0.01)
    # The database's clock, which every conductor reads, moved on at will.
    ahead = [datetime.timedelta()]
    utcnow = clock_db.utcnow
    monkeypatch.setattr(clock_db, 'utcnow', lambda: utcnow() + ahead[0])
    # The first take-out hangs in its health change.
    in_health, release = threading.Event(), threading.Event()
    apply_readings = health.apply_readings
    first_thread = []

    def hanging(*args, **kwargs):
        if threading.current_thread() in first_thread:
            in_health.set()
            release.wait(WAIT)
        return apply_readings(*args, **kwargs)

    monkeypatch.setattr(health, 'apply_readings', hanging)
    # Each move of the mark, to see the first conductor's keep it ahead.
    marks, kept_ahead = [], threading.Event()
    set_until = deployable_db.set_programming_until

    def recording(context, deployable_id, until, was=None):
        moved = set_until(context, deployable_id, until, was=was)
        if moved and until is not None:
            marks.append(until)
            if ahead[0] and until > clock_db.utcnow():
                kept_ahead.set()
        return moved

    monkeypatch.setattr(deployable_db, 'set_programming_until', recording)
    abandoned = tp._programmings('abandoned')[0]
    results, errors = [], []

    def first():
        try:
            results.append(programming.take_out_overdue(tconf,
                                                        _new_context()))
        except Exception as exc:  # reported below, not lost in a thread
            errors.append(exc)

    thread = threading.Thread(target=first)
    first_thread.append(thread)
    thread.start()
    try:
        assert in_health.wait(WAIT)
        # Longer than OVERDUE_AFTER passes while it hangs.
        ahead[0] = datetime.timedelta(seconds=2 * programming.OVERDUE_AFTER)
        kept = kept_ahead.wait(WAIT)
        # Another conductor's periodic job finds nothing overdue.
        assert programming.take_out_overdue(tconf, _new_context()) == 0
        assert kept
    finally:
        release.set()
        thread.join(WAIT)
    assert errors == [] and results == [1]
    assert tp._programmings('abandoned')[0] == abandoned + 1
    assert tor.taken_out(engine, device)
