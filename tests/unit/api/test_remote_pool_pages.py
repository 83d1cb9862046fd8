"""The remote pool list is paged from microversion 2.12 as the other lists
are from 2.11 (``?limit=&marker=``, at most ``[api]max_limit`` a page,
``remote_pools_links`` to the next page, 404 for a marker that names no
pool), and read a page at a time in SQL; below 2.12 it is whole.  Pools
are no project's: a project manager lists every pool, and any pool's uuid
is a marker for it.  On every database engine."""

import json
import urllib.parse
import uuid as uuidlib

import pytest
import sqlalchemy as sa
import webob

from cyborg.common import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import remote_pools as pool_db
from tests.fixtures import api as api_fixture
from tests.fixtures import databases

ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'p-admin',
         'X-User-Id': 'u1'}
MANAGER = {'X-Roles': 'manager,member,reader', 'X-Project-Id': 'p-one',
           'X-User-Id': 'u2'}
UNKNOWN = '0d7e2d8f-3c9a-4d0b-9f3e-8c1a2b3c4d5e'


def _seed_pools(engine, count):
    """``count`` pools of two handles each, as a registration leaves
    them; their uuids, in the order they were made."""
    uuids = []
    with engine.begin() as connection:
        for index in range(count):
            uuid = str(uuidlib.uuid4())
            pool_id = connection.execute(sa.insert(models.RemotePool).values(
                uuid=uuid, name=f'pool-{index}',
                resource_class='CUSTOM_REMOTE_NVME', traits='[]',
                aggregates=json.dumps([str(uuidlib.uuid4())]),
                fabric_driver='fake', rp_uuid=str(uuidlib.uuid4()),
                state='active', placement_synced=True)
            ).inserted_primary_key[0]
            for handle in range(2):
                connection.execute(sa.insert(models.RemotePoolHandle).values(
                    uuid=str(uuidlib.uuid4()), pool_id=pool_id,
                    fabric_address=f'nqn.2026-01.org.example:{index}:'
                                   f'{handle}',
                    attach_info='{}'))
            uuids.append(uuid)
    return uuids


def _get(service, path, version='2.12', headers=ADMIN):
    req = webob.Request.blank(path, headers=dict(
        headers, **{'OpenStack-API-Version': f'accelerator {version}'}))
    resp = req.get_response(service.app)
    return resp.status_int, resp.json


def _page(service, path, **kwargs):
    status, body = _get(service, path, **kwargs)
    assert status == 200, body
    return body


def _next(body):
    """The path of the next page's link, or None."""
    links = body.get('remote_pools_links')
    if not links:
        return None
    assert [link['rel'] for link in links] == ['next']
    url = urllib.parse.urlsplit(links[0]['href'])
    return f'{url.path}?{url.query}'


def _uuids(body):
    return [pool['uuid'] for pool in body['remote_pools']]


@pytest.mark.parametrize('kind', databases.KINDS)
def test_remote_pools_are_paged_from_2_12(kind):
    with api_fixture.api_service({('api', 'max_limit'): 3},
                                 db_kind=kind) as service:
        pools = _seed_pools(service.engine, 5)

        # A first page, linked to the next; the handles are each pool's.
        first = _page(service, '/v2/remote_pools?limit=2')
        assert _uuids(first) == pools[:2]
        assert [len(p['handles']) for p in first['remote_pools']] == [2, 2]
        assert first['remote_pools'][1]['handles'][0]['fabric_address'] \
            == 'nqn.2026-01.org.example:1:0'
        path = _next(first)
        assert path == f'/v2/remote_pools?limit=2&marker={pools[1]}'
        second = _page(service, path)
        assert _uuids(second) == pools[2:4]
        last = _page(service, _next(second))
        assert _uuids(last) == pools[4:]
        assert 'remote_pools_links' not in last

        # Without a limit, and with a larger one, [api]max_limit a page.
        capped = _page(service, '/v2/remote_pools?limit=100')
        assert _uuids(capped) == pools[:3]
        assert _next(capped) == f'/v2/remote_pools?limit=3&marker={pools[2]}'
        assert _uuids(_page(service, '/v2/remote_pools')) == pools[:3]

        # The name filter stays in the link; a marker in another spelling.
        named = _page(service, '/v2/remote_pools?name=pool-3&limit=1')
        assert _uuids(named) == [pools[3]]
        assert 'remote_pools_links' not in named
        plain = pools[0].upper().replace('-', '')
        assert _uuids(_page(service, f'/v2/remote_pools?limit=1&marker='
                            f'{plain}')) == [pools[1]]
        assert _page(service, f'/v2/remote_pools?marker={pools[4]}') == {
            'remote_pools': []}

        # A project manager lists every pool: any pool is its marker.
        managed = _page(service, f'/v2/remote_pools?limit=1&marker='
                        f'{pools[3]}', headers=MANAGER)
        assert _uuids(managed) == [pools[4]]

        status, body = _get(service, f'/v2/remote_pools?marker={UNKNOWN}',
                            headers=MANAGER)
        assert status == 404, body
        assert f'Marker remote pool {UNKNOWN} could not be found' in \
            body['error_message']
        for query, field in (('limit=0', 'limit'), ('limit=x', 'limit'),
                             ('marker=pool-1', 'marker')):
            status, body = _get(service, '/v2/remote_pools?' + query)
            assert status == 400, (query, body)
            assert field in body['error_message'], (query, body)

        # Below 2.12 the list is whole, with no link, and takes no page.
        for version in ('2.8', '2.11'):
            whole = _page(service, '/v2/remote_pools', version=version)
            assert whole == {'remote_pools': whole['remote_pools']}
            assert _uuids(whole) == pools
            status, body = _get(service, '/v2/remote_pools?limit=1',
                                version=version)
            assert status == 400, body
            assert 'limit: needs microversion 2.12 or later' in \
                body['error_message']


@pytest.mark.parametrize('kind', databases.KINDS)
def test_the_pool_read_pages_in_sql(kind):
    """A page of pools is read as a page, LIMIT in the statement, not
    every pool read and the page cut from them."""
    with api_fixture.database_in_use(kind) as engine:
        pools = _seed_pools(engine, 4)
        statements = []

        def seen(_conn, _cursor, statement, _params, _context, _many):
            statements.append(statement)
        sa.event.listen(engine, 'before_cursor_execute', seen)
        try:
            ctx = cyborg_context.get_admin_context()
            rows = pool_db.get_all(ctx, limit=2, marker=pools[0])
        finally:
            sa.event.remove(engine, 'before_cursor_execute', seen)
        assert [row.uuid for row in rows] == pools[1:3]
        assert any('LIMIT' in s.upper() and 'remote_pools' in s
                   for s in statements), statements
        assert pool_db.get_all(ctx, limit=2, marker=UNKNOWN) is None
