"""Migration 9f28eb616548: the ``health_senders`` table, where the
conductors keep per host and agent health monitor the highest reading
number applied (cyborg.conductor.health).  A new table: run again (after
an interruption) it finds it there and keeps its rows; a downgrade is
refused, as every one is (restore the backup instead)."""

import pytest
import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_db.sqlalchemy import engines

from cyborg.db import migration
from cyborg.db import models
from tests.fixtures import databases

BEFORE = 'a8c2e4f6b1d9'
REVISION = '9f28eb616548'


def _senders(engine):
    s = models.HealthSender.__table__
    with engine.connect() as c:
        return c.execute(sa.select(s.c.hostname, s.c.sender, s.c.seq)
                         .order_by(s.c.id)).all()


@pytest.mark.parametrize('kind', databases.KINDS)
def test_the_table_is_added_and_kept_when_run_again(kind):
    with databases.throwaway_database(kind) as url:
        migration.upgrade(url, BEFORE)
        engine = engines.create_engine(url)
        try:
            assert 'health_senders' not in sa.inspect(
                engine).get_table_names()
            migration.upgrade(url, REVISION)
            assert migration.version(url) == REVISION
            s = models.HealthSender.__table__
            with engine.begin() as c:
                c.execute(sa.insert(s).values(
                    hostname='host1', sender='a', seq=2 ** 40))
            # One number per host and sender.
            with pytest.raises(db_exc.DBDuplicateEntry):
                with engine.begin() as c:
                    c.execute(sa.insert(s).values(
                        hostname='host1', sender='a', seq=1))
            # Run again (an interrupted upgrade starts it over): the rows
            # stay.
            migration.stamp(url, BEFORE)
            migration.upgrade(url)
            assert _senders(engine) == [('host1', 'a', 2 ** 40)]
            with pytest.raises(migration.UpgradeRefused,
                               match='downgrades are not supported'):
                migration.check_upgrade(REVISION, BEFORE)
        finally:
            engine.dispose()
