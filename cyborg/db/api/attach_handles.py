"""Attach handles as a bind takes and releases them (owned by the ARQ
state machine, cyborg.conductor.arq_binding, and FPGA programming, which
must know whether a deployable is in use).  A report writes its host's
handles in bulk (``inventory``)."""

import sqlalchemy as sa

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import reader, writer

# Handles a bind races for before giving up on a deployable.
_TAKE_TRIES = 5


@writer
def take(context, deployable_id, unless_programmed=False):
    """Mark one free handle of the deployable in use and return its row,
    or None when none is free (or, ``unless_programmed``, when a
    programming marks the deployable's card, through it or another of its
    device's deployables: see ``_TAKE_UNLESS_PROGRAMMED``), or when one
    of the card's deployables is kept gone under a handle in use
    (``_TAKE_PROGRAMMING``).
    FOR UPDATE SKIP LOCKED lets concurrent binds on MariaDB/PostgreSQL
    pass each other's candidates; SQLite renders no lock clause (its
    writers are serialised), so the guarded UPDATE with its row count is
    what makes the take atomic on every engine.

    ``in_use = false``, not ``IS false``: only an equality lets MariaDB
    read the index on (deployable_id, in_use) in id order and stop at
    the first free handle.  Otherwise it walks the primary key (locking
    the handles of other devices) or sorts every handle of the device
    after reading it (locking them all), and concurrent binds find no
    free handle until this one commits.  A handle kept while gone
    (``gone``: no longer reported) is never taken; few are, so reading
    past them in that order costs nothing.  Nor is a handle of a host
    that shares its compute node with another host row
    (``hosts.has_sharer``: see ``_OF_SHARED``).
    """
    connection = _sql.connection(context)
    statement = (_TAKE_UNLESS_PROGRAMMED if unless_programmed
                 else _TAKE_PROGRAMMING)
    for _ in range(_TAKE_TRIES):
        row = connection.execute(_FREE_HANDLE,
                                 {'deployable_id': deployable_id}).first()
        if row is None:
            return None
        taken = connection.execute(statement, {
            'handle_id': row.id, 'now': models._now()}).rowcount
        if taken:
            return row
    return None


# Built once: statements a bind runs every time (see arqs._filtered).
_H = models.AttachHandle.__table__
# Whether the deployable's host shares its compute node provider: another
# host row records it too (a host renamed before the old name was
# forgotten; a resource_provider_name naming another host's compute node),
# the same hardware under two names, of which nothing tells which one is
# live.  Placement reserves every provider of each of them whole
# (placement_sync), and no bind, Nova's or a standalone allocation's,
# takes their handles.  Read by the free handle's SELECT, not by the
# take's UPDATE: a locking read's clause does not lock the rows of its
# subqueries (the UPDATE's subqueries share-lock what they read on
# MariaDB, and the host rows would make every bind wait for the reports
# holding them).  No statement more; it depends on the bind's deployable
# alone, so it is read once per take.
_OWNER = models.Host.__table__.alias('owner')
_OWNED = models.Deployable.__table__.alias('owned')
_OWNER_DEVICE = models.Device.__table__.alias('owner_device')
_OF_SHARED = (
    sa.select(_OWNED.c.id)
    .join(_OWNER_DEVICE, _OWNER_DEVICE.c.id == _OWNED.c.device_id)
    .join(_OWNER, _OWNER.c.hostname == _OWNER_DEVICE.c.hostname)
    .where(_OWNED.c.id == sa.bindparam('deployable_id'),
           host_db.has_sharer(_OWNER))
    .exists())
_FREE_HANDLE = (
    sa.select(_H.c.id, _H.c.uuid, _H.c.attach_type, _H.c.attach_info)
    .where(_H.c.deployable_id == sa.bindparam('deployable_id'),
           _H.c.in_use == sa.false(), _H.c.gone == sa.false(),
           ~_OF_SHARED)
    .order_by(_H.c.id).limit(1).with_for_update(skip_locked=True))
_TAKE_HANDLE = (
    sa.update(_H).where(_H.c.id == sa.bindparam('handle_id'),
                        _H.c.in_use == sa.false(), _H.c.gone == sa.false())
    .values(in_use=True, updated_at=sa.bindparam('now')))
# A bind that does not program the card takes no handle of a card being
# programmed (through any of its deployables: a card with VFs is
# programmed whole, through its PF, whichever VF asks), checked by the
# take itself: on MariaDB (REPEATABLE READ) the subquery reads the card's
# deployables with share locks, the latest committed (a claim,
# ``deployables.claim_programming``, locks the same rows); on PostgreSQL
# it reads as of the statement, and a programming marked later finds
# this handle locked when it counts the card's instances (``count_held``,
# after its mark is committed) and waits for the bind's commit; on
# SQLite writers are serialised.  No extra statement per bind.
#
# The card is reached through the handle's control path (its device,
# ``deployables.card_key``) and read through the deployables' device
# index only (FORCE INDEX on MariaDB): left to itself, MariaDB reads the
# marked rows of the whole database (``programming_until IS NOT NULL``,
# on their own index) and, inside this UPDATE, share-locks every one of
# them and the index's gaps, so a take on one host waited for a claim on
# another, and a bind taking handles on two cards deadlocked with a
# claim on the second (which inserts into that index).  Read by device,
# only the card's own rows are locked.  A claim on the card still locks
# them (exclusively) while a take reads them, so the two order on the
# card's rows; a bind that takes handles on two cards and a claim on
# one of them share no other row.
#
# No take, a programming bind's included, gets a handle of a card one of
# whose deployables is kept gone under a handle in use
# (``deployables.held_gone``: a GPU reported whole after a reboot while
# an instance still holds one of its vGPUs), which Placement reserves
# whole too (``inventory.host_providers``): a programming bind finding
# the image loaded already counts nobody's handles.  The same subquery
# reads it, on the card's gone rows only (their handles through the
# (deployable_id, in_use) index).
_D = models.Deployable.__table__
_C = models.ControlpathID.__table__
_HELD = _H.alias('held_handles')


def _card_where(condition):
    """Whether a deployable of the handle's card meets ``condition``."""
    return (
        sa.select(_D.c.id).select_from(_C)
        .join(_D, deployable_db.card_key(_D.c) == _C.c.device_id)
        .where(_C.c.id == _H.c.cpid_id, condition)
        .with_hint(_D, 'FORCE INDEX (deployables_device_id_idx)',
                   dialect_name='mysql')).exists()


_TAKE_PROGRAMMING = _TAKE_HANDLE.where(
    ~_card_where(deployable_db.held_gone(_D.c, _HELD)))
_TAKE_UNLESS_PROGRAMMED = _TAKE_HANDLE.where(~_card_where(sa.or_(
    _D.c.programming_until.isnot(None),
    deployable_db.held_gone(_D.c, _HELD))))
_RELEASE_HANDLE = (
    sa.update(_H).where(_H.c.id == sa.bindparam('handle_id'))
    .values(in_use=False, updated_at=sa.bindparam('now')))


@writer
def release(context, handle_id):
    """Mark the handle free again."""
    _sql.connection(context).execute(_RELEASE_HANDLE, {
        'handle_id': handle_id, 'now': models._now()})


@reader
def get(context, handle_id):
    """(id, uuid, attach_type, attach_info, cpid_info) of a handle."""
    h, c = models.AttachHandle, models.ControlpathID
    return _sql.connection(context).execute(
        sa.select(h.id, h.uuid, h.attach_type, h.attach_info, c.cpid_info)
        .join(c, c.id == h.cpid_id).where(h.id == handle_id)).first()


@writer
def count_held(context, deployable_id):
    """How many handles of the deployable's card are taken: its own and
    those of the card's other deployables (a card with VFs is programmed
    whole, through its PF, whichever VF asks), read with a share lock on
    every one of them (so after any bind still taking one has committed:
    see ``_TAKE_UNLESS_PROGRAMMED``)."""
    card = sa.select(deployable_db.card_key(_D.c)).where(
        _D.c.id == deployable_id).scalar_subquery()
    return sum(_sql.connection(context).execute(
        sa.select(_H.c.in_use).where(_H.c.deployable_id.in_(
            sa.select(_D.c.id).where(deployable_db.card_key(_D.c) == card)))
        .with_for_update(read=True)).scalars())


# The taken handles of a card's deployables, share-locked: those only,
# read through the (deployable_id, in_use) index (FORCE INDEX on MariaDB,
# which might otherwise walk the primary key and lock every handle it
# reads).  A bind's transaction holds the locks until it commits; free
# handles left unlocked, concurrent binds' takes (FOR UPDATE SKIP
# LOCKED) still find them.
_TAKEN = (
    sa.select(_H.c.id)
    .where(_H.c.deployable_id.in_(sa.bindparam('deployable_ids',
                                               expanding=True)),
           _H.c.in_use == sa.true())
    .with_for_update(read=True)
    .with_hint(_H, 'FORCE INDEX (attach_handles_deployable_id_in_use_idx)',
               dialect_name='mysql'))


@writer
def count_taken(context, deployable_ids):
    """How many handles of these deployables (a card's:
    ``deployables.card_for_bind``) are taken, in a bind's transaction:
    those taken and committed by others (each share-locked, so read as
    last committed; on MariaDB one still being taken is waited for), and
    those this transaction took.  Unlike ``count_held`` (a programming's
    count, in a transaction of its own) it locks no free handle: a bind
    holds its locks until it commits, and a free handle it locked would
    be passed over by the other binds taking one meanwhile."""
    return len(_sql.connection(context).execute(
        _TAKEN, {'deployable_ids': list(deployable_ids)}).all())


# The MDEV handles of one host's Bound ARQs (the vGPUs its instances
# hold), read through the devices' hostname index, each device's
# deployables and each deployable's handles (their indexes), and the
# ARQs' unique index on attach_handle_id.
_A = models.ExtARQ.__table__
_V = models.Device.__table__
_BOUND_MDEVS = (
    sa.select(_A.c.uuid.label('arq_uuid'), _H.c.uuid, _H.c.attach_info)
    .select_from(_V)
    .join(_D, _D.c.device_id == _V.c.id)
    .join(_H, _H.c.deployable_id == _D.c.id)
    .join(_A, _A.c.attach_handle_id == _H.c.id)
    .where(_V.c.hostname == sa.bindparam('hostname'),
           _H.c.attach_type == 'MDEV', _H.c.in_use == sa.true(),
           _A.c.state == states.BOUND)
    .order_by(_H.c.id))


@reader
def bound_mdevs(context, hostname):
    """(arq_uuid, uuid, attach_info) of the MDEV handles that Bound ARQs
    hold on ``hostname``'s devices (gone ones too: an ARQ holds them),
    in handle order: the mdevs its agent recreates when it starts
    (``cyborg.agent.mdevs``)."""
    return _sql.connection(context).execute(
        _BOUND_MDEVS, {'hostname': hostname}).all()
