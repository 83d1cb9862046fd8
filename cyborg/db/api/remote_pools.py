"""Remote (fabric-attached) pools and their handles: read by the API and
by binds, written by cyborg.conductor.remote_pools (registration,
deletion, Placement sync) and by the ARQ state machine
(cyborg.conductor.arq_binding: taking, attaching and releasing a handle).
"""

import json

import sqlalchemy as sa

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer

_POOL = models.RemotePool
_HANDLE = models.RemotePoolHandle
_ARQ = models.ExtARQ
# Handles a bind races for before giving up on a pool.
_TAKE_TRIES = 5

# What a handle's attach_info says of a handle whose detach the fabric
# refused (kept out of use, no ARQ holding it) ...
DETACH_FAILED = 'detach_failed'
# ... and of the host it stays attached to: the handle's hostname is only
# written once its bind is Bound, and a bind cut short before that (its
# conductor died, its ARQ deleted meanwhile) attached it all the same.
ATTACHED_HOST = 'hostname'
# [[host, instance uuid], ...] a handle stays attached to besides its
# holder's: a bind's undo that could not detach it from its host while
# another bind held it.  Whoever lets the handle go keeps it out of use
# for the first of them rather than free it (``release``).
DETACH_OWED = 'detach_owed'
# What ``release`` returns for a handle it kept for an owed detach whose
# host was not recorded: kept all the same, never read as freed (True).
UNRECORDED_HOST = 'a host not recorded'


# -- reads ------------------------------------------------------------------

@reader
def get(context, uuid=None, name=None, id=None, rp_uuid=None):
    """One pool (a Row of its columns) by uuid, name, id or provider.

    None when there is no such pool.
    """
    return _sql.one(context, _POOL, uuid=uuid, name=name, id=id,
                    rp_uuid=rp_uuid)


@reader
def get_all(context, name=None, limit=None, marker=None):
    """Every pool (Rows of its columns), optionally only the one named, by
    id.  With ``limit`` and ``marker`` (a pool's uuid): at most ``limit``
    of them after that pool, in SQL; None when no pool has that uuid."""
    return _sql.every(context, _POOL, limit, marker, name=name)


@reader
def by_rp_uuids(context, rp_uuids):
    """{rp_uuid: pool} of the pools whose providers are among
    ``rp_uuids``: the targets a bind may name besides deployables."""
    if not rp_uuids or not _sql.matchable(rp_uuids):
        return {}
    pools = _sql.connection(context).execute(
        sa.select(_POOL.__table__)
        .where(_POOL.rp_uuid.in_(list(rp_uuids)))).all()
    return {pool.rp_uuid: pool for pool in pools}


@reader
def handles(context, pool_ids):
    """The handles of these pools (Rows of their columns), in order."""
    return _sql.connection(context).execute(
        sa.select(_HANDLE.__table__)
        .where(_HANDLE.pool_id.in_(list(pool_ids)))
        .order_by(_HANDLE.id)).all()


@reader
def holders(context, pool_id):
    """Uuids of the ARQs binding or bound to the pool (whether or not they
    hold a handle yet)."""
    return list(_sql.connection(context).scalars(
        sa.select(_ARQ.uuid).where(_ARQ.remote_pool_id == pool_id)
        .order_by(_ARQ.id)))


@reader
def holder(context, handle_id):
    """(bind_id, hostname, instance_uuid) of the ARQ holding the handle
    (its bind, the host and instance it binds for), or None when none
    does."""
    return _sql.connection(context).execute(
        sa.select(_ARQ.bind_id, _ARQ.hostname, _ARQ.instance_uuid)
        .where(_ARQ.remote_handle_id == handle_id)).first()


@reader
def get_handle(context, handle_id):
    """One handle (a Row of its columns) by id, or None."""
    return _sql.one(context, _HANDLE, id=handle_id)


# -- writes -----------------------------------------------------------------

@writer
def lock_handle(context, handle_id):
    """One handle (a Row of its columns) by id, or None, as last
    committed and locked until the transaction ends: what is written
    from it next (``set_attach_info``) drops nothing another conductor
    wrote in between (the detaches ``owe_detach`` records owed)."""
    return context.session.execute(
        sa.select(_HANDLE.__table__).where(_HANDLE.id == handle_id)
        .with_for_update()).first()


@writer
def insert(context, pool_values, handle_values):
    """Insert a pool and its handles; the unique keys reject a duplicate
    name (DBDuplicateEntry).  Returns the pool."""
    pool = _POOL(**pool_values)
    context.session.add(pool)
    context.session.flush()
    context.session.add_all(_HANDLE(pool_id=pool.id, **values)
                            for values in handle_values)
    context.session.flush()
    return pool


def _update(context, pool_id, **values):
    """Set ``values`` on one pool row; its row count."""
    return context.session.execute(
        sa.update(_POOL).where(_POOL.id == pool_id)
        .values(updated_at=models._now(), **values)
        .execution_options(synchronize_session=False)).rowcount


@writer
def set_synced(context, pool_id, synced):
    _update(context, pool_id, placement_synced=synced)


@writer
def start_deleting(context, pool_id):
    """Mark an active pool 'deleting' if no ARQ holds it and none of its
    handles is in use (checked in the same transaction, under the pool
    row's lock); True if marked.

    The ARQs before the handles: a release that keeps a handle out of use
    (its detach refused) drops its ARQ and marks the handle in one commit,
    so a check that finds the ARQ gone finds the handle in use.
    """
    locked = context.session.execute(
        sa.select(_POOL.id).where(_POOL.id == pool_id)
        .with_for_update()).first()
    if locked is None or holders(context, pool_id):
        return False
    in_use = context.session.execute(
        sa.select(_HANDLE.id).where(_HANDLE.pool_id == pool_id,
                                    _HANDLE.in_use == sa.true())
        .limit(1)).first()
    if in_use is not None:
        return False
    return bool(_update(context, pool_id, state=states.POOL_DELETING))


@writer
def take_over_deleting(context, pool_id, marked_before):
    """Take over the deletion of a pool marked 'deleting' before
    ``marked_before`` (its ``updated_at``, which ``start_deleting`` sets,
    and every later write to the row moves on) that no ARQ holds, under
    the pool row's lock: its ``updated_at`` moved to now, so that another
    conductor's reconcile, and this one's next, leave it for as long
    again; True if taken.  A pool marked again meanwhile (an admin's
    DELETE again) or put back active is left to whoever did it."""
    locked = context.session.execute(
        sa.select(_POOL.id).where(
            _POOL.id == pool_id, _POOL.state == states.POOL_DELETING,
            sa.func.coalesce(_POOL.updated_at, _POOL.created_at)
            <= marked_before)
        .with_for_update()).first()
    if locked is None or holders(context, pool_id):
        return False
    return bool(_update(context, pool_id))


@writer
def set_state(context, pool_id, state, was=None):
    """Set the pool's state; with ``was``, only from that state.  True if
    set."""
    guard = [_POOL.id == pool_id]
    if was is not None:
        guard.append(_POOL.state == was)
    return bool(context.session.execute(
        sa.update(_POOL).where(*guard)
        .values(state=state, updated_at=models._now())
        .execution_options(synchronize_session=False)).rowcount)


@writer
def delete(context, pool_id, state=None):
    """Delete a pool and its handles; with ``state``, only while the pool
    is in that state (checked under the pool row's lock).  True if
    deleted."""
    if state is not None and context.session.execute(
            sa.select(_POOL.id).where(_POOL.id == pool_id,
                                      _POOL.state == state)
            .with_for_update()).first() is None:
        return False
    context.session.execute(sa.delete(_HANDLE).where(
        _HANDLE.pool_id == pool_id).execution_options(
        synchronize_session=False))
    return bool(context.session.execute(sa.delete(_POOL).where(
        _POOL.id == pool_id).execution_options(
        synchronize_session=False)).rowcount)


@writer
def hold(context, pool_id):
    """Lock the pool's row for a bind starting on it; True while it is
    active (a pool being deleted takes no new binds)."""
    return context.session.execute(
        sa.select(_POOL.id).where(_POOL.id == pool_id,
                                  _POOL.state == states.POOL_ACTIVE)
        .with_for_update(read=True)).first() is not None


@writer
def take(context, pool_id):
    """Mark one free handle of the pool in use and return it (id, uuid,
    fabric_address, attach_info), or None when none is free; atomic as
    ``attach_handles.take`` is.  ``in_use = false``, not ``IS false``:
    MariaDB reads the latter past the (pool_id, in_use) index and locks
    every handle of the pool, so a second bind on the pool, skipping
    locked rows, found none free while the first had not committed."""
    for _ in range(_TAKE_TRIES):
        row = context.session.execute(
            sa.select(_HANDLE.id, _HANDLE.uuid, _HANDLE.fabric_address,
                      _HANDLE.attach_info)
            .where(_HANDLE.pool_id == pool_id,
                   _HANDLE.in_use == sa.false())
            .order_by(_HANDLE.id).limit(1)
            .with_for_update(skip_locked=True)).first()
        if row is None:
            return None
        taken = context.session.execute(
            sa.update(_HANDLE).where(_HANDLE.id == row.id,
                                     _HANDLE.in_use == sa.false())
            .values(in_use=True, updated_at=models._now())
            .execution_options(synchronize_session=False)).rowcount
        if taken:
            return row
    return None


@writer
def set_attached(context, handle_id, hostname, attach_info):
    """Record where a handle in use is attached and how (JSON text).  The
    detaches it is owed (``DETACH_OWED``) are kept."""
    was = context.session.scalar(
        sa.select(_HANDLE.attach_info).where(_HANDLE.id == handle_id)
        .with_for_update())
    owed = json.loads(was or '{}').get(DETACH_OWED)
    if owed:
        attach_info = json.dumps(dict(json.loads(attach_info),
                                      **{DETACH_OWED: owed}))
    context.session.execute(
        sa.update(_HANDLE).where(_HANDLE.id == handle_id,
                                 _HANDLE.in_use == sa.true())
        .values(hostname=hostname, attach_info=attach_info,
                updated_at=models._now())
        .execution_options(synchronize_session=False))


def resting_info(fabric_address):
    """A free handle's attach_info: its address alone (JSON text)."""
    return json.dumps({'fabric_address': fabric_address})


@writer
def release(context, handle_id, attach_info=None):
    """Mark the handle free again, its attach_info back to its address;
    True if freed.  With ``attach_info``, only while the handle is in use
    with that attach_info: a handle kept out of use, freed as it was
    read, not after another conductor freed it and a bind took it.

    A handle owed a detach from another host (``DETACH_OWED``: a bind's
    undo could not detach it from there while another bind held it) is
    not freed but kept out of use for the first of those hosts
    (``kept_for``), for the reconcile to detach: returns that host."""
    row = context.session.execute(
        sa.select(_HANDLE.fabric_address, _HANDLE.attach_info)
        .where(_HANDLE.id == handle_id).with_for_update()).first()
    if row is None:
        return False
    guard = [_HANDLE.id == handle_id]
    if attach_info is not None:
        guard += [_HANDLE.in_use == sa.true(),
                  _HANDLE.attach_info == attach_info]
    owed = json.loads(row.attach_info or '{}').get(DETACH_OWED)
    if owed:
        (hostname, instance_uuid), rest = owed[0], owed[1:]
        return bool(context.session.execute(
            sa.update(_HANDLE).where(*guard)
            .values(in_use=True, hostname=None,
                    attach_info=kept_for(row.fabric_address, hostname,
                                         instance_uuid, rest),
                    updated_at=models._now())
            .execution_options(synchronize_session=False)
        ).rowcount) and (hostname or UNRECORDED_HOST)
    return bool(context.session.execute(
        sa.update(_HANDLE).where(*guard)
        .values(in_use=False, hostname=None,
                attach_info=resting_info(row.fabric_address),
                updated_at=models._now())
        .execution_options(synchronize_session=False)).rowcount)


def kept_for(fabric_address, hostname, instance_uuid, owed=()):
    """The attach_info (JSON text) of a handle kept out of use, attached
    to ``hostname`` for ``instance_uuid`` (the host the reconcile detaches
    it from), still owed the detaches ``owed`` after that one."""
    info = {'fabric_address': fabric_address, DETACH_FAILED: 'true',
            'instance_uuid': instance_uuid or '',
            ATTACHED_HOST: hostname or ''}
    if owed:
        info[DETACH_OWED] = [list(o) for o in owed]
    return json.dumps(info)


@writer
def replace_attach_info(context, handle_id, was, attach_info):
    """Replace the attach_info of a handle in use, only as it was read
    (``was``); True if replaced."""
    return bool(context.session.execute(
        sa.update(_HANDLE).where(_HANDLE.id == handle_id,
                                 _HANDLE.in_use == sa.true(),
                                 _HANDLE.attach_info == was)
        .values(attach_info=attach_info, updated_at=models._now())
        .execution_options(synchronize_session=False)).rowcount)


@writer
def keep_out(context, handle_id, attach_info):
    """Take a free handle out of use with ``attach_info`` (a kept handle's,
    ``quarantine_info``): the fabric refused to detach it, though no ARQ
    holds it any more.  True if it was free; a handle taken meanwhile
    is left to its bind."""
    return bool(context.session.execute(
        sa.update(_HANDLE).where(_HANDLE.id == handle_id,
                                 _HANDLE.in_use == sa.false())
        .values(in_use=True, attach_info=attach_info,
                updated_at=models._now())
        .execution_options(synchronize_session=False)).rowcount)


@writer
def set_attach_info(context, handle_id, attach_info):
    """Replace a handle's attach_info (JSON text), in use or not."""
    context.session.execute(
        sa.update(_HANDLE).where(_HANDLE.id == handle_id)
        .values(attach_info=attach_info, updated_at=models._now())
        .execution_options(synchronize_session=False))
