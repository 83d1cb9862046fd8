"""A value that matches a schema's pattern and then ends in a newline is
refused (400 naming the field, nothing written): a pattern ending in
``$`` matches the whole value, as ECMA 262 (JSON schema, the OpenAPI
document) means it.  Python's ``re.search`` let the newline through: a
uuid and a newline was a 500 on PostgreSQL (37 characters for a column
of 36), and names, resource classes and traits were stored with it,
matching nothing later."""

import json

import pytest
import sqlalchemy as sa
import webob

from cyborg.api import openapi
from cyborg.api.schemas import common
from tests.fixtures import api as api_fixture

UUID = '2e3b1b0c-0000-4000-8000-000000000000'
GROUPS = [{'resources:FPGA': '1'}]
LATEST = {'OpenStack-API-Version': 'accelerator latest'}


@pytest.fixture(scope='module', params=['sqlite', 'postgresql'])
def service(request):
    with api_fixture.api_service(db_kind=request.param) as service:
        yield service


def _request(service, method, path, body=None, headers=None):
    req = webob.Request.blank(path, method=method, headers=headers or {})
    if body is not None:
        req.headers['Content-Type'] = 'application/json'
        req.body = json.dumps(body).encode()
    resp = req.get_response(service.app)
    if resp.status_int < 400:
        return resp.status_int, None
    fault = json.loads(json.loads(resp.text)['error_message'])
    return resp.status_int, fault['faultstring']


def _rows(service):
    with service.engine.connect() as conn:
        return {table: conn.execute(sa.text(
            'SELECT COUNT(*) FROM %s' % table)).scalar()
            for table in ('device_profiles', 'remote_pools')}


def _profile(**fields):
    return [dict({'name': 'p', 'groups': GROUPS}, **fields)]


POOL = {'name': 'pool', 'resource_class': 'CUSTOM_NVME',
        'aggregates': [UUID], 'fabric_driver': 'fake',
        'handles': [{'fabric_address': 'nqn.2014-08.org.example:a'}]}

REFUSED = [
    ('POST', '/v2/device_profiles', _profile(uuid=UUID + '\n'),
     '0/uuid: '),
    ('POST', '/v2/device_profiles', _profile(name='p\n'), '0/name: '),
    ('POST', '/v2/device_profiles',
     _profile(groups=[{'resources:FPGA\n': '1'}]), '0/groups/0: '),
    ('POST', '/v2/device_profiles',
     _profile(groups=[{'resources:FPGA': '1', 'trait:CUSTOM_A\n':
                       'required'}]), '0/groups/0: '),
    ('POST', '/v2/device_profiles',
     _profile(groups=[{'resources:FPGA': '1\n'}]),
     '0/groups/0/resources:FPGA: '),
    ('POST', '/v2/device_profiles',
     _profile(visibility='private', projects=['p1\n']), '0/projects/0: '),
    ('POST', '/v2/remote_pools', dict(POOL, resource_class='CUSTOM_NVME\n'),
     'resource_class: '),
    ('POST', '/v2/remote_pools', dict(POOL, traits=['CUSTOM_FAST\n']),
     'traits/0: '),
    ('POST', '/v2/remote_pools', dict(POOL, name='pool\n'), 'name: '),
    ('GET', '/v2/device_profiles?limit=5%0A', None, 'limit: '),
    ('GET', '/v2/device_profiles?marker=%s%%0A' % UUID, None, 'marker: '),
]


@pytest.mark.parametrize('method, path, body, where', REFUSED)
def test_a_trailing_newline_is_refused(service, method, path, body, where):
    before = _rows(service)
    status, reason = _request(service, method, path, body, LATEST)
    assert status == 400, reason
    assert reason.startswith('Invalid input: ' + where), reason
    assert 'does not match' in reason
    assert _rows(service) == before


def test_the_uuid_without_it_is_taken(service):
    """The same uuid with no newline is created as before (on
    PostgreSQL, with one it was a 500: 37 characters for the String(36)
    column)."""
    assert _request(service, 'POST', '/v2/device_profiles',
                    _profile(uuid=UUID + '\n'))[0] == 400
    assert _request(service, 'POST', '/v2/device_profiles',
                    _profile(uuid=UUID)) == (201, None)
    with service.engine.connect() as conn:
        assert conn.execute(sa.text(
            'SELECT uuid FROM device_profiles')).scalars().all() == [UUID]
    assert _request(service, 'DELETE',
                    '/v2/device_profiles/' + UUID) == (204, None)


def test_a_bind_patch_keyed_by_a_uuid_and_a_newline_is_refused(service):
    status, reason = _request(
        service, 'PATCH', '/v2/accelerator_requests',
        {UUID + '\n': [{'path': '/hostname', 'op': 'add',
                         'value': 'h'}]}, {'X-Service-Token': 'nova'})
    assert status == 400, reason
    assert 'does not match any of the regexes' in reason


def test_the_published_patterns_are_the_declared_ones():
    """The OpenAPI document publishes the ECMA regexes as declared (their
    ``$`` already means the end of the value there); only the check
    here reads them for Python."""
    document = json.dumps(openapi.document())
    assert json.dumps(common.UUID_PATTERN)[1:-1] in document
    assert '\\\\Z' not in document
