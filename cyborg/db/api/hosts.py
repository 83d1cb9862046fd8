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
    result = _sql.connection(context).execute(
        sa.update(h).where(h.c.hostname == hostname,
                           h.c.report_digest == digest,
                           h.c.placement_synced.is_(True))
        .values(last_report_at=timeutils.utcnow()))
    return result.rowcount == 1


@writer
def lock(context, hostname):
    """The host's row (dict), locked until the transaction ends
    (serialising a change with the host's reports); None when unknown."""
    h = _HOST
    row = _sql.connection(context).execute(
        sa.select(h).where(h.c.hostname == hostname).with_for_update()
    ).mappings().first()
    return dict(row) if row is not None else None


@writer
def lock_or_create(context, hostname):
    """The host's row (dict), locked until the transaction ends; inserted
    when new, which locks it too (a racing insert of the same host raises
    DBDuplicateEntry: retry).

    Whether it exists is read first without a lock: a locking read of a
    missing row takes a gap lock (MariaDB, MySQL), and first reports of
    new hosts, whose names share that gap, would then deadlock on their
    inserts."""
    h = _HOST
    if get(context, hostname) is not None:
        return lock(context, hostname)
    values = {'hostname': hostname, 'placement_synced': False,
              'created_at': timeutils.utcnow()}
    _sql.connection(context).execute(sa.insert(h).values(**values))
    return dict({c.name: None for c in h.c if c.name != 'id'}, **values)


@reader
def get(context, hostname):
    """The host's row (dict), or None."""
    if not _sql.matchable(hostname):
        return None
    h = _HOST
    row = _sql.connection(context).execute(
        sa.select(h).where(h.c.hostname == hostname)).mappings().first()
    return dict(row) if row else None


@reader
def list_all(context):
    """[{hostname, compute_rp_uuid, placement_synced, report_digest}]."""
    h = _HOST
    return _sql.rows(_sql.connection(context).execute(
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
    result = _sql.connection(context).execute(query.values(**values))
    return result.rowcount == 1
