"""Host names compared exactly on MariaDB/MySQL

Revision ID: d4b8e2f1a7c3
Revises: c3f1a7d92e58
Create Date: 2026-12-06 10:00:00

MariaDB's and MySQL's default collations ignore case, so there the
hosts table and the devices' host column took ``compute-1`` for
``Compute-1``: a host whose name changed case only (a ``[DEFAULT]host``
or FQDN spelt anew) reported as the old host, and two hosts whose names
differ in case only were one.  SQLite and PostgreSQL compare exactly;
so now do ``hosts.hostname``, ``hosts.compute_node_name`` and
``devices.hostname``, with a binary collation
(``cyborg.db.models.EXACT_NAME``), as c3f1a7d92e58 did for deployable
names.  Nothing to do on SQLite and PostgreSQL.

The unique key on the host name cannot fail on rows already there:
names equal under the binary collation were equal under the old one.
A host renamed in case only before this migration kept the old
spelling's row; its agent now reports under its own name, a host of its
own, and the old one falls silent (``cyborg-manage host forget`` removes
it).  The two tables are rebuilt on MariaDB/MySQL: reports wait
meanwhile (seconds for a hundred thousand devices).  The previous
release runs on the changed schema unchanged: its lookups just match
exactly.
"""

from cyborg.db import migration


revision = 'd4b8e2f1a7c3'
down_revision = 'c3f1a7d92e58'
branch_labels = None
depends_on = None

# (table, column, nullable)
_EXACT = (('hosts', 'hostname', False),
          ('hosts', 'compute_node_name', True),
          ('devices', 'hostname', False))


def upgrade():
    for table, column, nullable in _EXACT:
        migration.exact_name(table, column, nullable)
