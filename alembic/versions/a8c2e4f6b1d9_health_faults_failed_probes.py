"""health_faults of records out of the schedule count failed re-probes

Revision ID: a8c2e4f6b1d9
Revises: 6b2d8f4e1c07
Create Date: 2026-12-09 10:00:00

``health_faults`` of a device or deployable that is ``unhealthy`` or
``probing`` now counts the re-probes it failed in a row, each doubling
the wait for the next one (``cyborg.conductor.health_machine``).  The
previous release left there the count of transient faults that took it
out, which would be read as failed re-probes: such a device could wait
up to ``2**(suspect_threshold - 1)`` hold-downs for its first re-probe.
This sets it to 0 on those rows: each starts as one that has failed no
re-probe yet.  Data only, no schema change; run again (after an
interruption) it finds nothing more to change.  The previous release
reads the count of a suspect record only, so it runs on the changed rows
unchanged; a record one of its conductors takes out after this has run
(before the conductors are upgraded) keeps its count of transient
faults, as before.
"""

from alembic import op
import sqlalchemy as sa


revision = 'a8c2e4f6b1d9'
down_revision = '6b2d8f4e1c07'
branch_labels = None
depends_on = None

# The words of cyborg.common.states, as they are stored (a migration does
# not follow later changes of the code).
_OUT = ('unhealthy', 'probing')


def upgrade():
    for name in ('devices', 'deployables'):
        table = sa.table(name, sa.column('health', sa.String),
                         sa.column('health_faults', sa.Integer))
        op.execute(sa.update(table)
                   .where(table.c.health.in_(_OUT),
                          table.c.health_faults != 0)
                   .values(health_faults=0))
