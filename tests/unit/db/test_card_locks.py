"""The row locks a programming's claim on a card (``deployables.
claim_programming``, through ``programming._claimed``) takes, against a
bind's takes (``attach_handles.take``) and a health write (the host's
row, then a deployable's): no wait on another host's card, and no lock
cycle, on MariaDB and PostgreSQL, whose row locks decide what a
transaction waits for.

Each transaction runs raw (no ``write_retrying``), on a thread of its
own as in another process, so that a deadlock shows as DBDeadlock
instead of being retried; a step that must wait, or must not, is told
by the server's own view of its sessions (a lock wait), not by time."""

import datetime
import threading
import types

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.conductor import programming
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_programming_races as races

# How long a test waits for another thread's step at most.
WAIT = 30


@pytest.fixture(params=['mysql', 'postgresql'])
def engine(request, conf):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _until():
    return (timeutils.utcnow() + datetime.timedelta(minutes=5)).replace(
        microsecond=0)


def _start(work, results, key):
    """``work(context)`` in a transaction of its own on a new thread; its
    result (or the exception it raised) in ``results[key]``."""
    def run():
        context = races._new_context()
        try:
            with db_api.writer.using(context):
                results[key] = work(context)
        except Exception as exc:  # checked by the test, not lost
            results[key] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _waits(engine, thread):
    """Whether ``thread`` waits for a row lock before it ends."""
    pause = threading.Event()
    for _ in range(WAIT * 100):
        if not thread.is_alive():
            return False
        if races._waiting_for_a_lock(engine):
            return True
        pause.wait(0.01)
    raise AssertionError('the transaction neither ended nor waited')


def _join(*threads):
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()


def _host(engine, hostname):
    with engine.begin() as c:
        c.execute(sa.insert(models.Host).values(hostname=hostname,
                                                placement_synced=True))


def test_a_take_does_not_wait_for_a_claim_on_another_host(conf, engine):
    """A claim on a card of host h2 not yet committed: a take on a card
    of host h1 goes on.  MariaDB read every marked deployable of the
    database for the take's check of its own card, locking them and the
    gaps between, and waited for the claim's mark."""
    card = seed.seed_device(engine, hostname='h1', handles=1)
    other = seed.seed_device(engine, hostname='h2', handles=1)
    results, claimed, commit = {}, threading.Event(), threading.Event()

    def claim(context):
        try:
            return deployable_db.claim_programming(
                context, other.deployable_id, _until())
        finally:
            claimed.set()
            commit.wait(WAIT)

    holder = _start(claim, results, 'claim')
    assert claimed.wait(WAIT)
    taker = _start(
        lambda c: handle_db.take(c, card.deployable_id, True) is not None,
        results, 'take')
    waited = _waits(engine, taker)
    commit.set()
    _join(holder, taker)
    assert not waited
    assert results == {'claim': True, 'take': True}


def test_a_bind_on_two_cards_and_a_claim_on_the_second(conf, engine):
    """A bind takes a handle on card A, then one on a VF of card B, in one
    transaction; between the two a programming claims card B (through
    its PF).  The claim does not wait for the bind (they share no row),
    and the bind's second take finds the claim's mark.  On MariaDB the
    claim waited for the first take's locks on the marked rows of the
    whole database, then the second take for the claim's: a deadlock."""
    a = seed.seed_device(engine, hostname='h1', handles=1)
    b = seed.seed_device(engine, hostname='h1', handles=1)
    b_vf = races._another_vf(engine, b)
    # A programming under way on a card elsewhere.
    elsewhere = seed.seed_device(engine, hostname='h2', handles=1)
    with engine.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == elsewhere.deployable_id)
                  .values(programming_until=_until()))
    results, took_a, go_on = {}, threading.Event(), threading.Event()

    def bind(context):
        try:
            first = handle_db.take(context, a.deployable_id, True)
        finally:
            took_a.set()
        go_on.wait(WAIT)
        second = handle_db.take(context, b_vf.deployable_id, True)
        return first is not None, second is not None

    binder = _start(bind, results, 'bind')
    assert took_a.wait(WAIT)
    claimer = _start(
        lambda c: deployable_db.claim_programming(c, b.deployable_id,
                                                  _until()),
        results, 'claim')
    claim_waited = _waits(engine, claimer)
    go_on.set()
    _join(binder, claimer)
    assert results == {'bind': (True, False), 'claim': True}
    assert not claim_waited


def test_a_claim_and_a_health_write_on_a_vf(conf, engine):
    """A health write locks the host's row, then writes a VF's; a claim
    on the card (through its PF) meanwhile locks the host's row first
    too, and waits for it holding nothing of the card.  It locked every
    deployable of the card first, then waited for the host's row, while
    the health write waited for the VF's: a deadlock."""
    card = seed.seed_device(engine, hostname='h1', handles=1)
    vf = races._another_vf(engine, card)
    _host(engine, 'h1')
    target = types.SimpleNamespace(
        deployable_id=card.deployable_id,
        deployable_uuid=card.deployable_uuid, hostname='h1')
    until = _until()
    results, locked, go_on = {}, threading.Event(), threading.Event()

    def health(context):
        try:
            assert host_db.lock(context, 'h1') is not None
        finally:
            locked.set()
        go_on.wait(WAIT)
        context.session.execute(
            sa.update(models.Deployable)
            .where(models.Deployable.id == vf.deployable_id)
            .values(health_reason='overheated'))
        return 'written'

    def claim(context):
        programming._claimed(context, target, until)
        return 'claimed'

    writer = _start(health, results, 'health')
    assert locked.wait(WAIT)
    claimer = _start(claim, results, 'claim')
    # The claim waits for the host's row (the write below goes on once
    # it does); without the host's row locked first, it held the card's.
    _waits(engine, claimer)
    go_on.set()
    _join(writer, claimer)
    assert results == {'health': 'written', 'claim': 'claimed'}
    d = models.Deployable
    with engine.connect() as c:
        assert c.scalar(sa.select(d.health_reason).where(
            d.id == vf.deployable_id)) == 'overheated'
        assert c.scalar(sa.select(d.programming_until).where(
            d.id == card.deployable_id)) == until


def test_a_too_long_function_id_s_message_counts_the_trait():
    """The limit is on the trait built from the id (upper-cased: 'ß'
    makes 'SS'), not a fixed number of characters of the id: an id of
    200 'ß' is refused though shorter than any fixed id limit."""
    function_id = '\u00df' * 200
    message = inventory.function_trait_problem(function_id)
    trait = len(inventory.function_trait(function_id))
    assert message.endswith(
        f'it makes a trait of {trait} characters, Placement takes at '
        f'most {inventory.MAX_TRAIT_LENGTH}')
    assert 'accel:function_id has at most' not in message
