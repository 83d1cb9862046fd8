"""devices.health_code and deployables.health_code

Revision ID: 8db7069d63f0
Revises: 9f28eb616548
Create Date: 2026-11-30 16:00:00

Why a device or deployable is in its health, for the conductor's health
state machine (``cyborg.conductor.health_machine``), beside
``health_reason``, for people: the few facts read back from a record (who
took it out, whether its last re-probe timed out, whether it vanished
while failing) were read from how its reason begins.  A nullable column;
the rows of before it whose reason begins in one of the ways read back
get the code that says the same (``health_machine.REASON_CODES``), the
others keep NULL, read by their reason as before.  The previous release
runs on the expanded schema unchanged (it neither sets nor reads it; the
rows it writes are read by their reason too).  Run again (after an
interruption) it finds the columns there and fills only rows still
without a code.
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = '8db7069d63f0'
down_revision = '9f28eb616548'
branch_labels = None
depends_on = None

# How the reasons read back begin, the code each gives and the healths
# it is read in, as this release writes them (a migration does not
# follow later changes of the code).
_OUT = ('unhealthy', 'probing')
_CODES = (
    ('the device vanished or its driver was unbound', 'gone', _OUT),
    # Who took it out is not said: the conductor's rule, as before.
    ('no re-probe verdict within', 'conductor:no-verdict', _OUT),
    ('came back; re-probing', 'came-back', _OUT),
    ('the hardware vanished while allocations still hold it', 'lost',
     ('lost',)),
    ('the hardware vanished while not healthy', 'lost:unhealthy',
     ('lost',)),
    ('the hardware vanished while its device was', 'lost:in-status',
     ('lost',)),
)


def upgrade():
    for name in ('devices', 'deployables'):
        for column in migration.missing_columns(
                name, sa.Column('health_code', sa.String(32),
                                nullable=True)):
            with op.batch_alter_table(name) as batch:
                batch.add_column(column)
        table = sa.table(name, sa.column('health', sa.String),
                         sa.column('health_reason', sa.Text),
                         sa.column('health_code', sa.String))
        for beginning, code, healths in _CODES:
            op.execute(sa.update(table)
                       .where(table.c.health_code.is_(None),
                              table.c.health.in_(healths),
                              table.c.health_reason.startswith(
                                  beginning, autoescape=True))
                       .values(health_code=code))
