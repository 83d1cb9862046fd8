"""Device and deployable health

Revision ID: 5c1f0a7e9b21
Revises: 296788e1a3d2
Create Date: 2026-11-23 11:40:00

The health state machine's columns (cyborg.conductor.health) on devices
and deployables.  ``health`` is a short string rather than an enum so that
a later health state needs no ALTER TYPE on PostgreSQL; the application
validates it against cyborg.common.states.  Existing rows start healthy.
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = '5c1f0a7e9b21'
down_revision = '296788e1a3d2'
branch_labels = None
depends_on = None

_TABLES = ('devices', 'deployables')


def upgrade():
    for table in _TABLES:
        columns = migration.missing_columns(
            table,
            sa.Column('health', sa.String(length=16),
                      server_default='healthy', nullable=False),
            sa.Column('health_reason', sa.Text(), nullable=True),
            sa.Column('health_updated_at', sa.DateTime(), nullable=True),
            sa.Column('health_faults', sa.Integer(), server_default='0',
                      nullable=False),
            sa.Column('health_flaps', sa.Integer(), server_default='0',
                      nullable=False),
            sa.Column('health_due_at', sa.DateTime(), nullable=True),
            sa.Column('health_readmitted_at', sa.DateTime(),
                      nullable=True))
        index = not migration.has_index(table, f'{table}_health_idx')
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.add_column(column)
            if index:
                batch.create_index(f'{table}_health_idx', ['health'])

