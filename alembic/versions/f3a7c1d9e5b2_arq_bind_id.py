"""extended_accelerator_requests.bind_id

Revision ID: f3a7c1d9e5b2
Revises: e2b4d6f8a1c3
Create Date: 2026-11-29 16:00:00

Which bind an ARQ in BindStarted or Bound belongs to (the bind's batch:
one per PATCH, or one per standalone allocation).  A bind whose slow work
(FPGA programming, an mdev) runs after its PATCH was answered guards its
writes on it: an ARQ unbound and bound again meanwhile belongs to another
bind, which the first one's late writes must not end, fail or undo.  A
nullable column: the previous release runs on the expanded schema
unchanged (it neither sets nor reads it; its binds' rows carry NULL).
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = 'f3a7c1d9e5b2'
down_revision = 'e2b4d6f8a1c3'
branch_labels = None
depends_on = None


def upgrade():
    for column in migration.missing_columns(
            'extended_accelerator_requests',
            sa.Column('bind_id', sa.String(36),
                      nullable=True)):
        with op.batch_alter_table('extended_accelerator_requests') as batch:
            batch.add_column(column)
