"""placement_releases

Revision ID: 35fe6285a556
Revises: d5f8b2a4c6e1
Create Date: 2026-11-29 18:40:00

The Placement consumers whose allocations cyborg owes a release: the
claim of a standalone allocation whose accelerator request was deleted
while it was made, which Placement could not release then.  No ARQ row
is left to say the claim is there; a row here does until the stuck-bind
periodic has released it (cyborg.conductor.arq_allocation).  A new
table: the previous release runs on the expanded schema unchanged (it
neither writes nor reads it).
"""

import sqlalchemy as sa

from cyborg.db import migration


revision = '35fe6285a556'
down_revision = 'd5f8b2a4c6e1'
branch_labels = None
depends_on = None


def upgrade():
    migration.create_table(
        'placement_releases',
        sa.Column('consumer_uuid', sa.String(length=36), nullable=False),
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('consumer_uuid',
                            name='uniq_placement_releases0consumer_uuid'))
