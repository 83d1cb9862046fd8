"""The stuck-bind check (``arq_binding.fail_stuck``) holds each bind to
its own deadline: its start plus the ``[DEFAULT]bind_timeout`` of the
conductor that started it (that many seconds in ``bind_timeout``,
written by the UPDATE that moves the ARQ to BindStarted, cleared when it
leaves it).  It failed any bind older than the checking conductor's
``bind_timeout``: with values that differ between conductors (a change
rolled out host by host, one raised for slow FPGA programming), a
conductor with a lower one failed binds another was still carrying.  A
bind without one recorded (a conductor of the previous release started
it) is held to the checker's, as before; one that finds the value an
earlier bind left (that release does not clear it) is held to it from
its own start, never failed sooner.

Two conductors' settings on SQLite, MariaDB and PostgreSQL against the
real (embedded) Placement; a bind that programs an FPGA end to end on
SQLite, with a recording Glance and the agent's endpoint in this
process."""

import datetime
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.conductor import arq_binding
from cyborg.conductor import glance as glance_client
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import clock as clock_db
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.unit.conductor import test_programming as tp

placement_url, pconf, ctx, glance, agent, device = (
    tp.placement_url, tp.pconf, tp.ctx, tp.glance, tp.agent, tp.device)

# The bind_timeout of a conductor raised for slow programming, and of one
# left at a lower value.
LONG, SHORT = 600, 60


@pytest.fixture(params=databases.KINDS)
def engine(request):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def conductor(host, bind_timeout, placement_url):
    """The settings of one conductor: its name and its bind_timeout."""
    conf = api_fixture.make_conf({(None, 'host'): host,
                                  (None, 'bind_timeout'): bind_timeout})
    placement_fixture.placement_conf(conf, placement_url)
    return conf


def passed(engine, arq_uuid, seconds):
    """Let ``seconds`` pass for the ARQ's bind: its start (and so its
    deadline) that much earlier."""
    arq = models.ExtARQ
    with engine.begin() as c:
        started = c.execute(sa.select(arq.bind_started_at)
                            .where(arq.uuid == arq_uuid)).scalar_one()
        c.execute(sa.update(arq).where(arq.uuid == arq_uuid).values(
            bind_started_at=started - datetime.timedelta(seconds=seconds)))


def _arqs(engine, ctx, count):
    profile = seed.seed_profile(engine, [{'resources:FPGA': str(count)}])
    return [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]


def _started_by(conf, ctx, device, arq_uuid, started):
    """The first transaction of a bind by the conductor of ``conf`` at
    ``started``: the ARQ in BindStarted, its slow work (programming, an
    mdev, a fabric attach) to come, as that conductor commits it."""
    bindings = {arq_uuid: {'hostname': device.hostname,
                           'device_rp_uuid': device.rp_uuid,
                           'instance_uuid': str(uuidlib.uuid4())}}
    asked = arq_binding._ask_allocations(conf, bindings)
    for answer in asked.values():
        answer.result(30)
    db_api.write_retrying(ctx, arq_binding._start, conf, ctx, bindings,
                          started, arq_binding._Known(asked))


def _ago(seconds):
    return clock_db.utcnow() - datetime.timedelta(seconds=seconds)


def _given(rows, uuid):
    """The time a bind has from its start."""
    return rows[uuid].bind_timeout


def _timed_out(seconds, host):
    return (f'bind did not finish within {seconds} seconds, the '
            f'[DEFAULT]bind_timeout of the conductor that started it '
            f'({host})')


def test_a_bind_is_failed_past_its_own_deadline_whoever_checks(
        engine, ctx, placement_url):
    """Conductor A (bind_timeout 600) carries a bind it started two
    minutes ago; conductor B (60) checks: the bind is A's for eight more
    minutes.  Once they have passed, B fails it, saying the time it had.
    A bind B started two minutes ago is past its own deadline: A's check
    fails it, though A's bind_timeout is longer."""
    slow = conductor('conductor-a', LONG, placement_url)
    quick = conductor('conductor-b', SHORT, placement_url)
    device = seed.seed_device(engine, handles=4)
    carried, overdue, hurried = _arqs(engine, ctx, 3)
    _started_by(slow, ctx, device, carried, _ago(120))
    _started_by(slow, ctx, device, overdue, _ago(LONG + 60))
    _started_by(quick, ctx, device, hurried, _ago(120))
    rows = seed.arq_rows(engine)
    assert [_given(rows, uuid) for uuid in (carried, overdue, hurried)] == [
        LONG, LONG, SHORT]

    assert arq_binding.fail_stuck(slow, ctx) == 2
    assert arq_binding.fail_stuck(quick, ctx) == 0
    rows = seed.arq_rows(engine)
    assert rows[carried].state == 'BindStarted'
    assert {uuid: (rows[uuid].state, rows[uuid].bind_failure_reason,
                   rows[uuid].bind_timeout)
            for uuid in (overdue, hurried)} == {
        overdue: ('BindFailed', _timed_out(LONG, 'conductor-a'), None),
        hurried: ('BindFailed', _timed_out(SHORT, 'conductor-b'), None)}

    # Seven minutes later: its deadline a minute ahead, then behind.
    passed(engine, carried, 420)
    assert arq_binding.fail_stuck(quick, ctx) == 0
    passed(engine, carried, 120)
    assert arq_binding.fail_stuck(quick, ctx) == 1
    row = seed.arq_rows(engine)[carried]
    assert (row.state, row.bind_failure_reason) == (
        'BindFailed', _timed_out(LONG, 'conductor-a'))


def _moved_by_previous_release(engine, arq_uuid, started):
    """What a conductor of the previous release writes, which knows no
    deadline: an unbind of the ARQ (it clears the bind's columns but
    ``bind_timeout``), then a bind of it started at ``started``."""
    arq = models.ExtARQ
    with engine.begin() as c:
        c.execute(sa.update(arq).where(arq.uuid == arq_uuid).values(
            state='Unbound', hostname=None, device_rp_uuid=None,
            instance_uuid=None, deployable_id=None, attach_handle_id=None,
            bind_started_at=None, bind_id=None))
        c.execute(sa.update(arq).where(arq.uuid == arq_uuid).values(
            state='BindStarted', hostname='host1',
            instance_uuid=str(uuidlib.uuid4()), bind_started_at=started,
            bind_owner='conductor-old', bind_id=str(uuidlib.uuid4())))


def test_a_bind_with_no_deadline_of_its_own_is_held_to_the_checker_s(
        engine, ctx, placement_url):
    """Binds a conductor of the previous release started, two minutes
    and half a minute ago: a checker with bind_timeout 60 fails the
    first, as before.  So with an ARQ whose earlier bind, a new
    conductor's two hours ago, that release ended and started again: the
    bind_timeout that bind left (60 s) counts from this one's start."""
    quick = conductor('conductor-b', SHORT, placement_url)
    device = seed.seed_device(engine, handles=4)
    old, fresh, old_again, fresh_again = _arqs(engine, ctx, 4)
    for uuid in (old_again, fresh_again):
        _started_by(quick, ctx, device, uuid, _ago(7200))
    for uuid, seconds in ((old, 120), (fresh, 30), (old_again, 120),
                          (fresh_again, 30)):
        _moved_by_previous_release(engine, uuid, _ago(seconds))
    rows = seed.arq_rows(engine)
    assert rows[old].bind_timeout is None
    assert rows[fresh_again].bind_timeout == SHORT

    assert arq_binding.fail_stuck(quick, ctx) == 2
    rows = seed.arq_rows(engine)
    assert {uuid: (row.state, row.bind_failure_reason)
            for uuid, row in rows.items()} == {
        old: ('BindFailed', f'bind did not finish within {SHORT} seconds'),
        old_again: ('BindFailed', _timed_out(SHORT, 'conductor-old')),
        fresh: ('BindStarted', None), fresh_again: ('BindStarted', None)}


def test_a_bind_after_one_the_previous_release_ended_has_its_own_time(
        engine, ctx, placement_url):
    """A new conductor (bind_timeout 60) started a bind 55 s ago, which
    a conductor of the previous release unbound, then bound the ARQ again
    a second ago (Nova's reschedule), leaving the bind_timeout recorded.
    That bind is failed neither ten seconds later nor a second before 60
    s have passed since its own start (it was failed ten seconds after it
    started when the deadline itself was recorded), by a checker with a
    higher bind_timeout or the same; once they have, by either."""
    slow = conductor('conductor-a', LONG, placement_url)
    quick = conductor('conductor-b', SHORT, placement_url)
    device = seed.seed_device(engine, handles=4)
    (uuid,) = _arqs(engine, ctx, 1)
    _started_by(quick, ctx, device, uuid, _ago(55))
    _moved_by_previous_release(engine, uuid, _ago(1))
    passed(engine, uuid, 10)
    assert [arq_binding.fail_stuck(c, ctx) for c in (slow, quick)] == [0, 0]
    passed(engine, uuid, SHORT - 12)
    assert [arq_binding.fail_stuck(c, ctx) for c in (slow, quick)] == [0, 0]
    assert seed.arq_rows(engine)[uuid].state == 'BindStarted'
    passed(engine, uuid, 2)
    assert arq_binding.fail_stuck(slow, ctx) == 1
    row = seed.arq_rows(engine)[uuid]
    assert (row.state, row.bind_failure_reason) == (
        'BindFailed', _timed_out(SHORT, 'conductor-old'))


# -- a bind that programs an FPGA, end to end (SQLite) -----------------------

def _checked_while_downloading(db, check, seconds):
    """A Glance download that, before it starts, lets ``seconds`` pass
    for the bind downloading and runs ``check()``: [(the ARQ's state,
    the time its bind has), what ``check`` returned]."""
    download = glance_client.download
    seen = []

    def checked_then_downloaded(conf, meta):
        uuid, = [uuid for uuid, row in seed.arq_rows(db).items()
                 if row.state == 'BindStarted']
        rows = seed.arq_rows(db)
        seen.append((rows[uuid].state, _given(rows, uuid)))
        passed(db, uuid, seconds)
        seen.append(check())
        return download(conf, meta)
    return checked_then_downloaded, seen


def test_a_programming_bind_is_its_conductor_s_until_its_deadline(
        pconf, ctx, db, agent, device, glance, placement_url, monkeypatch):
    """A bind whose image still downloads a minute after it started (its
    conductor's bind_timeout: 240 s) is left alone by a conductor whose
    bind_timeout is 30 s; it ends Bound, its deadline gone with
    BindStarted."""
    quick = conductor('conductor-b', 30, placement_url)
    image = glance.add_image(b'\x00slow' * 100)
    download, seen = _checked_while_downloading(
        db, lambda: arq_binding.fail_stuck(quick, ctx), 60)
    monkeypatch.setattr(glance_client, 'download', download)
    row = tp._bind(pconf, ctx, db, device, {'accel:bitstream_id': image})
    assert seen == [('BindStarted', pconf.bind_timeout), 0]
    assert (row.state, row.bind_timeout) == ('Bound', None), \
        row.bind_failure_reason
    assert tp._loaded(agent) == image


def test_a_programming_bind_failed_past_its_deadline_programs_nothing(
        pconf, ctx, db, agent, device, glance, placement_url, monkeypatch):
    """Past its own deadline, a bind still downloading is failed by any
    conductor's check, one with a longer bind_timeout too.  Its
    conductor, carrying on, finds the ARQ failed: it programs nothing,
    and the ARQ keeps the check's reason, its handle free."""
    slow = conductor('conductor-a', LONG, placement_url)
    image = glance.add_image(b'\x00late' * 100)
    download, seen = _checked_while_downloading(
        db, lambda: arq_binding.fail_stuck(slow, ctx),
        pconf.bind_timeout + 1)
    monkeypatch.setattr(glance_client, 'download', download)
    row = tp._bind(pconf, ctx, db, device, {'accel:bitstream_id': image})
    assert seen == [('BindStarted', pconf.bind_timeout), 1]
    assert (row.state, row.bind_failure_reason) == (
        'BindFailed', _timed_out(pconf.bind_timeout, pconf.host))
    assert row.attach_handle_id is None and seed.handles_in_use(db) == 0
    assert tp._loaded(agent) is None
