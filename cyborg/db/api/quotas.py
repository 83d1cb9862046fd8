"""Quota usage and the per-project lock quota-checked creates take.

Why a lock row: two creates of one project that each count the project's
ARQs and then insert would both pass a limit they exceed together.  A
create that enforces quotas therefore starts its transaction by locking
the project's row of ``quota_locks`` (inserting it when new) and counts
only then; the second create waits for the first to commit and counts its
rows.

The lock must be the transaction's first statement.  On MariaDB and MySQL
(REPEATABLE READ) a plain SELECT reads the snapshot taken at the
transaction's first read: a count made after the lock but in a snapshot
taken before it would miss the rows of the create that held the lock.
PostgreSQL (READ COMMITTED) sees every commit made before each statement,
and SQLite runs one writer at a time (``write_retrying`` takes its write
lock first).  The upsert is one statement on every engine, so a project's
first creates racing to insert its row do not fail on the unique key; a
deadlock between them is retried by ``write_retrying``.

Every lock changes the row (its ``generation`` grows): on a Galera
cluster only a write that changes a row certifies against another node's,
so two creates on two nodes conflict (one is retried) instead of both
counting the usage before the other's rows.  ``updated_at`` alone, in
whole seconds on MariaDB, did not change within a second.

A row holds nothing but its lock, so the rows of projects left without
ARQs are deleted by a periodic (``unused_locks``, ``delete_unused``);
else every project that ever created one under quotas kept its row for
ever.  Deleting a row no transaction holds is harmless: the next create
of its project inserts it again.  A row a create holds (it locked it and
has not committed its ARQs yet, so its project may still show none) is
never deleted under it: the purge locks the rows it deletes, skipping
those locked (``FOR UPDATE SKIP LOCKED``), and a create that comes
while the purge holds its project's row waits for the purge's commit,
then inserts the row again (a deadlock between such creates is retried
by ``write_retrying``).  SQLite has no row locks and needs none: its
writers run one at a time.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer

_LOCK = models.QuotaLock.__table__
_ARQ = models.ExtARQ.__table__
_PROFILE = models.DeviceProfile.__table__


@writer
def lock_project(context, project_id):
    """Lock the project's quota row until the transaction ends (inserting
    it when new)."""
    now = models._now()
    dialect = _sql.connection(context).dialect.name
    values = {'project_id': project_id, 'created_at': now}
    moved = {'updated_at': now, 'generation': _LOCK.c.generation + 1}
    if dialect == 'postgresql':
        statement = postgresql.insert(_LOCK).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=['project_id'], set_=moved)
    elif dialect in ('mysql', 'mariadb'):
        statement = mysql.insert(_LOCK).values(**values)
        statement = statement.on_duplicate_key_update(**moved)
    else:
        statement = sqlite.insert(_LOCK).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=['project_id'], set_=moved)
    _sql.connection(context).execute(statement)


@reader
def held(context, project_id):
    """[(profile_json, group index, number of ARQs)] of the project's ARQs,
    one item per profile group it has ARQs of (two indexed queries)."""
    if not _sql.matchable(project_id):
        return []
    counts = _sql.connection(context).execute(
        sa.select(_ARQ.c.device_profile_id, _ARQ.c.device_profile_group_id,
                  sa.func.count())
        .where(_ARQ.c.project_id == project_id)
        .group_by(_ARQ.c.device_profile_id,
                  _ARQ.c.device_profile_group_id)).all()
    if not counts:
        return []
    profiles = dict(_sql.connection(context).execute(
        sa.select(_PROFILE.c.id, _PROFILE.c.profile_json)
        .where(_PROFILE.c.id.in_({row[0] for row in counts}))).all())
    return [(profiles.get(profile_id), group_id, count)
            for profile_id, group_id, count in counts]



@reader
def unused_locks(context, after_id, limit):
    """Ids, in order, of up to ``limit`` lock rows past ``after_id`` whose
    project has no ARQ: a plain read, which locks nothing (a locking scan
    would hold the rows, and on MariaDB the gaps, of busy projects too)."""
    return _sql.connection(context).execute(
        _UNUSED, {'after_id': after_id, 'limit': limit}).scalars().all()


@writer
def delete_unused(context, ids):
    """Delete those of the lock rows ``ids`` that no transaction holds and
    whose project still has no ARQ (``unused_locks`` read them without a
    lock); returns how many went."""
    connection = _sql.connection(context)
    locked = connection.execute(_LOCK_UNUSED,
                                {'ids': list(ids)}).scalars().all()
    return _delete_locked(connection, locked) if locked else 0


def _delete_locked(connection, ids):
    """Delete the lock rows ``ids``, which this transaction holds."""
    return connection.execute(_DELETE, {'ids': ids}).rowcount


# Built once.  The project's ARQs are found by extended_arqs' project_id
# index; the lock rows by their primary key.
_NO_ARQ = ~sa.exists().where(_ARQ.c.project_id == _LOCK.c.project_id)
_UNUSED = (sa.select(_LOCK.c.id)
           .where(_LOCK.c.id > sa.bindparam('after_id'), _NO_ARQ)
           .order_by(_LOCK.c.id).limit(sa.bindparam('limit')))
_LOCK_UNUSED = (sa.select(_LOCK.c.id)
                .where(_LOCK.c.id.in_(sa.bindparam('ids', expanding=True)),
                       _NO_ARQ)
                .with_for_update(skip_locked=True))
_DELETE = sa.delete(_LOCK).where(
    _LOCK.c.id.in_(sa.bindparam('ids', expanding=True)))
