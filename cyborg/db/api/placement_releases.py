"""Placement consumers whose allocations cyborg owes a release (owned by
cyborg.conductor.arq_allocation): the claims of standalone allocations
whose accelerator request went while Placement could not release them.
Recorded where the release failed, forgotten once it is done."""

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer

_OWED = models.PlacementRelease.__table__


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
    """The consumers recorded, oldest first, ``limit`` at most."""
    return list(_sql.connection(context).scalars(
        sa.select(_OWED.c.consumer_uuid).order_by(_OWED.c.id).limit(limit)))


@writer
def forget(context, consumer_uuid):
    """Forget a consumer whose allocations were released."""
    _sql.connection(context).execute(
        sa.delete(_OWED).where(_OWED.c.consumer_uuid == consumer_uuid))
