"""An index on deployables.gone

Revision ID: c4e8a2f6d913
Revises: 8d3e6b1c4f70
Create Date: 2026-11-27 08:10:00

Every conductor looks for the deployables kept as gone once a minute
(``[conductor]gone_check_interval``); few rows are, and without an index
each look read the whole table.  Only an index: the previous release
runs on the expanded schema unchanged.
"""

from alembic import op

from cyborg.db import migration


revision = 'c4e8a2f6d913'
down_revision = '8d3e6b1c4f70'
branch_labels = None
depends_on = None


def upgrade():
    if migration.has_index('deployables', 'deployables_gone_idx'):
        return
    with op.batch_alter_table('deployables') as batch:
        batch.create_index('deployables_gone_idx', ['gone'])
