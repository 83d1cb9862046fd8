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

