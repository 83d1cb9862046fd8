import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db import models


def test_schema_roundtrip(db, admin_context):
    @db_api.writer
    def _add(context):
        context.session.add(models.Host(hostname='h1'))

    @db_api.reader
    def _get(context):
        # A reader's transaction is a connection (Core), not a session.
        return context.connection.execute(
            sa.select(models.Host.hostname)).scalar_one()

    _add(admin_context)
    assert _get(admin_context) == 'h1'
