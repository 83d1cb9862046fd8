"""An index on hosts.compute_rp_uuid

Revision ID: 5b9e1d3f7a20
Revises: 07cc1cd55872
Create Date: 2026-11-30 20:00:00

Two host rows may record one compute node provider (a host renamed
before its old name was forgotten); while they do, neither offers its
providers.  Whether a host shares its compute node so is read by every
bind's take of a free handle, by every Placement sync and by the
exports (for each host they list), each looking for another row with
the same ``compute_rp_uuid``: without an index, a read of the whole
hosts table each time.  Only an index: the previous release runs
on the expanded schema unchanged.
"""

from alembic import op

from cyborg.db import migration


revision = '5b9e1d3f7a20'
down_revision = '07cc1cd55872'
branch_labels = None
depends_on = None


def upgrade():
    if migration.has_index('hosts', 'hosts_compute_rp_uuid_idx'):
        return
    with op.batch_alter_table('hosts') as batch:
        batch.create_index('hosts_compute_rp_uuid_idx', ['compute_rp_uuid'])
