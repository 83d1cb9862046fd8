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


revision = '5c1f0a7e9b21'
down_revision = '296788e1a3d2'
branch_labels = None
depends_on = None

_TABLES = ('devices', 'deployables')


def upgrade():
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('health', sa.String(length=16),
                                       server_default='healthy',
                                       nullable=False))
            batch.add_column(sa.Column('health_reason', sa.Text(),
                                       nullable=True))
            batch.add_column(sa.Column('health_updated_at', sa.DateTime(),
                                       nullable=True))
            batch.add_column(sa.Column('health_faults', sa.Integer(),
                                       server_default='0', nullable=False))
            batch.add_column(sa.Column('health_flaps', sa.Integer(),
                                       server_default='0', nullable=False))
            batch.add_column(sa.Column('health_due_at', sa.DateTime(),
                                       nullable=True))
            batch.add_column(sa.Column('health_readmitted_at', sa.DateTime(),
                                       nullable=True))
            batch.create_index(f'{table}_health_idx', ['health'])

