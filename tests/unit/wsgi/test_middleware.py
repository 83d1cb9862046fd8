"""The access log line, bodies read first (a client gone mid-body is one
INFO line, not an ERROR with a traceback), and the body size limit."""

import io
import logging
import os
import socket
import struct
import time

import webob

from cyborg.api import app as api_app
from tests.fixtures import api as api_fixture
from tests.fixtures import databases
from tests.fixtures import processes

ADMIN = {'X-Roles': 'admin', 'X-Project-Id': 'p1'}


def _app(max_request_body_size=None):
    conf = api_fixture.make_conf()
    app = api_app.build_app(conf)
    if max_request_body_size is not None:
        conf.set_override('max_request_body_size', max_request_body_size,
                          group='oslo_middleware')
    return app


def _records(caplog, name):
    return [r for r in caplog.records if r.name == name]


def test_one_access_line_per_request(caplog):
    app = _app()
    caplog.set_level(logging.INFO)
    resp = webob.Request.blank('/accelerator/v2?x=1').get_response(app)
    assert resp.status_int == 200
    body = resp.body  # the line is logged once the body is sent
    lines = _records(caplog, 'cyborg.api.access')
    assert len(lines) == 1
    message = lines[0].getMessage()
    assert lines[0].levelno == logging.INFO
    assert '"GET /accelerator/v2?x=1"' in message
    assert 'status: 200' in message
    assert 'len: %d' % len(body) in message
    assert 'time: ' in message
    assert resp.headers['x-openstack-request-id'] in message


def test_a_path_cannot_forge_access_lines(caplog):
    # The path as the server decoded it (%0A is a newline, %00 a NUL) is
    # logged escaped again: one line that no one can mistake for two.
    app = _app()
    caplog.set_level(logging.INFO)
    forged = ('/accelerator/v2/x%0A10.0.0.1%20%22GET%20/accelerator/v2%22'
              '%20status:%20200%00%1b[31m%C3%A9')
    request = webob.Request.blank(forged + '?a=%0Ab&c="d\x01e"')
    resp = request.get_response(app)
    assert resp.status_int == 404 and resp.body is not None
    message, = [r.getMessage() for r in _records(caplog, 'cyborg.api.access')]
    assert '\n' not in message and '\x00' not in message
    assert '\x1b' not in message and '\x01' not in message
    assert ('"GET /accelerator/v2/x%0A10.0.0.1%20%22GET%20/accelerator/v2'
            '%22%20status:%20200%00%1B[31m%C3%A9?a=%0Ab&c=%22d%01e%22" '
            'status: 404') in message


def test_health_probes_are_logged_at_debug(caplog):
    app = _app()
    caplog.set_level(logging.DEBUG)
    for path in ('/healthcheck', '/accelerator/healthcheck'):
        resp = webob.Request.blank(path).get_response(app)
        assert resp.status_int == 200 and resp.body is not None
    lines = _records(caplog, 'cyborg.api.access')
    assert [r.levelno for r in lines] == [logging.DEBUG, logging.DEBUG]


class _GoneInput:
    """A request body whose client resets the connection."""

    def read(self, size=-1):
        raise ConnectionResetError(104, 'Connection reset by peer')


def test_client_gone_while_sending_the_body_is_not_an_error(caplog):
    app = _app()
    caplog.set_level(logging.DEBUG)
    req = webob.Request.blank('/v2/device_profiles', method='POST',
                              headers=dict(ADMIN, **{
                                  'Content-Type': 'application/json'}))
    req.environ['wsgi.input'] = _GoneInput()
    req.environ['CONTENT_LENGTH'] = '100'
    resp = req.get_response(app)
    assert resp.status_int == 400
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any('Client went away' in r.getMessage() for r in caplog.records)


def test_short_body_is_a_client_gone(caplog):
    app = _app()
    caplog.set_level(logging.INFO)
    req = webob.Request.blank('/v2/device_profiles', method='POST',
                              headers=ADMIN)
    req.environ['wsgi.input'] = io.BytesIO(b'[{"na')
    req.environ['CONTENT_LENGTH'] = '100'
    assert req.get_response(app).status_int == 400
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_body_over_the_limit_is_413_with_the_error_body():
    app = _app(max_request_body_size=2048)
    body = b'[' + b' ' * 4096 + b']'
    resp = webob.Request.blank('/v2/device_profiles', method='POST',
                               headers=ADMIN, body=body).get_response(app)
    assert resp.status_int == 413
    assert 'error_message' in resp.json
    # Chunked, without a length: counted while read.
    req = webob.Request.blank('/v2/device_profiles', method='POST',
                              headers=dict(ADMIN, **{
                                  'Transfer-Encoding': 'chunked'}))
    req.environ['wsgi.input'] = io.BytesIO(body)
    req.environ.pop('CONTENT_LENGTH', None)
    assert req.get_response(app).status_int == 413


def test_a_body_within_the_limit_reaches_the_app_whole():
    app = _app()
    body = b'[{"name": "bad name!", "groups": [{"resources:FPGA": "1"}]}]'
    resp = webob.Request.blank('/v2/device_profiles', method='POST',
                               headers=dict(ADMIN, **{
                                   'Content-Type': 'application/json'}),
                               body=body).get_response(app)
    # The app's schema saw the name: the body arrived intact.
    assert resp.status_int == 400
    assert "'bad name!' does not match" in resp.text


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                    struct.pack('ii', 1, 0))
    sock.close()


def test_cyborg_api_logs_no_traceback_when_clients_vanish(tmp_path):
    db = 'sqlite:///%s' % (tmp_path / 'cyborg.sqlite')
    databases.create_schema(db)
    port = _free_port()
    config = processes.write_config(tmp_path / 'cyborg.conf', {
        'DEFAULT': {'host': 'vanish'},
        'database': {'connection': db},
        'api': {'auth_strategy': 'noauth', 'host_ip': '127.0.0.1',
                'port': port},
    })
    api = processes.ServiceProcess('cyborg-api', config,
                                   tmp_path / 'api.log')
    api.start()
    try:
        api.wait_for_log('worker %d started' % api.pid, timeout=60)
        head = ('POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\n'
                'Content-Type: application/json\r\nX-Roles: admin\r\n'
                'X-Project-Id: p\r\nContent-Length: 1000\r\n\r\n[{"na')
        for close in (_reset, socket.socket.close):
            sock = socket.create_connection(('127.0.0.1', port))
            sock.sendall(head.encode())
            time.sleep(0.3)
            close(sock)
        api.wait_for_log('5 of 1000 bytes received', timeout=20)
        api.wait_for_log('status: 400', timeout=20)
        api.stop()
    finally:
        api.kill()
    log = api.log()
    assert 'Client went away' in log
    assert 'Traceback' not in log
    assert ' ERROR ' not in log
    assert os.path.getsize(tmp_path / 'api.log') > 0


def test_every_response_carries_a_request_id_and_a_global_one_is_kept():
    from oslo_middleware import request_id as oslo_request_id

    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'ok']

    from cyborg.wsgi import middleware
    wrapped = middleware.request_id(app)
    caller = 'req-12345678-1234-1234-1234-123456789abc'
    resp = webob.Request.blank('/', headers={
        'X-OpenStack-Request-ID': caller}).get_response(wrapped)
    ours = resp.headers['x-openstack-request-id']
    assert ours.startswith('req-') and ours != caller
    assert seen[oslo_request_id.ENV_REQUEST_ID] == ours
    assert seen[oslo_request_id.GLOBAL_REQ_ID] == caller
    # A malformed one is not passed on; two requests get two ids.
    seen.clear()
    again = webob.Request.blank('/', headers={
        'X-OpenStack-Request-ID': 'not-an-id'}).get_response(wrapped)
    assert oslo_request_id.GLOBAL_REQ_ID not in seen
    assert again.headers['x-openstack-request-id'] != ours
    assert len(again.headers.getall('x-openstack-request-id')) == 1


def test_error_bodies_are_added_to_errors_made_outside_the_app():
    from cyborg.api import faults
    from cyborg.api import wsgi_errors

    def app(environ, start_response):
        if environ['PATH_INFO'] == '/lazy':
            def lazy():
                start_response('401 Unauthorized', [
                    ('Content-Type', 'text/plain; charset=UTF-8'),
                    ('WWW-Authenticate', 'Keystone uri="x"')])
                yield b'Authentication required'
            return lazy()
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'fine']

    wrapped = wsgi_errors.fault_body(app)
    ok = webob.Request.blank('/').get_response(wrapped)
    assert (ok.status_int, ok.body) == (200, b'fine')
    denied = webob.Request.blank('/lazy').get_response(wrapped)
    assert denied.status_int == 401
    assert faults.is_fault(denied.body)
    assert 'Authentication required' in denied.text
    assert denied.headers['WWW-Authenticate'] == 'Keystone uri="x"'
