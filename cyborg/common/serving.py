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
"""

from cheroot import wsgi

LISTEN_BACKLOG = 4096
# Idle keep-alive connections one server keeps open at most.
KEEP_ALIVE_CONNECTIONS = 256


class Server(wsgi.Server):
    """cheroot's WSGI server listening with ``LISTEN_BACKLOG`` and
    keeping up to ``KEEP_ALIVE_CONNECTIONS`` idle connections."""

    keep_alive_conn_limit = KEEP_ALIVE_CONNECTIONS

    def __init__(self, bind_addr, wsgi_app, **kwargs):
        kwargs.setdefault('request_queue_size', LISTEN_BACKLOG)
        super().__init__(bind_addr, wsgi_app, **kwargs)
