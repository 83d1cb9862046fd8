"""The keep-alive client's own reading of an answer's header section
(``keepalive._Response``), against a real socket server that sends
exactly the bytes each case needs, and through ``KeepAlive`` with a real
keystoneauth session and adapter."""

import http.client
import socket
import threading

import pytest
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import noauth
from keystoneauth1 import session as ks_session

from cyborg.common import keepalive


class CannedServer:
    """Answers each request read on a connection with the next of
    ``answers`` (raw bytes), keeping the connection open unless the next
    answer is None: then it closes it right after sending.  ``requests``
    holds each request's raw head; ``connections`` counts the connections
    accepted."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        self.connections = 0
        self._sock = socket.create_server(('127.0.0.1', 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while self.answers:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                self._serve_connection(conn)

    def _serve_connection(self, conn):
        reader = conn.makefile('rb')
        while self.answers:
            head = b''
            while not head.endswith(b'\r\n\r\n'):
                line = reader.readline()
                if not line:
                    return
                head += line
            self.requests.append(head)
            for line in head.split(b'\r\n'):
                if line.lower().startswith(b'content-length:'):
                    reader.read(int(line.split(b':')[1]))
            conn.sendall(self.answers.pop(0))
            if self.answers and self.answers[0] is None:
                self.answers.pop(0)
                return

    def close(self):
        self._sock.close()


@pytest.fixture
def serve():
    servers = []

    def start(*answers):
        server = CannedServer(answers)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.close()


def get(server, method='GET'):
    conn = http.client.HTTPConnection('127.0.0.1', server.port, timeout=5)
    conn.response_class = keepalive._Response
    conn.request(method, '/x')
    response = conn.getresponse()
    return conn, response, response.read()


def test_reads_the_status_headers_and_a_sized_body(serve):
    server = serve(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
                   b'Content-Length: 11\r\nX-Openstack-Request-Id: req-1\r\n'
                   b'\r\n{"a": true}')
    _conn, response, body = get(server)
    assert (response.status, response.reason, response.version) == (
        200, 'OK', 11)
    assert body == b'{"a": true}'
    assert response.getheader('content-type') == 'application/json'
    assert response.getheader('x-openstack-request-id') == 'req-1'
    assert response.headers.get('Missing', 'none') == 'none'
    assert not response.will_close


def test_the_connection_carries_the_next_call(serve):
    answer = b'HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n'
    server = serve(answer, answer)
    conn, first, _ = get(server)
    conn.request('GET', '/y')
    second = conn.getresponse()
    second.read()
    assert (first.status, second.status) == (204, 204)
    assert server.connections == 1
    assert len(server.requests) == 2


def test_reads_a_chunked_body(serve):
    server = serve(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n'
                   b'4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n')
    _conn, response, body = get(server)
    assert body == b'abcdefg'
    assert response.chunked and response.isclosed()
    assert not response.will_close


def test_no_length_means_the_server_closes(serve):
    server = serve(b'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n'
                   b'until the end', None)
    _conn, response, body = get(server)
    assert response.will_close
    assert body == b'until the end'


@pytest.mark.parametrize('head', [
    b'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n',
    b'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n',
])
def test_a_closing_answer_says_so(serve, head):
    server = serve(head + b'ok')
    _conn, response, body = get(server)
    assert response.will_close
    assert body == b'ok'


def test_an_http_1_0_keep_alive_stays_open(serve):
    server = serve(b'HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n'
                   b'Content-Length: 2\r\n\r\nok')
    _conn, response, _body = get(server)
    assert response.version == 10
    assert not response.will_close


def test_no_body_whatever_the_length_says(serve):
    server = serve(b'HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n',
                   b'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n')
    conn, response, body = get(server)
    assert (response.status, body) == (304, b'')
    conn.request('HEAD', '/x')
    head = conn.getresponse()
    assert head.read() == b''


def test_a_continue_answer_is_skipped(serve):
    server = serve(b'HTTP/1.1 100 Continue\r\nX-Skipped: 1\r\n\r\n'
                   b'HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nhi')
    _conn, response, body = get(server)
    assert (response.status, body) == (201, b'hi')
    assert response.getheader('X-Skipped') is None


def test_repeated_and_folded_fields(serve):
    # An obsolete folded line joins its field with a space (RFC 7230,
    # 3.2.4); http.client keeps the raw line breaks in the value.
    server = serve(b'HTTP/1.1 200 OK\r\nVary: a\r\nVary: b\r\n'
                   b'X-Long: one\r\n two\r\n\tthree\r\n'
                   b'X-Empty:\r\nContent-Length: 0\r\n\r\n')
    _conn, response, _body = get(server)
    assert response.headers.get('vary') == 'a'
    assert response.headers.get_all('VARY') == ['a', 'b']
    assert response.getheader('vary') == 'a, b'
    assert response.getheader('x-long') == 'one two three'
    assert response.getheader('x-empty') == ''
    assert response.headers.get_all('x-none') is None
    assert ('Vary', 'b') in response.getheaders()


def test_a_bad_length_is_read_to_the_close(serve):
    server = serve(b'HTTP/1.1 200 OK\r\nContent-Length: nine\r\n\r\nbody',
                   None)
    _conn, response, body = get(server)
    assert response.length is None and response.will_close
    assert body == b'body'


@pytest.mark.parametrize('head, error', [
    (b'HTTP/1.1 200 OK\r\nno colon here\r\n\r\n', http.client.HTTPException),
    (b'HTTP/1.1 200 OK\r\n' + b'X-A: 1\r\n' * 101 + b'\r\n',
     http.client.HTTPException),
    (b'HTTP/1.1 200 OK\r\nX-Big: ' + b'a' * 70000 + b'\r\n\r\n',
     http.client.LineTooLong),
    (b'HTTP/2 200 OK\r\n\r\n', http.client.HTTPException),
    (b'SPDY 200 OK\r\n\r\n', http.client.BadStatusLine),
])
def test_a_malformed_answer_raises_what_http_client_raises(serve, head,
                                                           error):
    # A field line without a colon is refused too (the email parser that
    # http.client uses lets it pass); KeepAlive's caller then goes through
    # its keystoneauth adapter.
    server = serve(head)
    with pytest.raises(error):
        get(server)


def test_keep_alive_uses_it_and_reuses_the_connection(serve):
    ok = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
          b'Content-Length: 8\r\n\r\n{"n": 1}')
    server = serve(ok, ok)
    endpoint = f'http://127.0.0.1:{server.port}/placement'
    session = ks_session.Session(auth=noauth.NoAuth())
    adapter = ks_adapter.Adapter(session, endpoint_override=endpoint)
    client = keepalive.KeepAlive(adapter, session, session.auth,
                                 api_version='placement 1.39',
                                 user_agent='cyborg-test')
    first = client.request('GET', '/resource_providers')
    second = client.request('PUT', '/traits/CUSTOM_X', body={'a': 1})
    assert [first.json(), second.json()] == [{'n': 1}, {'n': 1}]
    assert server.connections == 1
    # The answers were read by _Response, not http.client's own.
    assert client._local.conn.response_class is keepalive._Response
    assert server.requests[0].startswith(
        b'GET /placement/resource_providers HTTP/1.1\r\n')
    assert b'OpenStack-API-Version: placement 1.39' in server.requests[0]
    assert b'Content-Type: application/json' in server.requests[1]


@pytest.mark.parametrize('status', [301, 302, 307, 308, 401])
def test_a_redirect_or_a_401_is_left_to_keystoneauth(serve, status):
    """keystoneauth follows a redirect (and renews a token): the caller
    goes through it; a 3xx taken for the service's answer lost Nova
    events."""
    server = serve(b'HTTP/1.1 %d Moved\r\nLocation: https://elsewhere/x\r\n'
                   b'Content-Length: 0\r\n\r\n' % status)
    endpoint = f'http://127.0.0.1:{server.port}/compute'
    session = ks_session.Session(auth=noauth.NoAuth())
    adapter = ks_adapter.Adapter(session, endpoint_override=endpoint)
    client = keepalive.KeepAlive(adapter, session, session.auth,
                                 api_version='compute 2.82',
                                 user_agent='cyborg-test')
    assert client.request('POST', '/os-server-external-events',
                          body={'events': []}) is None
    assert len(server.requests) == 1
