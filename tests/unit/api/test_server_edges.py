"""The API's own server (cheroot, as cyborg-api and cyborg-aio run it)
at the edges of HTTP:

- a request cheroot cannot parse (a malformed request line or
  Content-Length) was answered in plain text; it gets the JSON error
  body every other error has;
- a client sending its request a byte now and then held a request thread
  for as long as it liked (cheroot's only limit was its idle timeout, for
  each read): the request line, headers and body must now arrive within
  ``[api]request_read_timeout``, or the answer is a 408 and the
  connection is closed, and other clients are served meanwhile.
"""

import contextlib
import http.client
import json
import socket
import threading
import time

import pytest

from cyborg.cmd import api as api_cmd
from tests.fixtures import api as api_fixture

# Seconds a request has to arrive whole in these tests.
READ_TIMEOUT = 2
# How often a slow client sends its next byte: far less than cheroot's
# idle timeout for one read (10 s), so only the deadline stops it.
TRICKLE = 0.3


@pytest.fixture(scope='module')
def server():
    """(host, port) of the API served by ``APIServer`` with one request
    thread."""
    with api_fixture.api_service({('api', 'request_read_timeout'):
                                  READ_TIMEOUT,
                                  ('api', 'threads'): 1,
                                  (None, 'graceful_shutdown_timeout'): 1}
                                 ) as service:
        sock = api_cmd.listen('127.0.0.1', 0)
        api = api_cmd.APIServer(service.conf, service.app, sock)
        api.start()
        try:
            yield sock.getsockname()[:2]
        finally:
            api.stop()
            api.wait()
            sock.close()


@contextlib.contextmanager
def _connection(server, timeout=15):
    conn = socket.create_connection(server, timeout=timeout)
    try:
        yield conn
    finally:
        conn.close()


def _response(conn):
    """(status, headers, body) of the one response ``conn`` reads, up to
    the server closing the connection."""
    data = b''
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b'\r\n\r\n')
    lines = head.decode('latin-1').split('\r\n')
    headers = dict(line.split(': ', 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _fault(headers, body):
    assert headers['Content-Type'].split(';')[0] == 'application/json'
    assert int(headers['Content-Length']) == len(body)
    return json.loads(json.loads(body)['error_message'])


@pytest.mark.parametrize('request_bytes, status, message', [
    (b'POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\n'
     b'Content-Length: ten\r\n\r\n', 400,
     'Bad Request: Malformed Content-Length Header.'),
    (b'NONSENSE\r\n\r\n', 400, 'Bad Request: Malformed Request-Line'),
    (b'GET /v2 HTTP/1.1\n\n', 400,
     'Bad Request: HTTP requires CRLF terminators'),
    (b'GET /v2 HTTP/2.0\r\n\r\n', 505,
     'HTTP Version Not Supported: Cannot fulfill request'),
], ids=['content-length', 'request-line', 'no-crlf', 'http-2'])
def test_the_server_s_own_errors_have_the_error_body(server, request_bytes,
                                                     status, message):
    with _connection(server) as conn:
        conn.sendall(request_bytes)
        got, headers, body = _response(conn)
    assert got == status, body
    fault = _fault(headers, body)
    assert fault == {'faultcode': 'Client' if status < 500 else 'Server',
                     'faultstring': message, 'debuginfo': None}


def _trickle(conn, data, stop):
    """Send ``data`` a byte every TRICKLE seconds, until it is all sent,
    the server closes the connection or ``stop`` is set."""
    for i in range(len(data)):
        if stop.wait(TRICKLE):
            return
        try:
            conn.sendall(data[i:i + 1])
        except OSError:
            return


@contextlib.contextmanager
def _slow_client(server, data):
    """A connection sending ``data`` slowly, on a thread of its own."""
    stop = threading.Event()
    with _connection(server) as conn:
        thread = threading.Thread(target=_trickle, args=(conn, data, stop),
                                  daemon=True)
        thread.start()
        try:
            yield conn
        finally:
            stop.set()
            thread.join(10)


SLOW_HEADERS = (b'GET /v2 HTTP/1.1\r\nHost: x\r\n'
                + b'X-Slow: ' + b'a' * 200 + b'\r\n\r\n')
SLOW_BODY = (b'POST /v2/device_profiles HTTP/1.1\r\nHost: x\r\n'
             b'Content-Type: application/json\r\nContent-Length: 200\r\n'
             b'\r\n')


def test_headers_sent_slowly_are_cut_off_at_the_deadline(server):
    started = time.monotonic()
    with _slow_client(server, SLOW_HEADERS) as conn:
        got, headers, body = _response(conn)
    took = time.monotonic() - started
    assert got == 408, body
    assert _fault(headers, body)['faultstring'] == 'Request Timeout'
    assert READ_TIMEOUT - 0.5 < took < READ_TIMEOUT + 3


def test_a_body_sent_slowly_is_cut_off_at_the_deadline(server):
    started = time.monotonic()
    with _connection(server) as conn:
        # The headers at once; the body never comes whole.
        conn.sendall(SLOW_BODY)
        stop = threading.Event()
        thread = threading.Thread(target=_trickle,
                                  args=(conn, b' ' * 200, stop), daemon=True)
        thread.start()
        try:
            got, headers, body = _response(conn)
        finally:
            stop.set()
            thread.join(10)
    took = time.monotonic() - started
    assert got == 408, body
    assert headers['Connection'] == 'close'
    assert _fault(headers, body)['faultstring'] == (
        'Request Timeout: The client did not send the body in time.')
    assert READ_TIMEOUT - 0.5 < took < READ_TIMEOUT + 3


def test_other_clients_are_served_while_a_slow_one_trickles(server):
    """One request thread, taken by a slow client: another client's
    request waited for as long as the slow one kept sending."""
    with _slow_client(server, SLOW_HEADERS * 10):
        time.sleep(0.5)         # the slow client holds the thread
        started = time.monotonic()
        client = http.client.HTTPConnection(*server, timeout=15)
        try:
            client.request('GET', '/v2')
            response = client.getresponse()
            response.read()
        finally:
            client.close()
        assert response.status == 200
        assert time.monotonic() - started < READ_TIMEOUT + 3


def test_the_deadline_is_each_request_s_not_the_connection_s(server):
    """A keep-alive client whose requests together take longer than the
    deadline, each of them sent in time, keeps its connection."""
    client = http.client.HTTPConnection(*server, timeout=15)
    try:
        for _ in range(3):
            client.request('GET', '/v2')
            response = client.getresponse()
            response.read()
            assert response.status == 200
            assert response.getheader('Connection') != 'close'
            time.sleep(READ_TIMEOUT / 2 + 0.2)
    finally:
        client.close()


def test_a_body_nobody_reads_does_not_hold_the_thread(server):
    """/healthcheck reads no body: cheroot read what a request announced
    before its keep-alive response, each read with its idle timeout only,
    so a client announcing a large body and sending a byte now and then
    held the one request thread for good.  The connection closes
    instead, and the next client is served."""
    with _connection(server) as slow:
        slow.sendall(b'GET /healthcheck HTTP/1.1\r\nHost: x\r\n'
                     b'Content-Length: 1000000\r\n\r\n')
        stop = threading.Event()

        def trickle():
            while not stop.wait(TRICKLE):
                try:
                    slow.sendall(b'x')
                except OSError:
                    return

        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        try:
            status, headers, _body = _response(slow)
            assert status == 200
            assert headers.get('Connection') == 'close'
            started = time.monotonic()
            with _connection(server) as other:
                other.sendall(b'GET /healthcheck HTTP/1.1\r\nHost: x\r\n'
                              b'Connection: close\r\n\r\n')
                assert _response(other)[0] == 200
            assert time.monotonic() - started < READ_TIMEOUT
        finally:
            stop.set()
            sender.join()
