"""Device profile names and project ids compared exactly on MariaDB/MySQL

Revision ID: 48d9677effd2
Revises: 35fe6285a556
Create Date: 2026-11-29 19:20:00

MariaDB's and MySQL's default collations ignore case: Nova's
``GET /v2/device_profiles?name=FPGA-SMALL`` found the profile
``fpga-small``, a profile ``FPGA-SMALL`` could not be made beside it, and
a DELETE or an ARQ create naming ``FPGA-small`` took ``fpga-small``.
SQLite and PostgreSQL compare exactly, as Cyborg did; so now do these
columns, with a binary collation (``cyborg.db.models.EXACT_NAME``).  The
project ids a private profile is owned by and shared with too: opaque
strings, compared as given.  Nothing to do on SQLite and PostgreSQL.

The unique keys cannot fail on rows already there: names equal under the
binary collation were equal under the old one, which already refused
them.  The tables are rebuilt (they are small).  The previous release
runs on the changed schema unchanged: its lookups just match exactly.
"""

from cyborg.db import migration


revision = '48d9677effd2'
down_revision = '35fe6285a556'
branch_labels = None
depends_on = None

# (table, column, nullable)
_COLUMNS = (('device_profiles', 'name', False),
            ('device_profiles', 'project_id', True),
            ('device_profile_projects', 'project_id', False))


def upgrade():
    for table, column, nullable in _COLUMNS:
        migration.exact_name(table, column, nullable)
