"""Remote (fabric-attached) accelerator pools

Revision ID: a3c5e7f9b2d4
Revises: 8d4e2b6f1a37
Create Date: 2026-11-30 10:00:00

Pools of accelerators that no agent discovers (NVMe-oF targets, GPUs
behind a fabric manager), registered by an admin and shared in Placement
with the compute nodes of aggregates (cyborg.conductor.remote_pools), and
their handles, each a fabric address.  An ARQ bound to one holds the pool
and the handle in two new columns instead of a deployable and an attach
handle, so the ``attach_type`` enum of attach_handles is left alone.
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = 'a3c5e7f9b2d4'
down_revision = '8d4e2b6f1a37'
branch_labels = None
depends_on = None


def upgrade():
    migration.create_table(
        'remote_pools',
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('resource_class', sa.String(length=255), nullable=False),
        sa.Column('traits', sa.Text(), nullable=False),
        sa.Column('aggregates', sa.Text(), nullable=False),
        sa.Column('fabric_driver', sa.String(length=255), nullable=False),
        sa.Column('rp_uuid', sa.String(length=36), nullable=False),
        sa.Column('state', sa.String(length=16), server_default='active',
                  nullable=False),
        sa.Column('placement_synced', sa.Boolean(), nullable=False),
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('name', name='uniq_remote_pools0name'),
        sa.UniqueConstraint('rp_uuid', name='uniq_remote_pools0rp_uuid'),
        sa.UniqueConstraint('uuid', name='uniq_remote_pools0uuid'))
    migration.create_table(
        'remote_pool_handles',
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('pool_id', sa.Integer(), nullable=False),
        sa.Column('fabric_address', sa.String(length=255), nullable=False),
        sa.Column('in_use', sa.Boolean(), nullable=False),
        sa.Column('hostname', sa.String(length=255), nullable=True),
        sa.Column('attach_info', sa.Text(), nullable=False),
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(['pool_id'], ['remote_pools.id'],
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('pool_id', 'fabric_address',
                            name='uniq_remote_pool_handles0pool_id0'
                                 'fabric_address'),
        sa.UniqueConstraint('uuid', name='uniq_remote_pool_handles0uuid'))
    migration.create_index('remote_pool_handles_pool_id_in_use_idx',
                           'remote_pool_handles', ['pool_id', 'in_use'])
    table = 'extended_accelerator_requests'
    columns = migration.missing_columns(
        table, sa.Column('remote_pool_id', sa.Integer(), nullable=True),
        sa.Column('remote_handle_id', sa.Integer(), nullable=True))
    keys = [(name, target, column) for name, target, column in (
        ('extended_arqs_remote_pool_id_fkey', 'remote_pools',
         'remote_pool_id'),
        ('extended_arqs_remote_handle_id_fkey', 'remote_pool_handles',
         'remote_handle_id')) if not migration.has_foreign_key(table, name)]
    unique = 'uniq_extended_accelerator_requests0remote_handle_id'
    unique = not migration.has_index(table, unique) and unique
    index = 'extended_arqs_remote_pool_id_idx'
    index = not migration.has_index(table, index) and index
    with op.batch_alter_table(table) as batch:
        for column in columns:
            batch.add_column(column)
        for name, target, column in keys:
            batch.create_foreign_key(name, target, [column], ['id'],
                                     ondelete='SET NULL')
        if unique:
            batch.create_unique_constraint(unique, ['remote_handle_id'])
        if index:
            batch.create_index(index, ['remote_pool_id'])
