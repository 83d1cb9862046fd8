"""Text that no database stores is a 400 naming where it was, never a
500: a NUL character in a body's string (PostgreSQL cannot store one,
and its driver refuses any statement that holds one), a lone UTF-16
surrogate in a body's string (no character at all: every driver fails
to encode it), and a path or query string that is not UTF-8.  (A read
searching for a NUL matches nothing: the gabbits' "... with a NUL no
column can hold matches nothing".)"""

import json

import pytest
import sqlalchemy as sa
import webob

from tests.fixtures import api as api_fixture


@pytest.fixture(scope='module')
def on_postgresql():
    with api_fixture.api_service(db_kind='postgresql') as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_FakeDevice')
        yield service


ADMIN = {'X-Project-Id': 'admin', 'X-User-Id': 'u',
         'X-Roles': 'admin,member,reader'}


@pytest.mark.parametrize('method, path, body, where', [
    ('POST', '/v2/attributes',
     {'key': 'k', 'value': 'a\x00b', 'deployable_id': 1}, 'the body'),
    ('POST', '/v2/attributes',
     {'key': 'k\x00', 'value': 'v', 'deployable_id': 1}, 'the body'),
    ('POST', '/v2/device_profiles',
     [{'name': 'p', 'description': 'a\x00b',
       'groups': [{'resources:FPGA': '1'}]}], 'the body'),
])
def test_a_nul_character_is_refused(on_postgresql, method, path, body,
                                    where):
    """PostgreSQL cannot store a NUL character, and its driver refuses a
    statement holding one (an attribute with one was a 500, or a 503 over
    RabbitMQ): a 400 naming where it was, nothing written.  The escape
    spelled out (a backslash, then u0000) is text like any other."""
    req = webob.Request.blank(path, method=method, headers=ADMIN)
    if body is not None:
        req.headers['Content-Type'] = 'application/json'
        req.body = json.dumps(body).encode()
    before = _attributes(on_postgresql)
    resp = req.get_response(on_postgresql.app)
    fault = json.loads(json.loads(resp.text)['error_message'])
    assert resp.status_int == 400, resp.text
    assert fault['faultstring'].endswith(
        f'{where} holds a NUL character (\\u0000), which no field accepts')
    assert _attributes(on_postgresql) == before


def _attributes(service):
    with service.engine.connect() as conn:
        return conn.execute(sa.text('SELECT COUNT(*) FROM attributes')
                            ).scalar()


def test_a_spelled_out_nul_escape_is_text(on_postgresql):
    req = webob.Request.blank('/v2/attributes', method='POST', headers=ADMIN)
    req.headers['Content-Type'] = 'application/json'
    req.body = json.dumps({'key': 'spelled', 'value': 'a\\u0000b',
                           'deployable_id': 1}).encode()
    resp = req.get_response(on_postgresql.app)
    assert resp.status_int == 201, resp.text
    assert resp.json['value'] == 'a\\u0000b'


@pytest.mark.parametrize('method, path, raw', [
    ('POST', '/v2/attributes',
     b'{"key": "k", "value": "a\\ud800b", "deployable_id": 1}'),
    ('POST', '/v2/device_profiles',
     b'[{"name": "p", "description": "x\\udfff",'
     b' "groups": [{"resources:FPGA": "1"}]}]'),
])
def test_a_lone_surrogate_is_refused(on_postgresql, method, path, raw):
    req = webob.Request.blank(path, method=method, headers=ADMIN)
    req.headers['Content-Type'] = 'application/json'
    req.body = raw
    before = _attributes(on_postgresql)
    resp = req.get_response(on_postgresql.app)
    assert resp.status_int == 400, resp.text
    assert 'the body holds a lone surrogate' in resp.text
    assert _attributes(on_postgresql) == before


def test_a_surrogate_pair_is_a_character(on_postgresql):
    req = webob.Request.blank('/v2/attributes', method='POST',
                              headers=ADMIN)
    req.headers['Content-Type'] = 'application/json'
    req.body = (b'{"key": "emoji", "value": "\\ud83d\\ude00",'
                b' "deployable_id": 1}')
    resp = req.get_response(on_postgresql.app)
    assert resp.status_int == 201, resp.text
    assert resp.json['value'] == '\U0001F600'


@pytest.mark.parametrize('path, where', [
    ('/v2/device_profiles/%FF', 'the path is not valid UTF-8'),
    ('/v2/device_profiles/%ED%A0%80', 'the path is not valid UTF-8'),
    ('/v2/device_profiles?name=%FF', 'the query string is not valid UTF-8'),
    ('/v2/accelerator_requests?instance=%ED%A0%80',
     'the query string is not valid UTF-8'),
])
def test_a_url_that_is_not_utf8_is_refused(on_postgresql, path, where):
    resp = webob.Request.blank(path, headers=ADMIN).get_response(
        on_postgresql.app)
    fault = json.loads(json.loads(resp.text)['error_message'])
    assert (resp.status_int, fault['faultstring']) == (
        400, 'Invalid input: ' + where)
