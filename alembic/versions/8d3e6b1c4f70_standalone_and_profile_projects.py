"""Standalone ARQ consumers and project-scoped device profiles

Revision ID: 8d3e6b1c4f70
Revises: 7d3e9b2a4c15
Create Date: 2026-12-02 10:00:00

Device profiles get an owner project and a visibility ('public', the
default every existing profile keeps, or 'private'), and a table of the
projects a private profile is shared with (microversion 2.5).  ARQs
allocated without Nova record who holds them: a consumer id and a
free-form consumer type (microversion 2.6).  ``visibility`` is a short
string rather than an enum, validated by the application
(cyborg.common.states), so no PostgreSQL type is involved.
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = '8d3e6b1c4f70'
down_revision = '7d3e9b2a4c15'
branch_labels = None
depends_on = None


def upgrade():
    columns = migration.missing_columns(
        'device_profiles',
        sa.Column('project_id', sa.String(length=255), nullable=True),
        sa.Column('visibility', sa.String(length=16),
                  server_default='public', nullable=False))
    with op.batch_alter_table('device_profiles') as batch:
        for column in columns:
            batch.add_column(column)
    migration.create_table(
        'device_profile_projects',
        sa.Column('profile_id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.String(length=255), nullable=False),
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(['profile_id'], ['device_profiles.id'],
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('profile_id', 'project_id',
                            name='uniq_device_profile_projects0'
                                 'profile_id0project_id'),
    )
    migration.create_index('device_profile_projects_project_id_idx',
                           'device_profile_projects', ['project_id'])
    columns = migration.missing_columns(
        'extended_accelerator_requests',
        sa.Column('consumer_id', sa.String(length=255), nullable=True),
        sa.Column('consumer_type', sa.String(length=255), nullable=True))
    with op.batch_alter_table('extended_accelerator_requests') as batch:
        for column in columns:
            batch.add_column(column)
