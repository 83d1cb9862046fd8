"""Bind outcomes Nova has not accepted yet (owned by cyborg.conductor.nova;
doc/source/contract.rst, "Every bind outcome reaches Nova"): recorded in
the transaction that gives an ARQ its final state, deleted once Nova has
them, re-sent by a periodic until then, or given up on once older than
``[nova]event_max_age`` (once Nova no longer waits for them when
events are turned off)."""

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer


@writer
def create_many(context, values):
    """Insert event rows, one dict of column values each."""
    context.session.execute(sa.insert(models.NovaEvent), values)


@reader
def get_batch(context, batch_id):
    """The events of one batch (rows with every column)."""
    return _sql.connection(context).execute(
        _BATCH, {'batch_id': batch_id}).all()


@reader
def get_batches(context, batch_ids):
    """The events of several batches (rows with every column)."""
    return _sql.connection(context).execute(
        _BATCHES, {'batch_ids': list(batch_ids)}).all()


@reader
def due_batches(context, now, limit=1000):
    """[(batch id, events)] of the batches with an event whose next
    attempt is due, the most recently recorded first: in a backlog,
    those whose instances are likeliest to be still waiting for them
    (Nova gives a build up after its [compute]arq_binding_timeout)."""
    e = models.NovaEvent
    return [tuple(row) for row in _sql.connection(context).execute(
        sa.select(e.batch_id, sa.func.count())
        .where(e.next_attempt_at <= now).group_by(e.batch_id)
        .order_by(sa.func.max(e.created_at).desc(), e.batch_id)
        .limit(limit))]


@writer
def claim_batches(context, batch_ids, now, next_attempt_at):
    """Push due batches' next attempt forward; returns those this caller
    moved a row of, whose attempt it owns (another conductor's periodic
    claiming the same batch meanwhile gets none of it)."""
    e = models.NovaEvent
    claimed = []
    for batch_id in batch_ids:
        if context.session.execute(
                sa.update(e).where(e.batch_id == batch_id,
                                   e.next_attempt_at <= now)
                .values(next_attempt_at=next_attempt_at)
                .execution_options(synchronize_session=False)).rowcount:
            claimed.append(batch_id)
    return claimed


@writer
def postpone_batch(context, batch_id, next_attempt_at):
    """Count a failed attempt and set when to try the batch again."""
    e = models.NovaEvent
    context.session.execute(
        sa.update(e).where(e.batch_id == batch_id)
        .values(next_attempt_at=next_attempt_at, attempts=e.attempts + 1)
        .execution_options(synchronize_session=False))


@writer
def make_owned_due(context, owner, created_before, now):
    """Make the events ``owner`` recorded before ``created_before`` due
    now (a restarted conductor re-sends what its previous run left)."""
    e = models.NovaEvent
    return context.session.execute(
        sa.update(e).where(e.owner == owner, e.created_at < created_before)
        .values(next_attempt_at=now)
        .execution_options(synchronize_session=False)).rowcount


@writer
def delete_ids(context, ids):
    """Forget delivered events."""
    _sql.connection(context).execute(_FORGET, {'ids': list(ids)})


@writer
def forget_batch(context, batch_id):
    """Forget a delivered batch (every row of it)."""
    _sql.connection(context).execute(_FORGET_BATCH, {'batch_id': batch_id})


@writer
def forget_batches(context, batch_ids):
    """Forget delivered batches (every row of them)."""
    batch_ids = list(batch_ids)
    if len(batch_ids) == 1:
        forget_batch(context, batch_ids[0])
    elif batch_ids:
        _sql.connection(context).execute(_FORGET_BATCHES,
                                         {'batch_ids': batch_ids})


@writer
def expire(context, created_before, limit=None):
    """Forget the events recorded before ``created_before`` (the
    ``limit`` first recorded, when given), delivered or not; returns
    their rows."""
    connection = _sql.connection(context)
    query = sa.select(_E).where(_E.c.created_at < created_before)
    if limit is not None:
        query = query.order_by(_E.c.id).limit(limit)
    rows = connection.execute(query).all()
    if rows:
        connection.execute(_FORGET, {'ids': [row.id for row in rows]})
    return rows


# Built once: each bind's events are read and deleted by these.
_E = models.NovaEvent.__table__
_BATCH = sa.select(_E).where(_E.c.batch_id == sa.bindparam('batch_id'))
_BATCHES = sa.select(_E).where(_E.c.batch_id.in_(
    sa.bindparam('batch_ids', expanding=True)))
_FORGET = sa.delete(_E).where(_E.c.id.in_(sa.bindparam('ids',
                                                        expanding=True)))
_FORGET_BATCH = sa.delete(_E).where(_E.c.batch_id == sa.bindparam('batch_id'))
_FORGET_BATCHES = sa.delete(_E).where(_E.c.batch_id.in_(
    sa.bindparam('batch_ids', expanding=True)))


@reader
def pending(context):
    """(how many, when the oldest was recorded: None when none) of the
    bind outcomes recorded for Nova and not delivered yet."""
    return tuple(_sql.connection(context).execute(
        sa.select(sa.func.count(), sa.func.min(_E.c.created_at))).one())
