"""Names a caller gives are compared exactly on every engine: remote pool
names, the fabric addresses of their handles and attribute keys (binary
collations on MariaDB/MySQL, migration c3f1a7d92e58), and a row read by
one name is the one named, trailing spaces included (which MariaDB's
collations ignore, binary ones too).  On MariaDB,
``DELETE /v2/remote_pools/GPU-x`` deleted the pool ``Gpu-x``."""

import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import attributes as attribute_db
from cyborg.db.api import remote_pools as pool_db
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import databases


@pytest.fixture(params=databases.KINDS)
def engine(request):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _pool(connection, name, *addresses):
    pool_id = connection.execute(sa.insert(models.RemotePool).values(
        uuid=str(uuidlib.uuid4()), name=name, resource_class='CUSTOM_X',
        traits='[]', aggregates='[]', fabric_driver='fake',
        rp_uuid=str(uuidlib.uuid4()))).inserted_primary_key[0]
    for address in addresses:
        connection.execute(sa.insert(models.RemotePoolHandle).values(
            uuid=str(uuidlib.uuid4()), pool_id=pool_id,
            fabric_address=address, attach_info='{}'))
    return pool_id


def test_remote_pool_names_and_fabric_addresses_are_exact(engine):
    ctx = cyborg_context.get_admin_context()
    with engine.begin() as connection:
        # Handles differing in case only are two (NQNs, WWNs are).
        _pool(connection, 'Gpu-x', 'nqn.A', 'nqn.a')
        _pool(connection, 'gpu-x')
    assert pool_db.get(ctx, name='Gpu-x').name == 'Gpu-x'
    assert pool_db.get(ctx, name='gpu-x').name == 'gpu-x'
    assert pool_db.get(ctx, name='GPU-x') is None
    assert pool_db.get(ctx, name='Gpu-x ') is None
    assert [p.name for p in pool_db.get_all(ctx, name='GPU-X')] == []


def test_attribute_keys_are_exact(engine):
    ctx = cyborg_context.get_admin_context()
    deployable_id = seed.seed_device(engine, handles=1).deployable_id
    with engine.begin() as connection:
        for key in ('k1', 'K1'):
            connection.execute(sa.insert(models.Attribute).values(
                uuid=str(uuidlib.uuid4()), deployable_id=deployable_id,
                key=key, value=key))
    found = attribute_db.get_all(ctx, deployable_id=deployable_id,
                                 key='K1')
    assert [a.value for a in found] == ['K1']
