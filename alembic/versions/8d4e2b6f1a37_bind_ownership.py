"""Bind ownership, Nova event ownership and the compute node's name

Revision ID: 8d4e2b6f1a37
Revises: 5c1f0a7e9b21
Create Date: 2026-11-30 10:00:00

- ``extended_accelerator_requests.bind_owner``: the conductor
  (``[DEFAULT]host``) carrying a bind through, so that a conductor that
  restarts fails at once the binds it left in BindStarted, and never those
  another conductor is running (cyborg.conductor.arq_binding, "recover").
- ``nova_events.owner``: the conductor that recorded an event and delivers
  its batch; a restarted one re-sends its own batches at once instead of
  waiting for them to fall due.
- ``hosts.compute_node_name``: the name of the compute node provider the
  sync found (Nova names it after the hypervisor's host name, which may
  differ from the service host); a bind naming that node is on the host.
- ``extended_accelerator_requests.bind_failure_reason`` now also holds why
  an unbind failed (state UnbindFailed); no change to the column.
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = '8d4e2b6f1a37'
down_revision = '5c1f0a7e9b21'
branch_labels = None
depends_on = None


def _add(table, column, index=None):
    columns = migration.missing_columns(table, column)
    index = index and not migration.has_index(table, index) and index
    with op.batch_alter_table(table) as batch:
        for missing in columns:
            batch.add_column(missing)
        if index:
            batch.create_index(index, [column.name])


def upgrade():
    _add('extended_accelerator_requests',
         sa.Column('bind_owner', sa.String(length=255), nullable=True),
         'extended_arqs_bind_owner_idx')
    _add('nova_events', sa.Column('owner', sa.String(length=255),
                                  nullable=True),
         'nova_events_owner_idx')
    _add('hosts', sa.Column('compute_node_name', sa.String(length=255),
                            nullable=True))
