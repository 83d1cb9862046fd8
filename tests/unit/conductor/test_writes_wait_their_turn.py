"""The conductor's writes on a SQLite file with another writer ahead of
them, as in cyborg-aio while agents report and Nova binds: they wait for
the write lock, then succeed.  Each of them reads before it writes: run as
deferred transactions, adding an attribute, deleting profiles, a health
report that changed a device's health and an inventory report failed at
once with "database is locked" (a 503 for the API's writes; a health
report the agent's RPC call saw fail).  A status change writes first, and
kept its turn even then."""

import threading
import time
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

from cyborg.common import context as cyborg_context
from cyborg.common import states
from cyborg.conductor import attributes
from cyborg.conductor import device_profiles
from cyborg.conductor import device_status
from cyborg.conductor import health
from cyborg.conductor import inventory_apply
from cyborg.db import api as db_api
from cyborg.db import models
from tests.fixtures import arqs as seed
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf
from tests.fixtures.arqs import placement_url  # noqa: F401

HOLD = 0.5      # seconds the other writer keeps its transaction open


@pytest.fixture
def sqlite_file():
    with databases.throwaway_database('sqlite') as url:
        databases.create_schema(url)
        engine = engines.create_engine(url)
        undo = db_api.patch_engine(engine)
        yield engine
        undo()
        engine.dispose()


def _while_another_writes(engine, write):
    """Run ``write()`` while another connection holds SQLite's write
    lock for HOLD seconds; returns what it returned.  The other writer's
    commit must succeed too."""
    holding, errors = threading.Event(), []

    def other():
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(
                    'UPDATE nova_events SET id = id WHERE 0'))
                holding.set()
                time.sleep(HOLD)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            holding.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert holding.wait(10)
    try:
        result = write()
    finally:
        thread.join()
    assert not errors, errors
    return result


def test_attribute_writes_wait_their_turn(conf, sqlite_file):
    ctx = cyborg_context.get_admin_context()
    device = seed.seed_device(sqlite_file, handles=1)
    row = _while_another_writes(sqlite_file, lambda: attributes.create(
        conf, ctx, device.deployable_uuid, 'color', 'blue'))
    assert row['key'] == 'color'
    _while_another_writes(sqlite_file, lambda: attributes.delete(
        conf, ctx, row['uuid']))


def test_profile_writes_wait_their_turn(sqlite_file):
    ctx = cyborg_context.get_admin_context()
    profile = _while_another_writes(
        sqlite_file, lambda: device_profiles.create(ctx, {
            'name': 'p', 'groups': [{'resources:FPGA': '1'}]}))
    _while_another_writes(sqlite_file, lambda: device_profiles.delete(
        ctx, [profile['uuid']]))
    assert _profiles_left(sqlite_file) == 0


def _profiles_left(engine):
    with engine.connect() as conn:
        return conn.scalar(sa.text('SELECT COUNT(*) FROM device_profiles'))


def test_a_device_status_change_waits_its_turn(conf, sqlite_file):
    ctx = cyborg_context.get_admin_context()
    device = seed.seed_device(sqlite_file, handles=1)
    changed = _while_another_writes(
        sqlite_file, lambda: device_status.set_status(
            conf, ctx, device.device_uuid, 'maintaining'))
    assert changed['status'] == 'maintaining'


def _rows(engine, table, **where):
    columns = models.Base.metadata.tables[table].c
    with engine.connect() as conn:
        return conn.execute(sa.select(columns).where(*(
            columns[k] == v for k, v in where.items()))).mappings().all()


def test_a_health_report_waits_its_turn(conf, sqlite_file):
    ctx = cyborg_context.get_admin_context()
    device = seed.seed_device(sqlite_file, handles=1)
    with sqlite_file.begin() as conn:
        conn.execute(sa.insert(models.Host.__table__).values(
            hostname=device.hostname, placement_synced=True))
    # A transient fault makes the device suspect: a health change that
    # reads the host's rows, then writes.
    report = {'readings': [{'device': 'PCI:0000:0c:00.0',
                            'severity': states.TRANSIENT, 'source': 'pci',
                            'reason': 'AER: a correctable error'}]}
    answer = _while_another_writes(sqlite_file, lambda: health.handle_report(
        conf, ctx, device.hostname, report))
    assert answer == {'accepted': 1}
    [row] = _rows(sqlite_file, 'devices', uuid=device.device_uuid)
    assert row['health'] == states.SUSPECT


def test_an_inventory_report_waits_its_turn(
        conf, sqlite_file, placement_url):  # noqa: F811
    pf.placement_conf(conf, placement_url)
    host = 'host-' + uuidlib.uuid4().hex[:8]
    requests.post(placement_url + '/resource_providers', json={'name': host},
                  headers=pf.HEADERS, timeout=10).raise_for_status()
    ctx = cyborg_context.get_admin_context()
    report = cf.report([cf.device(host, '0000:81:00.0')])
    answer = _while_another_writes(
        sqlite_file, lambda: inventory_apply.handle_report(conf, ctx, host,
                                                           report))
    assert answer == {'digest': report['digest'], 'need_full': False}
    [row] = _rows(sqlite_file, 'hosts', hostname=host)
    assert row['report_digest'] == report['digest']
    assert len(_rows(sqlite_file, 'devices', hostname=host)) == 1
