"""deployables.programming_until

Revision ID: e2b4d6f8a1c3
Revises: c4e8a2f6d913
Create Date: 2026-11-27 18:00:00

Set while a conductor programs a deployable (an FPGA), to the time by
which the programming must have ended: the Placement sync keeps the
provider reserved meanwhile (the reconcile used to undo the reservation
mid-write), and a mark still set after that time says the conductor died
mid-programming, so the card is taken out of the schedule until a
re-probe.  A nullable column and its index: the previous release runs on
the expanded schema unchanged (it neither sets nor reads it).
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = 'e2b4d6f8a1c3'
down_revision = 'c4e8a2f6d913'
branch_labels = None
depends_on = None


def upgrade():
    columns = migration.missing_columns(
        'deployables',
        sa.Column('programming_until', sa.DateTime(), nullable=True))
    index = 'deployables_programming_until_idx'
    index = not migration.has_index('deployables', index) and index
    with op.batch_alter_table('deployables') as batch:
        for column in columns:
            batch.add_column(column)
        if index:
            batch.create_index(index, ['programming_until'])
