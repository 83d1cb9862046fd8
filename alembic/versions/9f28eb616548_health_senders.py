"""health_senders

Revision ID: 9f28eb616548
Revises: a8c2e4f6b1d9
Create Date: 2026-12-10 10:00:00

Per host and agent health monitor (``sender``), the highest reading
number whose readings a conductor applied.  The conductor reads and
moves it on in the transaction that applies a numbered health report,
under the host's row lock: a send that timed out but is delivered late
and its re-send are applied once, even when two conductors serve them
or one restarted in between (it was remembered in each conductor's
memory).  A new table: the previous release runs on the expanded schema
unchanged (it neither writes nor reads it, and keeps remembering in its
memory).
"""

import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models


revision = '9f28eb616548'
down_revision = 'a8c2e4f6b1d9'
branch_labels = None
depends_on = None


def upgrade():
    migration.create_table(
        'health_senders',
        sa.Column('hostname', models.EXACT_NAME, nullable=False),
        sa.Column('sender', models.EXACT_NAME, nullable=False),
        sa.Column('seq', sa.BigInteger(), nullable=False),
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('created_at', models.DATETIME, nullable=True),
        sa.Column('updated_at', models.DATETIME, nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('hostname', 'sender',
                            name='uniq_health_senders0hostname0sender'))
