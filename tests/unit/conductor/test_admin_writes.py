"""The conductor's admin writes (attributes, device profiles, a device's
status) on a SQLite file with another writer ahead of them, as in
cyborg-aio while agents report: they wait for the write lock, then
succeed.  Adding an attribute and deleting profiles read before they
write: run as deferred transactions they failed at once with "database
is locked" (a 503 saying the database was unreachable).  A status change
writes first, and kept its turn even then."""

import threading
import time

import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

from cyborg.common import context as cyborg_context
from cyborg.conductor import attributes
from cyborg.conductor import device_profiles
from cyborg.conductor import device_status
from cyborg.db import api as db_api
from tests.fixtures import arqs as seed
from tests.fixtures import databases

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
