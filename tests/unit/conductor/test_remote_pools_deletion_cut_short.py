"""Remote pools: the reconcile finishes a deletion its conductor left.

``remote_pools.delete`` marks the pool 'deleting', then deletes its
provider, then its rows.  A conductor that died in between left the pool
'deleting' for good, its provider (when it had not gone yet) still
offered by Placement: the reconcile skipped every pool not active, the
orphan removal kept every provider a pool row names, binds on it were
refused 409 and its name could not be registered again.  The reconcile
now finishes a deletion left so for ``deletion_abandoned_after`` seconds
(the pool's ``updated_at``, set as it is marked), and leaves one younger
(a deletion running in another conductor) alone.

The death is a BaseException raised at the step where the conductor
dies, which nothing in the deletion catches: what it committed stays,
nothing after it runs.  Time passing is the pool's ``updated_at`` moved
back.  On SQLite, MariaDB and PostgreSQL against the real (embedded)
Placement."""

import datetime
import logging
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.common import states
from cyborg.conductor import remote_pools
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import remote_pools as pool_db
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import placement as placement_fixture
from tests.unit.conductor import test_remote_pools as base

placement_url = base.placement_url


class _Died(BaseException):
    """The conductor's process ending at this step."""


@pytest.fixture(params=['sqlite', 'mysql', 'postgresql'])
def engine(request, conf):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


@pytest.fixture
def pconf(conf, engine, placement_url, tmp_path):
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('fake_state_dir', str(tmp_path), group='fabric')
    placement_client.reset_clients()
    yield conf
    placement_client.reset_clients()


def _provider(url, rp_uuid):
    providers = base._placement(url, 'GET', '/resource_providers?uuid=' +
                                rp_uuid)['resource_providers']
    return providers[0] if providers else None


def _age(engine, pool_id, seconds):
    """Move the pool's ``updated_at`` (when it was marked 'deleting')
    ``seconds`` back: that much time has passed."""
    table = models.RemotePool.__table__
    with engine.begin() as connection:
        then = connection.scalar(sa.select(table.c.updated_at)
                                 .where(table.c.id == pool_id))
        connection.execute(sa.update(table).where(table.c.id == pool_id)
                           .values(updated_at=then - datetime.timedelta(
                               seconds=seconds)))


def _long_ago(conf):
    return remote_pools.deletion_abandoned_after(conf) + 60


def _dies_deleting(pconf, ctx, placement_url, monkeypatch, step):
    """A pool whose deletion's conductor died at ``step`` ('placement':
    as it deletes the provider; 'rows': as it deletes the rows, the
    provider gone): the pool row as registered."""
    _host, pool_uuid, pool = base._pool_on_a_new_host(
        pconf, ctx, placement_url, 'gpu-' + uuidlib.uuid4().hex[:6])

    def die(*_args, **_kwargs):
        raise _Died()
    with monkeypatch.context() as patch:
        if step == 'placement':
            patch.setattr(placement_client.PlacementClient,
                          'delete_provider', die)
        else:
            patch.setattr(pool_db, 'delete', die)
        with pytest.raises(_Died):
            remote_pools.delete(pconf, ctx, pool_uuid)
    assert pool_db.get(ctx, id=pool.id).state == states.POOL_DELETING
    assert (_provider(placement_url, pool.rp_uuid) is None) == (
        step == 'rows')
    return pool


@pytest.mark.parametrize('step', ['placement', 'rows'])
def test_a_deletion_cut_short_is_finished_by_the_reconcile(
        pconf, engine, placement_url, monkeypatch, step):
    ctx = cyborg_context.get_admin_context()
    pool = _dies_deleting(pconf, ctx, placement_url, monkeypatch, step)

    # Just marked: a deletion that may be running in another conductor.
    remote_pools.reconcile(pconf, ctx)
    assert pool_db.get(ctx, id=pool.id).state == states.POOL_DELETING
    assert (_provider(placement_url, pool.rp_uuid) is None) == (
        step == 'rows')

    _age(engine, pool.id, _long_ago(pconf))
    remote_pools.reconcile(pconf, ctx)
    assert pool_db.get(ctx, id=pool.id) is None
    assert list(pool_db.handles(ctx, [pool.id])) == []
    assert _provider(placement_url, pool.rp_uuid) is None
    # Its name is free again.
    pool_uuid = remote_pools.create(pconf, ctx, {
        'name': pool.name, 'resource_class': 'CUSTOM_REMOTE_GPU',
        'aggregates': [base.AGGREGATE], 'fabric_driver': 'fake',
        'handles': [{'fabric_address': 'gpu-again'}]})
    assert pool_db.get(ctx, uuid=pool_uuid).state == states.POOL_ACTIVE


def test_one_marked_again_meanwhile_is_left_to_its_deletion(
        pconf, engine, placement_url, monkeypatch):
    """A reconcile that read the pool before an admin's DELETE again
    marked it (or a conductor took it over) leaves it to that one."""
    ctx = cyborg_context.get_admin_context()
    pool = _dies_deleting(pconf, ctx, placement_url, monkeypatch,
                          'placement')
    _age(engine, pool.id, _long_ago(pconf))
    stale = pool_db.get(ctx, id=pool.id)
    marked_before = stale.updated_at + datetime.timedelta(seconds=1)
    assert db_api.write_retrying(ctx, pool_db.start_deleting, ctx, pool.id)

    assert not remote_pools._finish_deletion(pconf, ctx, stale,
                                             marked_before)
    assert pool_db.get(ctx, id=pool.id).state == states.POOL_DELETING
    assert _provider(placement_url, pool.rp_uuid) is not None


def test_allocations_against_its_provider_put_it_back_active(
        pconf, engine, placement_url, monkeypatch, caplog):
    ctx = cyborg_context.get_admin_context()
    pool = _dies_deleting(pconf, ctx, placement_url, monkeypatch,
                          'placement')
    consumer = str(uuidlib.uuid4())
    base._placement(placement_url, 'PUT', f'/allocations/{consumer}', {
        'allocations': {pool.rp_uuid: {
            'resources': {'CUSTOM_REMOTE_GPU': 1}}},
        'project_id': placement_fixture.PROJECT,
        'user_id': placement_fixture.PROJECT, 'consumer_generation': None,
        'consumer_type': 'INSTANCE'})
    _age(engine, pool.id, _long_ago(pconf))

    with caplog.at_level(logging.WARNING, logger=remote_pools.__name__):
        remote_pools.reconcile(pconf, ctx)
    assert pool_db.get(ctx, id=pool.id).state == states.POOL_ACTIVE
    assert _provider(placement_url, pool.rp_uuid) is not None
    assert any('active again' in r.getMessage() and
               pool.name in r.getMessage() for r in caplog.records)

    # Once they go, the admin's DELETE again deletes it.
    base._placement(placement_url, 'DELETE', f'/allocations/{consumer}')
    remote_pools.delete(pconf, ctx, pool.uuid)
    assert pool_db.get(ctx, id=pool.id) is None
    assert _provider(placement_url, pool.rp_uuid) is None


def test_placement_away_leaves_it_for_a_later_reconcile(
        pconf, engine, placement_url, monkeypatch):
    ctx = cyborg_context.get_admin_context()
    pool = _dies_deleting(pconf, ctx, placement_url, monkeypatch,
                          'placement')
    _age(engine, pool.id, _long_ago(pconf))

    # Nothing listens there.
    placement_fixture.placement_conf(pconf, 'http://127.0.0.1:9')
    placement_client.reset_clients()
    remote_pools.reconcile(pconf, ctx)
    assert pool_db.get(ctx, id=pool.id).state == states.POOL_DELETING

    placement_fixture.placement_conf(pconf, placement_url)
    placement_client.reset_clients()
    # The failed attempt took the deletion over: the next waits as long.
    remote_pools.reconcile(pconf, ctx)
    assert pool_db.get(ctx, id=pool.id).state == states.POOL_DELETING
    _age(engine, pool.id, _long_ago(pconf))
    remote_pools.reconcile(pconf, ctx)
    assert pool_db.get(ctx, id=pool.id) is None
    assert _provider(placement_url, pool.rp_uuid) is None


def test_the_bound_covers_the_placement_call_and_its_retries(conf):
    conf.set_override('timeout', 10, group='placement')
    assert remote_pools.deletion_abandoned_after(conf) == (
        remote_pools.DELETION_MARGIN + 10)
    conf.set_override('connect_retries', 2, group='placement')
    conf.set_override('timeout', 30, group='placement')
    assert remote_pools.deletion_abandoned_after(conf) == (
        remote_pools.DELETION_MARGIN + 3 * 30 + 2 * 60)
