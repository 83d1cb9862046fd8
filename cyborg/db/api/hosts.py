"""The hosts table: one row per agent host, with the digest of the
inventory last written for it and whether Placement matches it.

Owned by the conductor's report handling (cyborg.conductor.inventory_apply
and placement_sync); the health state machine and device status changes
lock a host's row to serialise with its reports and mark it unsynced.
"""

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer

_HOST = models.Host.__table__


@writer
def touch(context, hostname, digest):
    """Record an unchanged report in one UPDATE.  True when the host is
    known with this digest and in sync with Placement."""
    h = _HOST
    result = context.session.execute(
        sa.update(h).where(h.c.hostname == hostname,
                           h.c.report_digest == digest,
                           h.c.placement_synced.is_(True))
        .values(last_report_at=timeutils.utcnow()))
    return result.rowcount == 1


@writer
def lock_or_create(context, hostname):
    """The host's row (dict), locked until the transaction ends; inserted
    when new (a racing insert raises DBDuplicateEntry: retry)."""
    h = _HOST
    query = sa.select(h).where(h.c.hostname == hostname).with_for_update()
    row = context.session.execute(query).mappings().first()
    if row is None:
        context.session.execute(sa.insert(h).values(
            hostname=hostname, placement_synced=False,
            created_at=timeutils.utcnow()))
        row = context.session.execute(query).mappings().first()
    return dict(row)


@writer
def lock(context, hostname):
    """Lock a known host's row until the transaction ends (serialising a
    change with the host's reports); False when the host is unknown."""
    h = _HOST
    return context.session.execute(
        sa.select(h.c.hostname).where(h.c.hostname == hostname)
        .with_for_update()).first() is not None


@reader
def get(context, hostname):
    """The host's row (dict), or None."""
    h = _HOST
    row = context.session.execute(
        sa.select(h).where(h.c.hostname == hostname)).mappings().first()
    return dict(row) if row else None


@reader
def list_all(context):
    """[{hostname, compute_rp_uuid, placement_synced, report_digest}]."""
    h = _HOST
    return _sql.rows(context.session.execute(
        sa.select(h.c.hostname, h.c.compute_rp_uuid, h.c.placement_synced,
                  h.c.report_digest).order_by(h.c.hostname)))


@writer
def update(context, hostname, digest=None, **values):
    """Set host columns; with ``digest``, only if it is still the stored
    one (a later report wins).  True if the row was updated."""
    h = _HOST
    query = sa.update(h).where(h.c.hostname == hostname)
    if digest is not None:
        query = query.where(h.c.report_digest == digest)
    return context.session.execute(query.values(**values)).rowcount == 1
