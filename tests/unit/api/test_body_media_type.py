"""A request body is read as JSON only when it is sent as JSON: one sent
as text/plain (or any other type) was parsed as JSON all the same; it is
a 415 with the error body, as in Cyborg and Placement, and writes
nothing.  Every type a client sends with a JSON body is taken (the
clients send application/json: keystoneauth's ``json=``), and so is a
body sent without a Content-Type."""

import json
import re

import pytest
import sqlalchemy as sa
import webob

from tests.fixtures import api as api_fixture

ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin',
         'X-User-Id': 'u1'}


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        yield service


def _post_profile(service, name, content_type):
    req = webob.Request.blank('/v2/device_profiles', method='POST',
                              headers=ADMIN)
    if content_type is not None:
        req.headers['Content-Type'] = content_type
    req.body = json.dumps([{'name': name, 'groups': [
        {'resources:FPGA': '1'}]}]).encode()
    return req.get_response(service.app)


def _profiles(service, name):
    with service.engine.connect() as conn:
        return conn.execute(sa.text(
            'SELECT COUNT(*) FROM device_profiles WHERE name = :name'),
            {'name': name}).scalar()


def _fault(resp):
    return json.loads(json.loads(resp.text)['error_message'])


@pytest.mark.parametrize('content_type', [
    'text/plain', 'text/plain; charset=utf-8',
    'application/x-www-form-urlencoded', 'multipart/form-data',
    'application/xml', 'text/xml', 'application/octet-stream',
    'application/jsonx', 'text/json', 'application/yaml'])
def test_a_body_not_sent_as_json_is_415(service, content_type):
    name = 'as-' + re.sub('[^a-zA-Z0-9]', '-', content_type)
    resp = _post_profile(service, name, content_type)
    assert resp.status_int == 415, resp.text
    assert resp.content_type == 'application/json'
    fault = _fault(resp)
    assert fault['faultcode'] == 'Client'
    media_type = content_type.split(';')[0]
    assert fault['faultstring'] == (
        'Unsupported media type: a body sent as %s; send it as '
        'application/json' % media_type)
    assert _profiles(service, name) == 0


@pytest.mark.parametrize('content_type', [
    'application/json', 'application/json; charset=UTF-8',
    'Application/JSON', 'application/json-patch+json',
    'application/merge-patch+json',
    # What Cyborg also read as JSON.
    'text/javascript', 'application/javascript',
    # No type named: the body is looked at, as RFC 9110 allows.
    None, ''])
def test_a_body_sent_as_json_or_without_a_type_is_read(service,
                                                       content_type):
    name = 'ok-' + re.sub('[^a-zA-Z0-9]', '-', repr(content_type))
    resp = _post_profile(service, name, content_type)
    assert resp.status_int == 201, resp.text
    assert _profiles(service, name) == 1


def test_an_empty_body_is_the_schema_s_400_whatever_its_type(service):
    req = webob.Request.blank('/v2/device_profiles', method='POST',
                              headers=dict(ADMIN,
                                           **{'Content-Type': 'text/plain'}))
    resp = req.get_response(service.app)
    assert resp.status_int == 400, resp.text


def test_a_bind_patch_sent_as_json_patch_is_read(service):
    """A PATCH body is a JSON Patch: application/json-patch+json is the
    type RFC 6902 gives it, read like application/json (here the ARQ
    does not exist: its 404 says the body got past its type)."""
    arq = '4f2e1a3c-0b1d-4e5f-8a9b-0c1d2e3f4a5b'
    req = webob.Request.blank(
        '/v2/accelerator_requests', method='PATCH', headers=dict(
            ADMIN, **{'Content-Type': 'application/json-patch+json',
                      # Nova's service token: binds need one.
                      'X-Service-Token': 'nova'}))
    req.body = json.dumps({arq: [
        {'path': '/hostname', 'op': 'add', 'value': 'h'},
        {'path': '/device_rp_uuid', 'op': 'add',
         'value': '0e3f2a1b-4c5d-4e6f-8a7b-9c0d1e2f3a4b'},
        {'path': '/instance_uuid', 'op': 'add',
         'value': '1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d'}]}).encode()
    resp = req.get_response(service.app)
    assert resp.status_int == 404, resp.text
    req.headers['Content-Type'] = 'text/plain'
    resp = req.get_response(service.app)
    assert resp.status_int == 415, resp.text
