"""Hostile request bodies get a 400 or 413 with the reason, never a 500,
and write nothing."""

import gzip
import json

import pytest
import sqlalchemy as sa
import webob

from tests.fixtures import api as api_fixture

PROFILE = [{'name': 'p', 'groups': [{'resources:FPGA': '1'}]}]
LIMIT = 114688      # [oslo_middleware]max_request_body_size's default


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        yield service


def _post(service, body, content_type='application/json', headers=None,
          path='/v2/device_profiles', chunked=False):
    req = webob.Request.blank(path, method='POST')
    req.headers['Content-Type'] = content_type
    req.headers.update(headers or {})
    req.body = body
    if chunked:
        del req.headers['Content-Length']
        req.environ.pop('CONTENT_LENGTH', None)
        req.headers['Transfer-Encoding'] = 'chunked'
    resp = req.get_response(service.app)
    fault = json.loads(json.loads(resp.text)['error_message'])
    return resp.status_int, fault['faultstring']


def _rows(service):
    with service.engine.connect() as conn:
        return conn.execute(sa.text(
            'SELECT COUNT(*) FROM device_profiles')).scalar()


NESTED_LIST = b'[' * 50000 + b']' * 50000
NESTED_OBJECT = b'{"a":' * 5000 + b'1' + b'}' * 5000
JUST_TOO_DEEP = b'[{"name": "p", "groups": [' + b'[' * 40 + b']' * 40 + b']}]'


@pytest.mark.parametrize('body, content_type, headers, status, reason', [
    (NESTED_LIST, 'application/json', {}, 400, 'nests deeper than 32'),
    (NESTED_OBJECT, 'application/json', {}, 400, 'nests deeper than 32'),
    (JUST_TOO_DEEP, 'application/json', {}, 400, 'nests deeper than 32'),
    (json.dumps(PROFILE).encode(), 'application/json; charset=foobar', {},
     400, 'charset foobar is not supported'),
    (json.dumps(PROFILE).encode('utf-16'), 'application/json; '
     'charset=utf-16', {}, 400, 'charset utf-16 is not supported'),
    (b'\xff\xfe' + json.dumps(PROFILE).encode(), 'application/json', {},
     400, 'not valid UTF-8'),
    (gzip.compress(json.dumps(PROFILE).encode(), mtime=0), 'application/json',
     {'Content-Encoding': 'gzip'}, 400, 'Content-Encoding gzip'),
    (b'[' + b' ' * LIMIT + b']', 'application/json', {}, 413,
     'larger than %d bytes' % LIMIT),
    (b'{"name": ', 'application/json', {}, 400, 'malformed JSON'),
    # A NUL in the charset's name made the codec lookup a ValueError.
    (json.dumps(PROFILE).encode(), 'application/json; charset=utf-8\x00',
     {}, 400, 'charset utf-8\x00 is not supported'),
    # A key given twice was the last value, the others dropped unseen.
    (b'[{"name": "p", "name": "q", "groups": [{"resources:FPGA": "1"}]}]',
     'application/json', {}, 400, "the body gives key 'name' twice"),
    (b'[{"name": "p", "groups": [{"resources:FPGA": "1", '
     b'"resources:FPGA": "2"}]}]', 'application/json', {}, 400,
     "the body gives key 'resources:FPGA' twice"),
    (b'[{"name": "p", "groups": [{"resources:FPGA": "1", '
     b'"resources:\\u0046PGA": "2"}]}]', 'application/json', {}, 400,
     "the body gives key 'resources:FPGA' twice"),
])
def test_refused_with_the_reason_and_nothing_written(
        service, body, content_type, headers, status, reason):
    before = _rows(service)
    got, message = _post(service, body, content_type, headers)
    assert (got, reason in message) == (status, True), message
    assert _rows(service) == before


def test_chunked_body_over_the_limit_is_413(service):
    got, message = _post(service, b'[' + b' ' * (2 * LIMIT) + b']',
                         chunked=True)
    assert got == 413 and 'larger than' in message


def test_utf8_charset_spellings_are_accepted(service):
    for i, charset in enumerate(('utf-8', 'UTF8', 'utf_8')):
        body = [dict(PROFILE[0], name='p%d' % i)]
        req = webob.Request.blank('/v2/device_profiles', method='POST')
        req.headers['Content-Type'] = 'application/json; charset=' + charset
        req.body = json.dumps(body).encode()
        assert req.get_response(service.app).status_int == 201, charset
