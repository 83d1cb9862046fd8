"""Placement consumers whose allocations cyborg owes a release (owned by
cyborg.conductor.arq_allocation): the claims of standalone allocations
whose accelerator request was deleted or unbound while Placement could not
release them.  Recorded where the release failed, forgotten once it is
done."""

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer

_OWED = models.PlacementRelease.__table__
_ARQ = models.ExtARQ.__table__


@writer
def add(context, consumer_uuid):
    """Record that ``consumer_uuid``'s allocations are to be released;
    once (a consumer recorded already is left as it is; two conductors
    recording it at once: one gets ``DBDuplicateEntry``)."""
    connection = _sql.connection(context)
    if connection.execute(sa.select(_OWED.c.id).where(
            _OWED.c.consumer_uuid == consumer_uuid)).first() is None:
        connection.execute(sa.insert(_OWED).values(
            consumer_uuid=consumer_uuid))


@reader
def owed(context, limit=100):
    """The consumers recorded whose accelerator request is gone, oldest
    first, ``limit`` at most.  Those whose request still exists are left
    out by the query itself: however many there are, they never hold up
    the others."""
    return list(_sql.connection(context).scalars(
        sa.select(_OWED.c.consumer_uuid)
        .where(~sa.exists().where(_ARQ.c.uuid == _OWED.c.consumer_uuid))
        .order_by(_OWED.c.id).limit(limit)))


@reader
def owed_in_no_bind(context, limit=100):
    """The consumers recorded whose accelerator request exists but is in
    no bind (unbound since, not allocated again), oldest first, ``limit``
    at most."""
    return list(_sql.connection(context).scalars(
        sa.select(_OWED.c.consumer_uuid)
        .join(_ARQ, _ARQ.c.uuid == _OWED.c.consumer_uuid)
        .where(_ARQ.c.bind_id.is_(None))
        .order_by(_OWED.c.id).limit(limit)))


@reader
def owes(context, consumer_uuid):
    """Whether ``consumer_uuid`` is recorded."""
    return _sql.connection(context).scalar(
        sa.select(_OWED.c.id).where(
            _OWED.c.consumer_uuid == consumer_uuid)) is not None


@writer
def forget(context, consumer_uuid):
    """Forget a consumer whose allocations were released."""
    _sql.connection(context).execute(
        sa.delete(_OWED).where(_OWED.c.consumer_uuid == consumer_uuid))


@reader
def count_owed(context):
    """How many consumers are recorded (their releases still owed)."""
    return _sql.connection(context).scalar(
        sa.select(sa.func.count()).select_from(_OWED))
