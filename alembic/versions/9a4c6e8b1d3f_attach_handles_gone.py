"""attach_handles.gone

Revision ID: 9a4c6e8b1d3f
Revises: 48d9677effd2
Create Date: 2026-11-29 20:10:00

Marks an attach handle its agent no longer reports, kept while an ARQ
holds it: once the ARQ lets it go, no bind takes it (its function may be
gone), and the next full report deletes it.  Before, it was free again
and the next bind could be given hardware that was no longer there.  A
column with a server default: the previous release runs on the expanded
schema unchanged (it neither sets nor reads it).
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = '9a4c6e8b1d3f'
down_revision = '48d9677effd2'
branch_labels = None
depends_on = None


def upgrade():
    for column in migration.missing_columns(
            'attach_handles',
            sa.Column('gone', sa.Boolean(), nullable=False,
                      server_default='0')):
        with op.batch_alter_table('attach_handles') as batch:
            batch.add_column(column)
