"""A numbered health reading is applied once, whichever conductors serve
its sends: the highest number applied per host and agent health monitor
(``sender``) is kept in the database (``health_senders``), read and moved
on in the transaction that applies the readings, under the host's row
lock.

Each conductor here is a copy of ``cyborg.conductor.health`` of its own
(as another conductor process has), sharing the database: a conductor
remembered the numbers in its memory, so a send that timed out and was
delivered late to one conductor and its re-send answered by another (or
by one restarted in between) were both applied: the one transient fault
counted twice (a device taken out sooner), a transition and its
notification made twice.

The tests run on SQLite and on the real servers; the race of two
conductors is interleaved by holding the first one's transaction open
(on its own thread) while the second starts."""

import datetime
import importlib.util
import itertools
import threading

import pytest
import requests
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.common import states
from cyborg.conductor import health
from cyborg.conductor import hosts
from cyborg.conductor import inventory_apply
from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf
from tests.fixtures.placement import placement  # noqa: F401

HOST, OTHER = 'host1', 'host2'
SENDER = 'b1946ac92492d2347c6235b4d2611184'
# seed.seed_device's card.
KEY = 'PCI:0000:0c:00.0'
# How long a test waits for another thread's step at most.
WAIT = 30

_COPIES = itertools.count()


def _conductor():
    """A fresh copy of ``cyborg.conductor.health``: another conductor's
    (or a restarted one's) module, with a memory of its own."""
    spec = importlib.util.spec_from_file_location(
        f'_health_conductor_{next(_COPIES)}', health.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=databases.KINDS)
def engine(request, conf):
    # Below the threshold: a fault counted twice shows in the count,
    # and no Placement sync is due.
    conf.set_override('suspect_threshold', 10, group='health')
    if request.param == 'sqlite':
        yield request.getfixturevalue('db')
        return
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _host(engine, hostname=HOST):
    with engine.begin() as c:
        c.execute(sa.insert(models.Host).values(
            hostname=hostname, placement_synced=True,
            last_report_at=models._now()))
    return seed.seed_device(engine, hostname=hostname, handles=1)


def _fault(seq, key=KEY):
    return {'device': key, 'severity': states.TRANSIENT,
            'reason': 'PCIe link retrained', 'deployable': None,
            'source': 'aer', 'code': 'aer:nonfatal', 'event': True,
            'seq': seq}


def _report(*seqs, sender=SENDER):
    return {'full': False, 'sender': sender,
            'readings': [_fault(seq) for seq in seqs]}


def _send(conductor, conf, report, hostname=HOST):
    return conductor.handle_report(
        conf, cyborg_context.get_admin_context(), hostname,
        report)['accepted']


def _device(engine, hostname=HOST):
    """(health, health_faults) of the host's device."""
    d = models.Device
    with engine.connect() as c:
        return tuple(c.execute(sa.select(d.health, d.health_faults)
                               .where(d.hostname == hostname)).one())


def _senders(engine, hostname=HOST):
    """{sender: highest number applied} the database keeps for a host."""
    s = models.HealthSender
    with engine.connect() as c:
        return dict(c.execute(sa.select(s.sender, s.seq)
                              .where(s.hostname == hostname)).all())


def test_one_report_delivered_to_two_conductors_is_applied_once(
        conf, engine):
    _host(engine)
    first, second = _conductor(), _conductor()
    assert _send(first, conf, _report(1)) == 1
    assert _device(engine) == (states.SUSPECT, 1)
    # The send that timed out, delivered late to another conductor.
    assert _send(second, conf, _report(1)) == 0
    assert _device(engine) == (states.SUSPECT, 1)
    assert _senders(engine) == {SENDER: 1}


def test_a_re_send_with_new_readings_applies_only_those(conf, engine):
    """The agent's re-send carries the readings of the send that timed
    out and those it queued since; the send that timed out reaches
    another conductor first."""
    _host(engine)
    first, second, third = _conductor(), _conductor(), _conductor()
    assert _send(first, conf, _report(1, 2)) == 2
    assert _device(engine) == (states.SUSPECT, 2)
    assert _send(second, conf, _report(1, 2, 3)) == 1
    assert _device(engine) == (states.SUSPECT, 3)
    assert _send(third, conf, _report(2, 3)) == 0
    assert _device(engine) == (states.SUSPECT, 3)
    assert _senders(engine) == {SENDER: 3}


def test_a_late_delivery_after_a_restart_is_left_out(conf, engine):
    _host(engine)
    assert _send(_conductor(), conf, _report(1)) == 1
    assert _send(_conductor(), conf, _report(2)) == 1
    assert _device(engine) == (states.SUSPECT, 2)
    # The conductor restarted (its memory empty); the first send is
    # delivered now.
    restarted = _conductor()
    assert _send(restarted, conf, _report(1)) == 0
    assert _device(engine) == (states.SUSPECT, 2)
    # Another host's numbers are its own, and so are a new monitor's (the
    # agent restarted: its numbers start over).
    _host(engine, OTHER)
    other = {'full': False, 'sender': SENDER,
             'readings': [_fault(1)]}
    assert _send(restarted, conf, other, hostname=OTHER) == 1
    assert _device(engine, OTHER) == (states.SUSPECT, 1)
    assert _send(restarted, conf, _report(1, sender='new-monitor')) == 1
    assert _device(engine) == (states.SUSPECT, 3)


def test_a_host_keeps_the_senders_moved_on_last(conf, engine):
    _host(engine)
    conductor = _conductor()
    senders = [f'monitor-{n}' for n in range(health.SENDERS_KEPT + 2)]
    for sender in senders:
        assert _send(conductor, conf, _report(1, sender=sender)) == 1
    # The first one moved on again: it is among the last moved on.
    assert _send(conductor, conf, _report(2, sender=senders[0])) == 1
    assert _senders(engine) == dict(
        [(senders[0], 2)] +
        [(s, 1) for s in senders[-(health.SENDERS_KEPT - 1):]])


def _waiting_for_a_lock(engine):
    """Whether a session of this test's database waits for a row lock.
    On MariaDB a locking read of one row by a unique key waits in the
    optimiser's first look at the table ('Statistics'), before InnoDB
    lists its transaction as waiting: a statement FOR UPDATE still
    running counts too (while the first conductor holds the host's row,
    it cannot end)."""
    query = {
        'postgresql': "SELECT count(*) FROM pg_stat_activity WHERE "
                      "datname = current_database() AND "
                      "wait_event_type = 'Lock'",
        'mysql': "SELECT count(*) FROM information_schema.processlist p "
                 "LEFT JOIN information_schema.innodb_trx t "
                 "ON p.id = t.trx_mysql_thread_id "
                 "WHERE p.db = DATABASE() AND p.id != CONNECTION_ID() "
                 "AND (t.trx_state = 'LOCK WAIT' OR "
                 "(p.command = 'Query' AND p.info LIKE '%FOR UPDATE'))",
    }[engine.dialect.name]
    with engine.connect() as c:
        return bool(c.scalar(sa.text(query)))


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_two_conductors_at_once_apply_a_report_once(conf, kind):
    """The first conductor's transaction is held open once it has
    applied the report (its locks taken, nothing committed); the
    second, serving the same report, waits for its locks, then finds
    the report applied."""
    conf.set_override('suspect_threshold', 10, group='health')
    with api_fixture.database_in_use(kind) as engine:
        _host(engine)
        first, second = _conductor(), _conductor()
        applied, commit = threading.Event(), threading.Event()
        written = first._write

        def write_and_hold(*args, **kwargs):
            result = written(*args, **kwargs)
            applied.set()
            commit.wait(WAIT)
            return result

        first._write = write_and_hold
        accepted, errors = {}, []

        def serve(name, conductor):
            try:
                accepted[name] = _send(conductor, conf, _report(1, 2))
            except Exception as exc:  # reported below, not lost
                errors.append(exc)
            finally:
                applied.set()

        holder = threading.Thread(target=serve, args=('first', first))
        holder.start()
        assert applied.wait(WAIT)
        late = threading.Thread(target=serve, args=('second', second))
        late.start()
        pause = threading.Event()
        for _ in range(WAIT * 100):
            if not late.is_alive() or _waiting_for_a_lock(engine):
                break
            pause.wait(0.01)
        # It waits for the first one's locks (not done yet).
        assert late.is_alive(), (accepted, errors)
        commit.set()
        holder.join(WAIT)
        late.join(WAIT)
        assert errors == []
        assert accepted == {'first': 2, 'second': 0}
        assert _device(engine) == (states.SUSPECT, 2)
        assert _senders(engine) == {SENDER: 2}


def test_a_forgotten_host_goes_with_its_senders(
        conf, db, admin_context, placement):  # noqa: F811
    """``cyborg-manage host forget``: the host's rows go, its senders'
    numbers with them; another host's stay."""
    pf.placement_conf(conf, placement.url)
    for host in (HOST, OTHER):
        requests.post(placement.url + '/resource_providers',
                      json={'name': host}, headers=pf.HEADERS, timeout=10)
        inventory_apply.handle_report(
            conf, admin_context, host,
            cf.report([cf.device(host, '0000:81:00.0')]))
        report = {'full': False, 'sender': SENDER,
                  'readings': [_fault(1, key='PCI:0000:81:00.0')]}
        assert _send(_conductor(), conf, report, hostname=host) == 1
        assert _senders(db, host) == {SENDER: 1}
    with db.begin() as c:
        c.execute(sa.update(models.Host).where(
            models.Host.hostname == HOST).values(
                last_report_at=models._now() - datetime.timedelta(hours=1)))
    hosts.forget(conf, admin_context, HOST)
    assert _senders(db, HOST) == {}
    assert _senders(db, OTHER) == {SENDER: 1}
