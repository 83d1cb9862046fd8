"""cyborg's HTTP servers hold a boot storm's connections until they accept
them: cheroot's own backlog (5) left a sixth client's SYN dropped while
the accept thread was busy; and they keep many clients' keep-alive
connections (cheroot's own limit is 10)."""

import http.client
import select
import socket
import threading
import time

import pytest

from cyborg.cmd import api as api_cmd
from cyborg.common import serving

# More connections than cheroot's default backlog would hold, fewer than
# any kernel's net.core.somaxconn.
CLIENTS = 64


def _app(environ, start_response):
    start_response('204 No Content', [])
    return []


def _own_socket():
    return serving.Server(('127.0.0.1', 0), _app, numthreads=1)


def _shared_socket():
    # cyborg-api: the socket is bound before any worker forks.
    return api_cmd._SharedSocketServer(api_cmd.listen('127.0.0.1', 0),
                                       wsgi_app=_app, numthreads=1)


def _connected(port, count, wait=1.5):
    """How many of ``count`` connections to ``port`` complete their
    handshake within ``wait`` seconds while nothing accepts them."""
    clients = [socket.socket() for _ in range(count)]
    try:
        for client in clients:
            client.setblocking(False)
            client.connect_ex(('127.0.0.1', port))
        pending, done = set(clients), 0
        deadline = time.monotonic() + wait
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select(
                [], list(pending), [], deadline - time.monotonic())
            for client in writable:
                pending.discard(client)
                if not client.getsockopt(socket.SOL_SOCKET,
                                         socket.SO_ERROR):
                    done += 1
        return done
    finally:
        for client in clients:
            client.close()


@pytest.mark.parametrize('make', [_own_socket, _shared_socket],
                         ids=['own-socket', 'shared-socket'])
def test_a_server_not_accepting_yet_holds_every_connection(make):
    server = make()
    # Listening, with the request threads started, but no accept loop:
    # what a busy accept thread looks like from outside.
    server.prepare()
    try:
        port = server.socket.getsockname()[1]
        assert _connected(port, CLIENTS) == CLIENTS
    finally:
        server.stop()


# More clients than cheroot keeps keep-alive connections for by default
# (10).
KEEP_ALIVE_CLIENTS = 24


@pytest.mark.parametrize('make', [_own_socket, _shared_socket],
                         ids=['own-socket', 'shared-socket'])
def test_many_keep_alive_clients_keep_their_connections(make):
    """Each of many clients that keep their connection open gets to
    reuse it: none is answered ``Connection: close``."""
    server = make()
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    port = server.socket.getsockname()[1]
    clients = [http.client.HTTPConnection('127.0.0.1', port, timeout=10)
               for _ in range(KEEP_ALIVE_CLIENTS)]
    try:
        for _round in range(2):
            closing = 0
            for client in clients:
                client.request('GET', '/')
                response = client.getresponse()
                response.read()
                assert response.status == 204
                closing += response.getheader('Connection', '') == 'close'
            assert closing == 0
        # The second round went over the first round's connections.
        assert all(client.sock is not None for client in clients)
    finally:
        for client in clients:
            client.close()
        server.stop()
        thread.join(10)
