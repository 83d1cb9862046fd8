"""A host's writers against each other on the real MariaDB and PostgreSQL,
whose row locks and snapshots decide what each transaction reads and
waits for: reports, binds (which never lock the host's row), a host's
forgetting, the removal of vanished hardware, device status changes,
attribute writes and health writes (the host's row, then its devices').

- A report read an attach handle free and deleted it (DELETE by uuid, no
  guard) after a bind had taken it: the ARQ stayed Bound with no handle
  (ON DELETE SET NULL).  Its delete is guarded on the handle being free,
  and the report planned again; so is a host's forgetting, and the
  removal of a vanished deployable.
- On MariaDB (REPEATABLE READ) a full report read the host's row without
  a lock before locking it: its snapshot was fixed before the lock
  waited, and it planned from rows older than what it had waited for.
- A device's status change wrote the device's row, then locked the
  host's; an attribute's insert share-locked its deployable (MariaDB's
  foreign key check), then wrote the host's row: each deadlocked with a
  health write, which locks the host's row first.

Each transaction runs on a thread of its own, as in another process;
those racing a lock run raw (no ``write_retrying``), so that a deadlock
shows as DBDeadlock instead of being retried.  A step that must wait is
told by the server's own view of its sessions (a lock wait)."""

import threading
import types

import pytest
import sqlalchemy as sa
from oslo_utils import uuidutils

from cyborg.common import exception
from cyborg.common import states
from cyborg.conductor import attributes
from cyborg.conductor import device_status
from cyborg.conductor import hosts
from cyborg.conductor import inventory_apply
from cyborg.conductor import programming
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from cyborg.drivers import base
from cyborg.objects import inventory
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import conductor as cf
from tests.unit.conductor import test_programming_races as races
from tests.unit.db import test_card_locks as card_locks

HOST = 'host1'
PF = '0000:5e:00.0'
VFS = ['0000:5e:01.0', '0000:5e:01.1']
# How long a test waits for another thread's step at most.
WAIT = 30
# Seconds between two looks for a lock wait (what the server shows now:
# test_programming_races._waiting_for_a_lock).
POLL = 0.01


@pytest.fixture(params=['mysql', 'postgresql'])
def engine(request, conf):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _nic(vfs, pf=PF):
    return inventory.DriverDevice(
        type='NIC', vendor='8086', model='E810',
        controlpath_id=inventory.ControlPathID(pf),
        std_board_info={'product_id': '1592'},
        deployables=[inventory.Deployable(
            name=f'{HOST}_{pf}', num_accelerators=len(vfs),
            attributes={'rc': 'CUSTOM_NIC_VF'},
            attach_handles=[base.pci_handle(vf, 'PCI') for vf in vfs],
            driver_name='intel_nic_driver')])


def _store(conf, context, report, held=None, hostname=HOST):
    """A report's transaction (``inventory_apply._write``) as a conductor
    runs it; ``held``: what Placement answered about vanished providers
    (none asked here)."""
    parsed = inventory_apply._parse(hostname, report)
    return db_api.write_retrying(
        context, inventory_apply._write, conf, context, hostname, report,
        parsed, {} if held is None else held)


def _bind(engine):
    """A bind on another conductor: a thread that takes a handle of the
    host's deployable and makes an ARQ Bound with it, in a transaction of
    its own, and commits.  Returns the thread's results: {'handle': the
    handle taken, 'arq': the ARQ's uuid}."""
    seed.seed_profile(engine, [{'resources:CUSTOM_NIC_VF': '1'}])
    with engine.connect() as c:
        deployable_id = c.scalar(sa.select(models.Deployable.id))
        profile_id = c.scalar(sa.select(models.DeviceProfile.id))
    results = {}

    def bind():
        context = races._new_context()
        with db_api.writer.using(context):
            handle = handle_db.take(context, deployable_id, True)
            arq_uuid = uuidutils.generate_uuid()
            arq_db.create_many(context, [{
                'uuid': arq_uuid, 'state': states.BOUND,
                'device_profile_id': profile_id,
                'device_profile_group_id': 0, 'project_id': 'p1',
                'deployable_id': deployable_id,
                'attach_handle_id': handle.id,
                'instance_uuid': uuidutils.generate_uuid(),
                'hostname': HOST}])
        results.update(handle=handle, arq=arq_uuid)

    return bind, results


def _binding_before_the_write(monkeypatch, bind):
    """Run ``bind`` (to its commit) when the transaction that read the
    host's rows first writes them (``inventory.write``): after its read,
    before its deletes."""
    real = inventory_db.write
    done = []

    def write(context, add, update, delete):
        if not done:
            done.append(True)
            thread = threading.Thread(target=bind)
            thread.start()
            thread.join(WAIT)
            assert not thread.is_alive()
        return real(context, add, update, delete)

    monkeypatch.setattr(inventory_db, 'write', write)
    return done


def _arq_and_handle(engine, results):
    """(the ARQ's (state, attach_handle_id), the handle's (in_use, gone)
    or None when it is gone)."""
    a, h = models.ExtARQ, models.AttachHandle
    with engine.connect() as c:
        arq = tuple(c.execute(sa.select(a.state, a.attach_handle_id).where(
            a.uuid == results['arq'])).one())
        handle = c.execute(sa.select(h.in_use, h.gone).where(
            h.id == results['handle'].id)).first()
    return arq, handle and tuple(handle)


def test_a_report_keeps_a_vanished_handle_a_bind_took_meanwhile(
        conf, engine, monkeypatch):
    """A delta drops the VF a bind takes between the report's read and
    its delete: the handle is kept, in use and marked gone (as a vanished
    handle in use is), and the digest stored is not the agent's, so a
    full report follows and drops it once its ARQ lets go."""
    context = races._new_context()
    first = _store(conf, context, cf.report([_nic(VFS)]))
    bind, results = _bind(engine)
    ran = _binding_before_the_write(monkeypatch, bind)
    delta = cf.report([_nic(VFS[1:])], first.digest, full=False)
    outcome = _store(conf, context, delta)
    assert ran
    # The bind took the first free handle: the VF that vanished.
    assert results['handle'].uuid == inventory_apply.inventory_plan \
        .attach_handle_uuid(HOST, f'{HOST}_{PF}',
                            base.pci_handle(VFS[0], 'PCI').key())
    assert _arq_and_handle(engine, results) == (
        (states.BOUND, results['handle'].id), (True, True))
    assert outcome.digest != delta['digest']


def test_a_report_keeps_a_vanished_card_a_bind_took_meanwhile(
        conf, engine, monkeypatch):
    """A full report drops the card (Placement holds no allocation on
    it) while a bind takes one of its handles: the card is kept as gone,
    its device lost, the ARQ's handle with them."""
    context = races._new_context()
    _store(conf, context, cf.report([_nic(VFS)]))
    bind, results = _bind(engine)
    ran = _binding_before_the_write(monkeypatch, bind)
    rp = inventory.provider_uuid(f'{HOST}_{PF}')
    _store(conf, context, cf.report([]), held={rp: False})
    assert ran
    assert _arq_and_handle(engine, results) == (
        (states.BOUND, results['handle'].id), (True, False))
    d, dep = models.Device, models.Deployable
    with engine.connect() as c:
        assert c.execute(sa.select(dep.gone)).scalars().all() == [True]
        assert c.execute(sa.select(d.health)).scalars().all() == [
            states.LOST]


def test_forgetting_a_host_refuses_a_handle_a_bind_took_meanwhile(
        conf, engine, monkeypatch):
    """The host's rows are checked unheld, then a bind takes a handle
    before they are deleted: the forgetting is refused (409), nothing
    deleted."""
    context = races._new_context()
    _store(conf, context, cf.report([_nic(VFS)]))
    bind, results = _bind(engine)
    ran = _binding_before_the_write(monkeypatch, bind)
    last = host_db.get(context, HOST)['last_report_at']
    with pytest.raises(exception.Conflict, match='still serves'):
        db_api.write_retrying(context, hosts._forget_rows, conf, context,
                              HOST, last)
    assert ran
    assert _arq_and_handle(engine, results) == (
        (states.BOUND, results['handle'].id), (True, False))


def test_vanished_hardware_is_not_removed_while_a_handle_is_in_use(
        conf, engine):
    """A deployable kept as gone whose allocations ended is removed with
    its device (``delete_gone``), but not while an ARQ still holds one of
    its handles: the removal keeps it, and that handle, for a later
    run (its free handles go)."""
    card = seed.seed_device(engine, hostname=HOST, handles=2)
    h = models.AttachHandle
    with engine.begin() as c:
        c.execute(sa.update(models.Deployable).values(gone=True))
        c.execute(sa.update(models.Device).values(health=states.LOST))
        held = c.scalar(sa.select(sa.func.min(h.id)))
        c.execute(sa.update(h).where(h.id == held).values(in_use=True))
    context = races._new_context()
    deleted = db_api.write_retrying(
        context, inventory_db.delete_gone, context, [card.deployable_uuid],
        [card.device_uuid])
    assert deleted == []
    with engine.connect() as c:
        assert c.scalar(sa.select(sa.func.count()).select_from(
            models.Deployable)) == 1
        assert c.execute(sa.select(h.id)).scalars().all() == [held]
    with engine.begin() as c:
        c.execute(sa.update(h).values(in_use=False))
    assert db_api.write_retrying(
        context, inventory_db.delete_gone, context, [card.deployable_uuid],
        [card.device_uuid]) == [card.deployable_uuid, card.device_uuid]


def test_a_full_report_reads_what_it_waited_for(conf, engine):
    """An operator puts a card in maintenance (holding the host's row)
    while a full report that no longer lists it waits for the host's
    row: the report, once it has the row, reads the card in maintenance
    and keeps it (it comes back in that status), as it would had the two
    come one after the other.  On MariaDB the report read the host's row
    before locking it, which fixed its snapshot: it read the card as
    enabled, and deleted it."""
    context = races._new_context()
    a, b = '0000:5e:00.0', '0000:af:00.0'
    _store(conf, context, cf.report([_nic(VFS[:1], a), _nic(VFS[1:], b)]))
    card_a = inventory_apply.inventory_plan.device_uuid(HOST, f'PCI:{a}')
    written, errors = threading.Event(), []

    def maintain():
        other = races._new_context()
        try:
            with db_api.writer.using(other):
                host_db.lock(other, HOST)
                other.session.execute(
                    sa.update(models.Device)
                    .where(models.Device.uuid == card_a)
                    .values(status=states.MAINTAINING))
                written.set()
                _until_a_lock_wait(engine)
        except Exception as exc:  # reported below, not lost
            errors.append(exc)
        finally:
            written.set()

    operator = threading.Thread(target=maintain)
    operator.start()
    assert written.wait(WAIT)
    rp = inventory.provider_uuid(f'{HOST}_{a}')
    _store(conf, context, cf.report([_nic(VFS[1:], b)]), held={rp: False})
    operator.join(WAIT)
    assert errors == []
    d = models.Device
    with engine.connect() as c:
        row = c.execute(sa.select(d.status, d.health).where(
            d.uuid == card_a)).first()
    assert row is not None and tuple(row) == (states.MAINTAINING,
                                              states.LOST)


def test_first_reports_of_new_hosts_do_not_deadlock(conf, engine,
                                                    monkeypatch):
    """Two new hosts' first reports, each past its look for its host's
    row before either inserts it: neither waits for the other's gap lock
    while holding its own (MariaDB), so neither is run again.  Locking a
    missing row, then inserting it in the same transaction, deadlocked."""
    context = races._new_context()
    _store(conf, context, cf.report([]), hostname='host9')
    real = host_db.lock
    both = threading.Barrier(2, timeout=5)
    looked = set()

    def lock(context, hostname):
        row = real(context, hostname)
        if hostname not in looked:
            looked.add(hostname)
            try:
                both.wait()
            except threading.BrokenBarrierError:
                pass
        return row

    retried = []
    real_retrying = db_api.retrying
    monkeypatch.setattr(host_db, 'lock', lock)
    monkeypatch.setattr(db_api, 'retrying', lambda *args: (
        retried.append(args), real_retrying(*args)))
    errors = []

    def first_report(hostname):
        try:
            _store(conf, races._new_context(), cf.report([]),
                   hostname=hostname)
        except Exception as exc:  # reported below, not lost
            errors.append(exc)

    threads = [threading.Thread(target=first_report, args=(name,))
               for name in ('host2', 'host3')]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert errors == [] and retried == []
    with engine.connect() as c:
        assert set(c.execute(sa.select(models.Host.hostname)).scalars()) \
            == {'host2', 'host3', 'host9'}


def _health_write(rows, locked, go_on):
    """A health write, as ``health`` makes one: the host's row locked,
    then (once told) a row of ``rows`` (a table and its id) written."""
    table, row_id = rows

    def write(context):
        try:
            assert host_db.lock(context, HOST) is not None
        finally:
            locked.set()
        go_on.wait(WAIT)
        context.session.execute(sa.update(table).where(
            table.id == row_id).values(health_reason='overheated'))
        return 'written'

    return write


def _against_a_health_write(engine, rows, work):
    """``work(context)`` started while a health write holds the host's
    row; the health write goes on to its row once ``work`` waits for a
    lock.  Returns {'health': ..., 'work': ...}: what each returned or
    the exception it raised."""
    results, locked, go_on = {}, threading.Event(), threading.Event()
    health = _start(_health_write(rows, locked, go_on), results, 'health')
    assert locked.wait(WAIT)
    worker = _start(work, results, 'work')
    waited = _waits(engine, worker)
    go_on.set()
    for thread in (health, worker):
        thread.join(WAIT)
        assert not thread.is_alive()
    assert waited, results
    return results


# ``work(context)`` in a transaction of its own on a new thread.
_start = card_locks._start


def _waits(engine, thread):
    """Whether ``thread`` waits for a row lock before it ends."""
    return _until_a_lock_wait(engine, thread.is_alive)


def _until_a_lock_wait(engine, going_on=lambda: True):
    """True once a session of the test's database waits for a row lock;
    False when ``going_on()`` is false first."""
    pause = threading.Event()
    for _ in range(int(WAIT / POLL)):
        if not going_on():
            return False
        if races._waiting_for_a_lock(engine):
            return True
        pause.wait(POLL)
    raise AssertionError('no transaction waited for a lock')


def _host(engine):
    with engine.begin() as c:
        c.execute(sa.insert(models.Host).values(hostname=HOST,
                                                placement_synced=True))


def test_a_device_status_change_and_a_health_write(conf, engine):
    """Enabling or disabling a device waits for the host's row before it
    writes the device's; it wrote the device's first, and a health write
    holding the host's row and writing the device deadlocked with it."""
    card = seed.seed_device(engine, hostname=HOST, handles=1)
    _host(engine)
    results = _against_a_health_write(
        engine, (models.Device, card.device_id),
        lambda c: device_status._set_in(
            c, HOST, card.device_uuid, states.MAINTAINING)[0]['status'])
    assert results == {'health': 'written', 'work': states.MAINTAINING}


def test_an_attribute_write_and_a_health_write(conf, engine):
    """An attribute's insert waits for the host's row before it inserts
    (MariaDB share-locks the deployable for the foreign key check); it
    inserted first, and a health write holding the host's row and
    writing the deployable deadlocked with it."""
    card = seed.seed_device(engine, hostname=HOST, handles=1)
    _host(engine)
    results = _against_a_health_write(
        engine, (models.Deployable, card.deployable_id),
        lambda c: attributes._create_in(
            c, card.deployable_uuid, 'trait9', 'CUSTOM_X')[0]['value'])
    assert results == {'health': 'written', 'work': 'CUSTOM_X'}


def test_a_programming_s_function_trait_and_a_health_write(conf, engine):
    """A programming's function trait (an attribute of the deployable)
    is written after the host's row is locked, as any other attribute
    write (above); it inserted the attribute first and deadlocked on
    MariaDB with a health write holding the host's row."""
    card = seed.seed_device(engine, hostname=HOST, handles=1)
    _host(engine)
    target = types.SimpleNamespace(deployable_id=card.deployable_id,
                                   hostname=HOST)

    def advertise(context):
        programming._advertise_in(context, target, 'CUSTOM_FPGA_F1')
        return 'advertised'

    results = _against_a_health_write(
        engine, (models.Deployable, card.deployable_id), advertise)
    assert results == {'health': 'written', 'work': 'advertised'}
