"""Every operation that takes a body, sent a list of hostile bodies, and
every operation sent bad microversions: never a 5xx, and a request answered
with a 4xx writes nothing (the row count of every table is unchanged).

The operations come from the declarations (``cyborg.api.routes``), so a new
one is covered without being listed here.  The API runs in this process,
its conductor over RabbitMQ, on MariaDB and on PostgreSQL.
"""

import json
import re
import uuid as uuidlib

import pytest
import sqlalchemy as sa
import webob

from cyborg.api import routes
from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.fixtures import rabbit

CALLER = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'hostile',
          'X-User-Id': 'hostile', 'X-Service-Token': 'nova'}

HOSTILE = [
    None, [], {}, 'text', 0, -1, 10 ** 30, True, [None], [[]], {'': None},
    {'name': None}, {'unknown': 1}, {'name': 'x' * 100000},
    {'device_profile_name': 42}, {'device_profile_name': 'p' * 5000},
    [{'name': 'p', 'groups': None}], [{'name': 'p' * 300, 'groups': [{}]}],
    [{'name': 'p', 'groups': [{'resources:FPGA': '-1'}]}],
    [{'name': 'p', 'groups': [{'resources:FPGA': 'x' * 10000}]}],
    [{'op': 'add'}], [{'op': 'explode', 'path': '/hostname', 'value': 1}],
    {'not-a-uuid': [{'op': 'add', 'path': '/hostname', 'value': 'h'}]},
    {str(uuidlib.uuid4()): [{'op': 'add', 'path': '/hostname'}]},
    {str(uuidlib.uuid4()): 'not a list of operations'},
    {'key': None, 'value': ['a']}, {'image_uuid': 'not-a-uuid'},
    {'consumer_id': None, 'consumer_type': 7},
    {'status': 'broken'}, {'fabric_driver': '../../etc/passwd'},
]
BAD_VERSIONS = ['accelerator 2.999', 'accelerator two', 'accelerator 1.0',
                'accelerator 2.01', 'accelerator -2.1']


@pytest.fixture(scope='module', params=['mysql', 'postgresql'])
def service(request):
    with rabbit.throwaway_vhost() as transport_url, \
            api_fixture.api_service(db_kind=request.param,
                                    transport_url=transport_url) as service:
        yield service


def _counts(service):
    with service.engine.connect() as conn:
        return {table.name: conn.execute(
                    sa.select(sa.func.count()).select_from(table)).scalar()
                for table in models.Base.metadata.sorted_tables}


def _path(operation):
    # Any path variable: a uuid nothing has (names are refused or missed).
    return re.sub(r'\{[^}]+\}', str(uuidlib.uuid4()), operation.path)


def _send(service, method, path, body=None, version='accelerator latest'):
    req = webob.Request.blank(path, method=method)
    req.headers.update(CALLER)
    req.headers['OpenStack-API-Version'] = version
    if body is not None:
        req.headers['Content-Type'] = 'application/json'
        req.body = body
    return req.get_response(service.app)


WITH_BODY = [op for op in routes.OPERATIONS if op.body is not None]


@pytest.mark.parametrize('operation', WITH_BODY, ids=lambda op: op.name)
def test_hostile_bodies_are_refused_and_write_nothing(service, operation):
    for body in HOSTILE:
        before = _counts(service)
        resp = _send(service, operation.method, _path(operation),
                     json.dumps(body).encode())
        assert resp.status_int < 500, (body, resp.text)
        if resp.status_int >= 400:
            assert _counts(service) == before, (body, resp.status_int)


# The root version document is not versioned (as in Cyborg): /v2 only.
VERSIONED = [op for op in routes.OPERATIONS if op.path.startswith('/v2')]


@pytest.mark.parametrize('operation', VERSIONED, ids=lambda op: op.name)
def test_bad_microversions_are_4xx_and_write_nothing(service, operation):
    body = b'{}' if operation.body is not None else None
    for version in BAD_VERSIONS:
        before = _counts(service)
        resp = _send(service, operation.method, _path(operation), body,
                     version)
        assert 400 <= resp.status_int < 500, (version, resp.text)
        assert _counts(service) == before, version
