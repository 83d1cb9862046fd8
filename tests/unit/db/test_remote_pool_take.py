"""Two binds on one remote pool at once (``remote_pools.take``): the
second takes another free handle while the first has not committed, as
two takes of one deployable's handles do (``attach_handles.take``).

With ``in_use IS false`` MariaDB read the pool's handles past the index
on (pool_id, in_use) and locked every one of them, so the second take
skipped them all and found none free: since a remote bind takes its
handle in the PATCH's transaction, the second PATCH answered 400 "no
free handle in remote pool" while handles were free."""

import uuid

import pytest
import sqlalchemy as sa

from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import remote_pools as pool_db
from tests.fixtures import api as api_fixture
from tests.unit.conductor import test_programming_races as races


@pytest.fixture(params=['mysql', 'postgresql'])
def engine(request, conf):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _pool(engine, name, handles):
    with engine.begin() as c:
        pool_id = c.execute(sa.insert(models.RemotePool).values(
            uuid=str(uuid.uuid4()), name=name, resource_class='CUSTOM_R',
            traits='[]', aggregates='[]', fabric_driver='fake',
            rp_uuid=str(uuid.uuid4()))).inserted_primary_key[0]
        for i in range(handles):
            c.execute(sa.insert(models.RemotePoolHandle).values(
                uuid=str(uuid.uuid4()), pool_id=pool_id,
                fabric_address=f'nqn.{name}.{i}', attach_info='{}'))
    return pool_id


def _take(context, pool_id):
    return db_api.write_retrying(context, pool_db.take, context, pool_id)


def test_a_second_take_on_one_pool_takes_another_free_handle(conf, engine):
    _pool(engine, 'other', 2)      # handles before the pool's own
    pool_id = _pool(engine, 'pool', 4)
    _pool(engine, 'after', 2)
    first, then = races._holding(
        engine, lambda context: pool_db.take(context, pool_id),
        lambda context: _take(context, pool_id))
    assert first is not None and then is not None
    assert then.id != first.id
