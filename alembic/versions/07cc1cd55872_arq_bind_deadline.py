"""extended_accelerator_requests.bind_deadline

Revision ID: 07cc1cd55872
Revises: 8db7069d63f0
Create Date: 2026-12-11 10:00:00

The time the bind of an ARQ in BindStarted has until: its start plus
the ``[DEFAULT]bind_timeout`` of the conductor that started it, written
by the UPDATE that moves the ARQ to BindStarted and cleared when it
leaves it.  The stuck-bind check of every conductor fails a bind once
its own deadline has passed: it failed any bind older than the checking
conductor's ``bind_timeout``, so a conductor with a lower one (a change
rolled out host by host, one raised on a conductor for slow FPGA
programming) failed binds another was still carrying.

A nullable column: the previous release runs on the expanded schema
unchanged (it neither sets nor reads it).  The binds it starts carry
NULL, and are failed once the checking conductor's ``bind_timeout`` has
passed since they started, as before.
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models


revision = '07cc1cd55872'
down_revision = '8db7069d63f0'
branch_labels = None
depends_on = None


def upgrade():
    for column in migration.missing_columns(
            'extended_accelerator_requests',
            sa.Column('bind_deadline', models.DATETIME, nullable=True)):
        with op.batch_alter_table('extended_accelerator_requests') as batch:
            batch.add_column(column)
