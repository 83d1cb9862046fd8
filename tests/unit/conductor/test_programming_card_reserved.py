"""A card with VFs is rewritten whole (through its PF), whichever of its
deployables a programming asks for, and binds on any of them are refused
while it is marked: Placement reserves every provider of the card whole
meanwhile, not only the marked deployable's.  Only that one was: Nova
still placed instances on another VF of a card being rewritten, whose
binds then failed.

Against the real (embedded) Placement, read back from it; the rows'
query on every database."""

import contextlib

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.conductor import placement_sync
from cyborg.conductor import programming
from cyborg.db import models
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import inventory as inventory_db
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.unit.conductor import test_programming as tp
from tests.unit.conductor import test_programming_races as tr

pconf, ctx, glance = tp.pconf, tp.ctx, tp.glance
placement_url = tp.placement_url

HOST = tp.HOST


@pytest.fixture
def card(pconf, db):
    """A card of HOST with VFs: its PF (the device's first deployable, 2
    units) and two VFs (1 unit each), and another card of the host (3
    units); every provider made by a sync."""
    pf = tp._reported(pconf, db, handles=2)
    vfs = [tr._another_vf(db, pf) for _ in range(2)]
    other = tp._reported(pconf, db, handles=3)
    placement_sync.sync_host(pconf, cyborg_context.get_admin_context(),
                             HOST)
    return pf, vfs, other


def _reserved(conf, *deployables):
    """What Placement reserves of each deployable's provider."""
    client = placement_client.get_client(conf)
    return [client.get_inventories(d.rp_uuid)[1]['FPGA']['reserved']
            for d in deployables]


@contextlib.contextmanager
def _programming(conf, context, deployable):
    """A programming of ``deployable``'s card through it, as
    ``programming.program`` marks and syncs it (``_reserved``), for as
    long as the block runs."""
    target = deployable_db.program_target(context,
                                          deployable.deployable_uuid)
    with programming._reserved(conf, context, target, tr._until()):
        yield


WHOLE = [2, 1, 1]
FREE = [0, 0, 0]


def test_marking_one_vf_reserves_every_provider_of_its_card(pconf, ctx,
                                                            card):
    """A programming through a VF reserves the PF and every other VF of
    its card, and only its card; its end frees them all.  Only the
    marked VF's provider was reserved."""
    pf, vfs, other = card
    with _programming(pconf, ctx, vfs[0]):
        assert _reserved(pconf, pf, *vfs) == WHOLE
        assert _reserved(pconf, other) == [0]
    assert _reserved(pconf, pf, *vfs) == FREE
    placement_sync.reconcile_host(pconf, ctx, HOST)
    assert _reserved(pconf, pf, *vfs, other) == FREE + [0]


def test_the_programming_syncs_every_provider_of_its_card(
        pconf, ctx, card, monkeypatch):
    """The programming's own syncs, when it sets its mark and when it
    clears it, write every provider of the card (they synced the marked
    deployable's alone)."""
    pf, vfs, other = card
    synced = []
    sync_providers = placement_sync.sync_providers

    def recording(conf, context, hostname, providers, **kwargs):
        synced.append(set(providers))
        return sync_providers(conf, context, hostname, providers, **kwargs)

    monkeypatch.setattr(placement_sync, 'sync_providers', recording)
    with _programming(pconf, ctx, vfs[1]):
        pass
    whole_card = {d.rp_uuid for d in (pf, *vfs)}
    assert synced == [whole_card, whole_card]


def test_a_full_sync_keeps_a_marked_card_reserved_whole(pconf, ctx, card):
    """A drift repair while the card is marked (the reconcile, a full
    sync of the host) reserves its other VFs again; it used to put them
    back to 0, offering a VF of a card being rewritten."""
    pf, vfs, other = card
    client = placement_client.get_client(pconf)
    with _programming(pconf, ctx, pf):
        for vf in vfs:
            generation, inventories = client.get_inventories(vf.rp_uuid)
            client.set_inventories(vf.rp_uuid, {'FPGA': dict(
                inventories['FPGA'], reserved=0)}, generation)
        assert _reserved(pconf, pf, *vfs) == [2, 0, 0]
        assert placement_sync.reconcile_host(pconf, ctx, HOST)
        assert _reserved(pconf, pf, *vfs) == WHOLE
        placement_sync.sync_host(pconf, ctx, HOST, trust_memory=False)
        assert _reserved(pconf, pf, *vfs) == WHOLE
        assert _reserved(pconf, other) == [0]
    assert _reserved(pconf, pf, *vfs) == FREE


def test_a_mark_another_conductor_left_reserves_the_card_at_the_reconcile(
        pconf, ctx, db, card):
    """A mark on one VF that this conductor did not set (another
    conductor's, one that died mid-programming): the periodic reconcile
    reserves every provider of its card, and frees them all once it is
    gone."""
    pf, vfs, other = card
    tp._mark(db, vfs[1])
    assert placement_sync.reconcile_all(pconf, ctx) == 1
    assert _reserved(pconf, pf, *vfs) == WHOLE
    assert _reserved(pconf, other) == [0]
    with db.begin() as c:
        # As its conductor clears it: the host no longer taken as synced.
        c.execute(sa.update(models.Deployable).values(
            programming_until=None))
        c.execute(sa.update(models.Host).values(placement_synced=False))
    placement_sync.reconcile_all(pconf, ctx)
    assert _reserved(pconf, pf, *vfs) == FREE


# SQLite, MariaDB and PostgreSQL.
engine = tr.engine


def host_providers_counted(engine, hostname):
    """``inventory.host_providers`` of ``hostname`` in a new context, and
    the statements it ran."""
    statements = []

    def count(conn, cursor, statement, *args):
        statements.append(statement)

    sa.event.listen(engine, 'before_cursor_execute', count)
    try:
        rows = inventory_db.host_providers(tr._new_context(), hostname)
    finally:
        sa.event.remove(engine, 'before_cursor_execute', count)
    return rows, statements


def test_the_rows_carry_their_card_s_mark_in_as_many_statements(engine):
    """Every deployable of a marked card reads the card's mark (the
    latest of its deployables'), those of other cards none; in the same
    two statements as before, on every database."""
    first = seed.seed_device(engine, hostname=HOST, handles=1)
    vfs = [tr._another_vf(engine, first) for _ in range(2)]
    other = seed.seed_device(engine, hostname=HOST, handles=1)
    until = tr._until()
    with engine.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == vfs[0].deployable_id)
                  .values(programming_until=until))
    rows, statements = host_providers_counted(engine, HOST)
    assert len(statements) == 2
    marks = {row['uuid']: (row['programming_until'],
                           row['card_programming_until']) for row in rows}
    assert marks == {
        first.deployable_uuid: (None, until),
        vfs[0].deployable_uuid: (until, until),
        vfs[1].deployable_uuid: (None, until),
        other.deployable_uuid: (None, None)}
