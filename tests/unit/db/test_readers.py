"""A reader's transaction is a connection alone (no ORM session is made
for a read); a reader called inside a writer reads through the writer's
own connection, so it sees what the writer has written but not yet
committed, and leaves the writer's transaction open.  On the real
MariaDB and PostgreSQL, where another connection would not see those
rows."""

import pytest
from oslo_db import exception as db_exc

from cyborg.common import context as cyborg_context
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import hosts as host_db
from tests.fixtures import api as api_fixture


@pytest.fixture(params=['mysql', 'postgresql'])
def context(request):
    with api_fixture.database_in_use(request.param):
        yield cyborg_context.get_admin_context()


def test_a_read_is_a_connection_without_a_session(context):
    @db_api.reader
    def read(context):
        with pytest.raises(db_exc.ContextNotRequestedError):
            context.session     # noqa: B018 - no session is made
        assert _sql.connection(context) is context.connection
        return host_db.get(context, 'nowhere')

    assert read(context) is None


def test_a_read_inside_a_write_sees_its_rows_and_leaves_it_open(context):
    @db_api.writer
    def write_then_read(context):
        context.session.add(models.Host(hostname='h-new'))
        context.session.flush()
        seen = host_db.get(context, 'h-new')
        # Still the writer's session, still open: more is written after.
        context.session.add(models.Host(hostname='h-after'))
        return seen

    seen = write_then_read(context)
    assert seen is not None and seen['hostname'] == 'h-new'
    assert [h['hostname'] for h in host_db.list_all(context)] == [
        'h-after', 'h-new']


def test_reads_inside_a_read_share_its_connection(context):
    @db_api.reader
    def outer(context):
        mine = context.connection

        @db_api.reader
        def inner(context):
            return context.connection
        return inner(context) is mine

    assert outer(context)
