"""quota_locks.generation; project ids, pool names, fabric addresses,
attribute keys and deployable names compared exactly

Revision ID: c3f1a7d92e58
Revises: 9a4c6e8b1d3f
Create Date: 2026-11-29 21:40:00

A quota-checked create locks its project's ``quota_locks`` row by
writing it.  The write set only ``updated_at``, whole seconds on MariaDB:
within a second it changed nothing, and a Galera node then sends no
write set for the row, so two creates on two nodes both counted the
usage before the other's rows and together passed the limit.  Every lock
now moves ``generation`` on.  A column with a server default: the
previous release runs on the expanded schema unchanged (its lock still
works on a single server, and leaves the column as it is).

On MariaDB and MySQL the project ids of ARQs and of the quota locks,
the names of remote pools, the fabric addresses of their handles and the
keys of attributes are compared exactly (binary collation,
``cyborg.db.models.EXACT_NAME``), as they are on SQLite and PostgreSQL:
a project ``DEMO`` was charged for, and saw, the ARQs of ``demo``;
``DELETE /v2/remote_pools/GPU-x`` deleted the pool ``Gpu-x``; a pool
could not have handles ``nqn.A`` and ``nqn.a``.  Deployable names too: a
host whose name changed case only, while an instance held one of its
devices, failed every report (the new spelling's deployable collided
with the one kept for the instance) until the instance went.  The unique keys cannot
fail on rows already there (values equal under the binary collation
were equal under the old one).  The ARQ table is rebuilt for it on MariaDB
(writes to it wait meanwhile: seconds for a hundred thousand rows).
Nothing else to do on SQLite and PostgreSQL.
"""

from alembic import op
import sqlalchemy as sa

from cyborg.db import migration


revision = 'c3f1a7d92e58'
down_revision = '9a4c6e8b1d3f'
branch_labels = None
depends_on = None

# (table, column, nullable)
_EXACT = (('quota_locks', 'project_id', False),
          ('extended_accelerator_requests', 'project_id', True),
          ('remote_pools', 'name', False),
          ('remote_pool_handles', 'fabric_address', False),
          ('attributes', 'key', False),
          ('deployables', 'name', False))


def upgrade():
    for column in migration.missing_columns(
            'quota_locks',
            sa.Column('generation', sa.BigInteger(), nullable=False,
                      server_default='0')):
        with op.batch_alter_table('quota_locks') as batch:
            batch.add_column(column)
    for table, column, nullable in _EXACT:
        migration.exact_name(table, column, nullable)
