"""``DELETE /v2/device_profiles/a,b`` deletes both profiles, as Cyborg
does (it splits the value on commas whether it comes from the path or
from ``?value=``): the path took "a,b" as one name and answered 404.
All of them or none, as with ``?value=``."""

import json

import pytest
import webob

from tests.fixtures import api as api_fixture

ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin',
         'X-User-Id': 'u1'}


@pytest.fixture
def service():
    with api_fixture.api_service() as service:
        yield service


def _request(service, method, path, body=None):
    req = webob.Request.blank(path, method=method, headers=ADMIN)
    if body is not None:
        req.headers['Content-Type'] = 'application/json'
        req.body = json.dumps(body).encode()
    resp = req.get_response(service.app)
    return resp.status_int, resp.text


def _create(service, name, uuid=None):
    profile = {'name': name, 'groups': [{'resources:FPGA': '1'}]}
    if uuid:
        profile['uuid'] = uuid
    got, body = _request(service, 'POST', '/v2/device_profiles', [profile])
    assert got == 201, body
    return json.loads(body)['uuid']


def _names(service):
    got, body = _request(service, 'GET', '/v2/device_profiles')
    assert got == 200, body
    return sorted(p['name'] for p in json.loads(body)['device_profiles'])


@pytest.mark.parametrize('prefix', ['', '/accelerator'])
def test_names_and_uuids_separated_by_commas_in_the_path(service, prefix):
    _create(service, 'a')
    _create(service, 'b')
    uuid = _create(service, 'c', '0f0e1d2c-3b4a-4958-8776-a5b4c3d2e1f0')
    _create(service, 'kept')
    # A uuid in any spelling; spaces around an item and an empty item
    # are dropped, as with ?value=.
    got, body = _request(service, 'DELETE', prefix + '/v2/device_profiles/'
                         'a,%20b,,' + uuid.replace('-', '').upper())
    assert got == 204, body
    assert _names(service) == ['kept']


def test_one_not_found_deletes_none(service):
    _create(service, 'a')
    _create(service, 'b')
    got, body = _request(service, 'DELETE', '/v2/device_profiles/a,nope,b')
    assert got == 404, body
    assert 'nope' in json.loads(json.loads(body)['error_message'])[
        'faultstring']
    assert _names(service) == ['a', 'b']


def test_only_commas_is_400(service):
    got, body = _request(service, 'DELETE', '/v2/device_profiles/,,')
    assert got == 400, body
    assert 'the path: no device profile named' in body


def test_one_name_or_uuid_as_before(service):
    uuid = _create(service, 'a')
    _create(service, 'b')
    assert _request(service, 'DELETE', '/v2/device_profiles/a')[0] == 204
    assert _request(service, 'DELETE', '/v2/device_profiles/a')[0] == 404
    _create(service, 'c', uuid)
    assert _request(service, 'DELETE',
                    '/v2/device_profiles/' + uuid)[0] == 204
    assert _names(service) == ['b']
