"""Quota locks

Revision ID: 7d3e9b2a4c15
Revises: a3c5e7f9b2d4
Create Date: 2026-12-01 10:00:00

One row per project that created accelerator requests while quotas were
enforced.  Creating ARQs locks the project's row first, so that two
creates of one project count its usage one after the other
(cyborg.db.api.quotas, doc/source/quotas.rst).
"""

import sqlalchemy as sa

from cyborg.db import migration


revision = '7d3e9b2a4c15'
down_revision = 'a3c5e7f9b2d4'
branch_labels = None
depends_on = None


def upgrade():
    migration.create_table(
        'quota_locks',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.Column('project_id', sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('project_id',
                            name='uniq_quota_locks0project_id'))
