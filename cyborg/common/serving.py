"""The HTTP server every cyborg HTTP endpoint runs on (cyborg-api,
cyborg-aio's API, cyborg-wsgi-api and the embedded Placement): cheroot's
WSGI server, with a listen backlog sized for a boot storm.

cheroot listens with a backlog of 5 (``request_queue_size``), on a socket
it binds itself and on one it is handed alike.  A listening socket holds
at most that many connections that its accept thread has not taken yet;
past it the kernel drops a new connection's SYN (the client tries again a
second later, then three) or, once SYN cookies are in play, may answer a
client that already sent its request with a reset.  Nova binding the ARQs
of a boot storm, or every agent of a cell reporting after a restart,
opens far more than 5 at once, and the accept thread shares the
interpreter with every request thread, so it falls behind exactly then.
The kernel caps the backlog at ``net.core.somaxconn``.

cheroot also keeps at most 10 idle keep-alive connections per server;
past that every response says ``Connection: close``, so with more than
ten clients (Nova's compute and conductor services, each keeping its
connection) most requests paid a new TCP connection.  Ours keep up to
``KEEP_ALIVE_CONNECTIONS``: each is one file descriptor, closed after
cheroot's idle timeout (10 s).

cheroot's only limit on a slow client is that idle timeout, for each
read of the socket: a client sending a byte every few seconds held a
request thread for as long as it liked (a handful of such clients held
them all).  With ``request_read_timeout`` a request (its line, headers
and body) must have arrived whole that many seconds after the thread
took it up: each read waits at most for what is left of that, and one
that runs out answers 408 and closes the connection.  The response is
not bound by it (the deadline ends when the response starts).

cheroot answers a request it cannot parse (a malformed request line or
Content-Length, headers too large, a read timeout) itself, in plain
text; with ``error_body`` (the API's: ``cyborg.api.faults.body``) those
answers carry the JSON error body every other error has.  One is left
plain: the 503 cheroot answers on its own thread when it cannot queue a
connection for the request threads, made by a request class it does not
let a server replace.
"""

import socket
import time

from cheroot import errors
from cheroot import makefile as cheroot_makefile
from cheroot import server as cheroot_server
from cheroot import wsgi
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

LISTEN_BACKLOG = 4096
# Idle keep-alive connections one server keeps open at most.
KEEP_ALIVE_CONNECTIONS = 256


class _DeadlineSocketIO(socket.SocketIO):
    """The socket's reads for a connection (``_Connection``): each one
    waits at most until the deadline of the request being read."""

    def __init__(self, sock, mode, conn):
        super().__init__(sock, mode)
        self._conn = conn

    def readinto(self, b):
        conn = self._conn
        deadline = conn.read_deadline
        usual = self._sock.gettimeout()
        remaining = None if deadline is None else deadline - time.monotonic()
        try:
            if remaining is None or (usual is not None
                                     and remaining >= usual):
                return super().readinto(b)
            if remaining <= 0:
                conn.deadline_passed()
                raise TimeoutError('timed out')
            self._sock.settimeout(remaining)
            try:
                return super().readinto(b)
            except TimeoutError:
                conn.deadline_passed()
                raise
            finally:
                self._sock.settimeout(usual)
        except TimeoutError:
            conn.read_timed_out = True
            raise


class _DeadlineReader(cheroot_makefile.StreamReader):
    """cheroot's buffered reader of a connection's socket, over
    ``_DeadlineSocketIO``."""

    def __init__(self, sock, conn, bufsize):
        # StreamReader's own __init__, with our raw reader in place of
        # a plain SocketIO.
        cheroot_makefile.io.BufferedReader.__init__(
            self, _DeadlineSocketIO(sock, 'rb', conn), bufsize)
        self.bytes_read = 0


class _Request(cheroot_server.HTTPRequest):
    """cheroot's request: reads it within the server's
    ``request_read_timeout`` and answers its own errors with the
    server's ``error_body``."""

    def parse_request(self):
        timeout = self.server.request_read_timeout
        self.conn.read_deadline = (time.monotonic() + timeout if timeout
                                   else None)
        super().parse_request()

    def send_headers(self):
        self._response_starts()
        super().send_headers()

    def _response_starts(self):
        # The request is read: what is left of it (a body the app did not
        # read, which cheroot reads before a keep-alive response) may
        # take the usual time.  After a read that timed out, the
        # socket cannot be read again: the connection closes.
        self.conn.read_deadline = None
        if self.conn.read_timed_out:
            self.close_connection = True
        # A body the app did not read (/healthcheck, a CORS preflight):
        # cheroot would read it all before a keep-alive response, with
        # its idle timeout for each read only (a client announcing a
        # large body, then sending a byte now and then, would hold the
        # thread for good).  The connection closes instead.
        if getattr(self.rfile, 'remaining', 0) > 0:
            self.close_connection = True

    def simple_response(self, status, msg=''):
        self._response_starts()
        error_body = self.server.error_body
        if error_body is None:
            return super().simple_response(status, msg)
        status = str(status)
        code = int(status[:3])
        message = status[4:] + (': %s' % msg if msg else '')
        body = error_body(code, message).encode('utf-8')
        # As cheroot's own: it closes the connection after 413 and 414
        # (and after any error made while parsing).
        if code in (413, 414):
            self.close_connection = True
        lines = ['%s %s' % (self.server.protocol, status),
                 'Content-Length: %d' % len(body),
                 'Content-Type: application/json']
        if self.close_connection and self.response_protocol == 'HTTP/1.1':
            lines.append('Connection: close')
        head = ''.join(line + '\r\n' for line in lines) + '\r\n'
        try:
            self.conn.wfile.write(head.encode('ISO-8859-1') + body)
        except OSError as exc:
            if exc.args[0] not in errors.socket_errors_to_ignore:
                raise


class _Connection(cheroot_server.HTTPConnection):
    """cheroot's connection, reading through ``_DeadlineReader`` (a
    plain socket's; one an SSL adapter wraps reads as cheroot does)."""

    RequestHandlerClass = _Request

    def __init__(self, server, sock, makefile=cheroot_makefile.MakeFile):
        # When the request being read must have arrived (monotonic), and
        # whether a read of the connection timed out.
        self.read_deadline = None
        self.read_timed_out = False
        if makefile is cheroot_makefile.MakeFile:
            makefile = self._makefile
        super().__init__(server, sock, makefile)

    def _makefile(self, sock, mode='r',
                  bufsize=cheroot_makefile.io.DEFAULT_BUFFER_SIZE):
        if 'r' in mode:
            return _DeadlineReader(sock, self, bufsize)
        return cheroot_makefile.MakeFile(sock, mode, bufsize)

    def deadline_passed(self):
        LOG.info('%s did not send its whole request within %s seconds; '
                 'answering 408 and closing the connection',
                 self.remote_addr or 'A client',
                 self.server.request_read_timeout)


class Server(wsgi.Server):
    """cheroot's WSGI server listening with ``LISTEN_BACKLOG``, keeping
    up to ``KEEP_ALIVE_CONNECTIONS`` idle connections, reading each
    request within ``request_read_timeout`` seconds (None: no limit but
    cheroot's idle timeout for each read) and answering its own errors
    with the body ``error_body(status, message)`` returns (JSON text;
    None: cheroot's plain text)."""

    keep_alive_conn_limit = KEEP_ALIVE_CONNECTIONS
    ConnectionClass = _Connection

    def __init__(self, bind_addr, wsgi_app, request_read_timeout=None,
                 error_body=None, **kwargs):
        kwargs.setdefault('request_queue_size', LISTEN_BACKLOG)
        super().__init__(bind_addr, wsgi_app, **kwargs)
        self.request_read_timeout = request_read_timeout
        self.error_body = error_body
