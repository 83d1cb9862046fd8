"""Timestamps in microseconds on MariaDB/MySQL; exact names NO PAD on
MariaDB

Revision ID: 6b2d8f4e1c07
Revises: d4b8e2f1a7c3
Create Date: 2026-12-08 10:00:00

MariaDB's and MySQL's DATETIME kept whole seconds, where PostgreSQL and
SQLite keep microseconds: two changes of a host within one second gave
its export one pool generation (a pool of several slices could be read
half old, half new), and health, programming and Nova event timers moved
by up to a second.  Every timestamp column becomes DATETIME(6)
(``cyborg.db.models.DATETIME``); the times already stored are kept.

On MariaDB, the columns compared exactly (``cyborg.db.models.EXACT_NAME``)
move from ``utf8mb4_bin`` to ``utf8mb4_nopad_bin``: a binary collation
that also tells trailing spaces apart, so a profile ``gpu `` may be made
beside ``gpu`` and each is found by its own name, as on PostgreSQL and
SQLite.  No unique key can fail on it (values equal under it are equal
bytes, equal under any collation).  MySQL keeps ``utf8mb4_bin``.

Each table is rebuilt on MariaDB/MySQL, in one ALTER TABLE: its writes
wait meanwhile (seconds for a hundred thousand rows).  Nothing to do on
SQLite and PostgreSQL.  The previous release runs on the changed schema
unchanged: its times keep their microseconds, and its lookups by name
match trailing spaces exactly.
"""

import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models


revision = '6b2d8f4e1c07'
down_revision = 'd4b8e2f1a7c3'
branch_labels = None
depends_on = None

_STAMPS = ('created_at', 'updated_at')
_HEALTH = ('health_updated_at', 'health_due_at', 'health_readmitted_at')

# {table: (its timestamp columns, its exactly compared columns)}
_COLUMNS = {
    'device_profiles': (_STAMPS, ('name', 'project_id')),
    'device_profile_projects': (_STAMPS, ('project_id',)),
    'devices': (_STAMPS + _HEALTH, ('hostname',)),
    'hosts': (_STAMPS + ('last_report_at',),
              ('hostname', 'compute_node_name')),
    'controlpath_ids': (_STAMPS, ()),
    'deployables': (_STAMPS + _HEALTH + ('programming_until',), ('name',)),
    'attach_handles': (_STAMPS, ()),
    'attributes': (_STAMPS, ('key',)),
    'extended_accelerator_requests': (_STAMPS + ('bind_started_at',),
                                      ('project_id',)),
    'remote_pools': (_STAMPS, ('name',)),
    'remote_pool_handles': (_STAMPS, ('fabric_address',)),
    'nova_events': (_STAMPS + ('next_attempt_at',), ()),
    'quota_locks': (_STAMPS, ('project_id',)),
    'placement_releases': (_STAMPS, ()),
}


def upgrade():
    for table, (stamps, names) in _COLUMNS.items():
        migration.retype(
            table, *[sa.Column(name, models.DATETIME) for name in stamps],
            *[sa.Column(name, models.EXACT_NAME) for name in names])
