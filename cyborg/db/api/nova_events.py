"""Bind outcomes Nova has not accepted yet (owned by cyborg.conductor.nova;
doc/source/contract.rst, "Every bind outcome reaches Nova"): recorded in
the transaction that gives an ARQ its final state, deleted once Nova has
them, re-sent by a periodic until then."""

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
def due_batches(context, now, limit=50):
    """Batch ids with an event whose next attempt is due."""
    e = models.NovaEvent
    return list(_sql.connection(context).scalars(
        sa.select(e.batch_id).where(e.next_attempt_at <= now)
        .group_by(e.batch_id).limit(limit)))


@writer
def claim_batch(context, batch_id, now, next_attempt_at):
    """Push a due batch's next attempt forward; the caller that moved any
    row owns this attempt (another conductor's periodic gets 0)."""
    e = models.NovaEvent
    return context.session.execute(
        sa.update(e).where(e.batch_id == batch_id, e.next_attempt_at <= now)
        .values(next_attempt_at=next_attempt_at)
        .execution_options(synchronize_session=False)).rowcount


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


# Built once: each bind's events are read and deleted by these.
_E = models.NovaEvent.__table__
_BATCH = sa.select(_E).where(_E.c.batch_id == sa.bindparam('batch_id'))
_FORGET = sa.delete(_E).where(_E.c.id.in_(sa.bindparam('ids',
                                                        expanding=True)))
_FORGET_BATCH = sa.delete(_E).where(_E.c.batch_id == sa.bindparam('batch_id'))


@reader
def count_pending(context):
    """Bind outcomes recorded for Nova and not delivered yet."""
    return _sql.connection(context).scalar(
        sa.select(sa.func.count()).select_from(models.NovaEvent))
