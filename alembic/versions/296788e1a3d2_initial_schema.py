"""Initial schema

Revision ID: 296788e1a3d2
Revises:
Create Date: 2026-11-21 21:35:44.369709

The tables of cyborg.db.models as first released.  Downgrades are not
supported (OpenStack practice): restore a backup instead.
"""

import sqlalchemy as sa

from cyborg.db import migration


revision = '296788e1a3d2'
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    migration.create_table('device_profiles',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('profile_json', sa.Text(), nullable=False),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name', name='uniq_device_profiles0name'),
    sa.UniqueConstraint('uuid', name='uniq_device_profiles0uuid')
    )
    migration.create_table('devices',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('type', sa.Enum('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD', name='device_type'), nullable=False),
    sa.Column('vendor', sa.String(length=255), nullable=False),
    sa.Column('model', sa.String(length=255), nullable=False),
    sa.Column('std_board_info', sa.Text(), nullable=True),
    sa.Column('vendor_board_info', sa.Text(), nullable=True),
    sa.Column('hostname', sa.String(length=255), nullable=False),
    sa.Column('status', sa.Enum('enabled', 'maintaining', name='device_status'), nullable=False),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid', name='uniq_devices0uuid')
    )
    migration.create_index('devices_hostname_idx', 'devices', ['hostname'])

    migration.create_table('hosts',
    sa.Column('hostname', sa.String(length=255), nullable=False),
    sa.Column('report_digest', sa.String(length=64), nullable=True),
    sa.Column('compute_rp_uuid', sa.String(length=36), nullable=True),
    sa.Column('placement_synced', sa.Boolean(), nullable=False),
    sa.Column('last_report_at', sa.DateTime(), nullable=True),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('hostname', name='uniq_hosts0hostname')
    )
    migration.create_table('nova_events',
    sa.Column('batch_id', sa.String(length=36), nullable=False),
    sa.Column('instance_uuid', sa.String(length=36), nullable=False),
    sa.Column('arq_uuid', sa.String(length=36), nullable=False),
    sa.Column('status', sa.Enum('completed', 'failed', name='nova_event_status'), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(), nullable=True),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    migration.create_index('nova_events_next_attempt_at_idx', 'nova_events', ['next_attempt_at'])

    migration.create_table('controlpath_ids',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('cpid_type', sa.Enum('PCI', name='cpid_type'), nullable=False),
    sa.Column('cpid_info', sa.String(length=255), nullable=False),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid', name='uniq_controlpath_ids0uuid')
    )
    migration.create_index('controlpath_ids_device_id_idx', 'controlpath_ids', ['device_id'])

    migration.create_table('deployables',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('root_id', sa.Integer(), nullable=True),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('num_accelerators', sa.Integer(), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('driver_name', sa.String(length=255), nullable=True),
    sa.Column('rp_uuid', sa.String(length=36), nullable=True),
    sa.Column('bitstream_id', sa.String(length=36), nullable=True),
    sa.Column('gone', sa.Boolean(), nullable=False),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['parent_id'], ['deployables.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['root_id'], ['deployables.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name', name='uniq_deployables0name'),
    sa.UniqueConstraint('uuid', name='uniq_deployables0uuid')
    )
    migration.create_index('deployables_device_id_idx', 'deployables', ['device_id'])
    migration.create_index('deployables_rp_uuid_idx', 'deployables', ['rp_uuid'])

    migration.create_table('attach_handles',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('deployable_id', sa.Integer(), nullable=False),
    sa.Column('cpid_id', sa.Integer(), nullable=False),
    sa.Column('in_use', sa.Boolean(), nullable=False),
    sa.Column('attach_type', sa.Enum('PCI', 'MDEV', 'TEST_PCI', name='attach_type'), nullable=False),
    sa.Column('attach_info', sa.Text(), nullable=False),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['cpid_id'], ['controlpath_ids.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid', name='uniq_attach_handles0uuid')
    )
    migration.create_index('attach_handles_deployable_id_in_use_idx', 'attach_handles', ['deployable_id', 'in_use'])

    migration.create_table('attributes',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('deployable_id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('deployable_id', 'key', name='uniq_attributes0deployable_id0key'),
    sa.UniqueConstraint('uuid', name='uniq_attributes0uuid')
    )
    migration.create_table('extended_accelerator_requests',
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('state', sa.Enum('Initial', 'BindStarted', 'Bound', 'Unbound', 'BindFailed', 'UnbindFailed', 'Deleting', name='arq_state'), nullable=False),
    sa.Column('device_profile_id', sa.Integer(), nullable=False),
    sa.Column('device_profile_group_id', sa.Integer(), nullable=False),
    sa.Column('project_id', sa.String(length=255), nullable=True),
    sa.Column('hostname', sa.String(length=255), nullable=True),
    sa.Column('device_rp_uuid', sa.String(length=36), nullable=True),
    sa.Column('instance_uuid', sa.String(length=36), nullable=True),
    sa.Column('attach_handle_id', sa.Integer(), nullable=True),
    sa.Column('deployable_id', sa.Integer(), nullable=True),
    sa.Column('bind_started_at', sa.DateTime(), nullable=True),
    sa.Column('bind_failure_reason', sa.Text(), nullable=True),
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['attach_handle_id'], ['attach_handles.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['device_profile_id'], ['device_profiles.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('attach_handle_id', name='uniq_extended_accelerator_requests0attach_handle_id'),
    sa.UniqueConstraint('uuid', name='uniq_extended_accelerator_requests0uuid')
    )
    migration.create_index('extended_arqs_device_profile_id_idx', 'extended_accelerator_requests', ['device_profile_id'])
    migration.create_index('extended_arqs_instance_uuid_idx', 'extended_accelerator_requests', ['instance_uuid'])
    migration.create_index('extended_arqs_project_id_idx', 'extended_accelerator_requests', ['project_id'])
    migration.create_index('extended_arqs_state_idx', 'extended_accelerator_requests', ['state'])

