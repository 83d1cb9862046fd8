"""extended_accelerator_requests.bind_timeout

Revision ID: 07cc1cd55872
Revises: 8db7069d63f0
Create Date: 2026-12-11 10:00:00

``bind_timeout``: the ``[DEFAULT]bind_timeout`` (seconds) of the
conductor that started the bind of an ARQ in BindStarted, written by the
UPDATE that moves the ARQ to BindStarted (with ``bind_started_at``) and
cleared when it leaves it.  The stuck-bind check of every conductor
fails a bind once its start plus that has passed: it failed any bind
older than the checking conductor's ``bind_timeout``, so a conductor
with a lower one (a change rolled out host by host, one raised on a
conductor for slow FPGA programming) failed binds another was still
carrying.  Seconds, not a time: the previous release does not clear the
column when it ends a bind, and a time left so could fall after the
start of a bind it starts next, failing that bind early; a number of
seconds left so is still a conductor's ``bind_timeout``, counted from
the later bind's own start.

While an ARQ is Deleting (a delete with an mdev or a fabric handle to
release marks it so first), it holds the seconds that delete has from
its mark (``bind_started_at``), after which any conductor finishes it.

A nullable column: the previous release runs on the expanded schema
unchanged (it neither sets nor reads it).  The binds it starts on an
ARQ no bind of this release has had carry no ``bind_timeout``, and are
failed once the checking conductor's ``bind_timeout`` has passed since
they started, as before.
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = '07cc1cd55872'
down_revision = '8db7069d63f0'
branch_labels = None
depends_on = None


def upgrade():
    for column in migration.missing_columns(
            'extended_accelerator_requests',
            sa.Column('bind_timeout', sa.Integer, nullable=True)):
        with op.batch_alter_table('extended_accelerator_requests') as batch:
            batch.add_column(column)
