"""Placement consumers whose allocations cyborg owes a release (owned by
cyborg.conductor.arq_allocation): the claims of standalone allocations
whose accelerator request was deleted or unbound while Placement could not
release them, recorded where the release failed (under the allocation's
own consumer, ``arq_allocation.consumer_of``, or the request's uuid);
those of allocations the stuck-bind check fails, recorded under the
request's uuid in the transaction that fails them; and those of requests
an unbind or a delete moves, recorded under the allocation's own consumer
and the request's uuid in the transaction that moves them.  Those
recorded in a transaction are released just after it, or later should
the conductor die first or Placement be away.  Forgotten once the release
is done."""

import sqlalchemy as sa

from cyborg.common import states
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
    """The consumers recorded that name no accelerator request, oldest
    first, ``limit`` at most: the uuids of accelerator requests that are
    gone, and the allocations' own consumers (a standalone allocation's
    bind identity, ``arq_allocation.consumer_of``, recorded by its undo),
    which no request is named by.  Those named by a request that still
    exists are left out by the query itself: however many there are,
    they never hold up the others."""
    return list(_sql.connection(context).scalars(
        sa.select(_OWED.c.consumer_uuid)
        .where(~sa.exists().where(_ARQ.c.uuid == _OWED.c.consumer_uuid))
        .order_by(_OWED.c.id).limit(limit)))


@reader
def owed_in_no_bind(context, limit=100):
    """(consumer, bind) of the consumers recorded whose accelerator
    request exists but is in no bind (unbound since, not allocated again;
    bind None) or in one that failed (BindFailed: the stuck-bind check
    failed its allocation; bind: the failed one's ``bind_id``), oldest
    first, ``limit`` at most.  Either way no live allocation holds the
    claim."""
    return [tuple(row) for row in _sql.connection(context).execute(
        sa.select(_OWED.c.consumer_uuid,
                  sa.case((_ARQ.c.state == states.BIND_FAILED,
                           _ARQ.c.bind_id), else_=sa.null()))
        .join(_ARQ, _ARQ.c.uuid == _OWED.c.consumer_uuid)
        .where(sa.or_(_ARQ.c.bind_id.is_(None),
                      _ARQ.c.state == states.BIND_FAILED))
        .order_by(_OWED.c.id).limit(limit))]


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


@writer
def forget_settled(context, consumer_uuid, bind_id):
    """Forget a consumer whose allocations were released on behalf of
    bind ``bind_id`` (None: of no bind), unless its accelerator request
    is in another bind by now: the record is then that allocation's to
    settle (it read it when it started, or an undo of its own recorded
    it since).  One statement, so that no bind starts between the check
    and the delete; whether it forgot it."""
    other = _ARQ.c.bind_id.is_not(None)
    if bind_id is not None:
        other = sa.and_(other, _ARQ.c.bind_id != bind_id)
    return _sql.connection(context).execute(
        sa.delete(_OWED).where(
            _OWED.c.consumer_uuid == consumer_uuid,
            ~sa.exists().where(_ARQ.c.uuid == consumer_uuid, other))
    ).rowcount > 0


@reader
def count_owed(context):
    """How many consumers are recorded (their releases still owed)."""
    return _sql.connection(context).scalar(
        sa.select(sa.func.count()).select_from(_OWED))
