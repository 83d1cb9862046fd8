"""Remote pools: a release keeping a handle out of use
(``arq_binding._keep_out``) while another conductor records a detach
owed on it (``remote_pools.owe_detach``).  The release read the handle
unlocked and wrote its attach_info back whole: the owed detach committed
in between was written over, the attachment forgotten.  Real MariaDB and
PostgreSQL, two connections."""

import json
import threading
import types
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.conductor import arq_binding
from cyborg.conductor import remote_pools
from cyborg.db import api as db_api
from cyborg.db.api import remote_pools as pool_db
from tests.fixtures import databases


@pytest.fixture(params=['mysql', 'postgresql'])
def server_db(request):
    with databases.throwaway_database(request.param) as url:
        databases.create_schema(url)
        engine = sa.create_engine(url, pool_size=5)
        undo = db_api.patch_engine(engine)
        yield engine
        undo()
        engine.dispose()


def test_a_release_keeping_a_handle_keeps_a_detach_owed_meanwhile(
        server_db, monkeypatch):
    ctx = cyborg_context.get_admin_context()
    pool = db_api.write_retrying(ctx, pool_db.insert, ctx, {
        'uuid': str(uuidlib.uuid4()), 'name': 'p', 'resource_class':
        'CUSTOM_X', 'traits': '[]', 'aggregates': '[]',
        'fabric_driver': 'fake', 'rp_uuid': str(uuidlib.uuid4()),
        'state': 'active'}, [{'uuid': str(uuidlib.uuid4()),
                              'fabric_address': 'a', 'in_use': True,
                              'hostname': 'hostB',
                              'attach_info': json.dumps({'x': 1})}])
    handle, = pool_db.handles(ctx, [pool.id])
    real_info = remote_pools.quarantine_info
    others = []

    def owed_meanwhile(*args, **kwargs):
        # Between the release's read of the handle and its write: another
        # conductor's bind undo, refused a detach from hostA, owes it.
        # Given 2 s, it commits unless the read holds the handle locked.
        other = threading.Thread(target=remote_pools.owe_detach, args=(
            None, cyborg_context.get_admin_context(), handle.id, 'hostA',
            'inst-a', 'bind-a'))
        other.start()
        other.join(2)
        others.append(other)
        return real_info(*args, **kwargs)
    monkeypatch.setattr(remote_pools, 'quarantine_info', owed_meanwhile)
    row = types.SimpleNamespace(remote_handle_id=handle.id,
                                instance_uuid='inst-b')
    db_api.write_retrying(ctx, arq_binding._keep_out, ctx, row, 'hostB')
    monkeypatch.undo()
    for other in others:
        other.join(60)
        assert not other.is_alive()
    info = json.loads(pool_db.get_handle(ctx, handle.id).attach_info)
    assert info[pool_db.DETACH_FAILED] == 'true'
    assert info[pool_db.ATTACHED_HOST] == 'hostB'
    assert info[pool_db.DETACH_OWED] == [['hostA', 'inst-a']]
