"""hosts.sync_serial

Revision ID: b7e1d3f5a9c2
Revises: f3a7c1d9e5b2
Create Date: 2026-11-29 16:10:00

Counts the changes that made Placement lag a host's database rows (a
report that changed something, a health change, a device's status, an
FPGA programming mark): each sets ``placement_synced`` false and adds
one.  A Placement sync reads it before the rows it writes from and
records the host as synced only if it has not moved since: a sync that
started before a later change (whose own sync may have failed) can no
longer mark the host synced with the older state in Placement.  A column
with a server default: the previous release runs on the expanded schema
unchanged (it neither sets nor reads it).
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = 'b7e1d3f5a9c2'
down_revision = 'f3a7c1d9e5b2'
branch_labels = None
depends_on = None


def upgrade():
    for column in migration.missing_columns(
            'hosts',
            sa.Column('sync_serial', sa.Integer(),
                      nullable=False, server_default='0')):
        with op.batch_alter_table('hosts') as batch:
            batch.add_column(column)
