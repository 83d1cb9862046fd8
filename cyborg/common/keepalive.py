"""HTTP calls to an OpenStack service over keep-alive connections, one
per thread.

keystoneauth still authenticates (its auth headers: the cached token) and
finds the endpoint; ``http.client`` carries the call.  keystoneauth's
requests stack costs about three times the CPU of the call itself, which
for the conductor's Placement calls and Nova events was most of their
cost.  ``KeepAlive.request`` answers None whenever this path is not the
ordinary one (a proxy or TLS options not reproduced here, an endpoint or a
connection that cannot be had, a 401: a token to renew, a 3xx: a redirect
to follow), for the caller to go through its keystoneauth adapter, with its
retries, redirects and error reporting.
"""

import http.client
import json
import select
import socket
import ssl
import threading
from urllib import parse

from keystoneauth1 import exceptions as ks_exc
from requests import certs as requests_certs
from requests import utils as requests_utils


class Response:
    """What the client reads of an answer (``requests.Response``'s
    names)."""

    __slots__ = ('status_code', 'content')

    def __init__(self, status_code, content):
        self.status_code = status_code
        self.content = content

    def json(self):
        return json.loads(self.content)

    @property
    def text(self):
        return self.content.decode('utf-8', 'replace')


# Limits on an answer's header section, as http.client sets them.
_MAX_LINE = 65536
_MAX_HEADERS = 100


class _Headers:
    """An answer's header fields, looked up by name in any case: what
    ``http.client.HTTPResponse`` and its callers read of its ``headers``
    (``get``, ``get_all``, ``items``).  A name given twice answers its
    first value to ``get``, as ``email.message.Message`` does."""

    __slots__ = ('_fields',)

    def __init__(self, fields):
        self._fields = fields

    def get(self, name, default=None):
        name = name.lower()
        for field, value in self._fields:
            if field.lower() == name:
                return value
        return default

    def get_all(self, name, default=None):
        name = name.lower()
        values = [value for field, value in self._fields
                  if field.lower() == name]
        return values or default

    def items(self):
        return list(self._fields)


class _Response(http.client.HTTPResponse):
    """``http.client``'s answer with its header section split here:
    ``http.client`` hands it to the ``email`` package's parser, which made
    reading a Placement answer (11 fields) take 32 microseconds instead of
    10; a host's first report reads 19 of them, a bind one."""

    def begin(self):
        if self.headers is not None:
            return
        status = http.client.CONTINUE
        while status == http.client.CONTINUE:
            version, status, reason = self._read_status()
            fields = _read_fields(self.fp)
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ('HTTP/1.0', 'HTTP/0.9'):
            self.version = 10
        elif version.startswith('HTTP/1.'):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = _Headers(fields)
        encoding = self.headers.get('transfer-encoding')
        self.chunked = bool(encoding) and encoding.lower() == 'chunked'
        self.chunk_left = None
        self.will_close = self._check_close()
        self.length = None
        length = self.headers.get('content-length')
        if length and not self.chunked:
            try:
                self.length = int(length)
            except ValueError:
                pass
            else:
                if self.length < 0:
                    self.length = None
        if (status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED)
                or 100 <= status < 200 or self._method == 'HEAD'):
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            # No way to tell where the body ends but the server closing.
            self.will_close = True


def _read_fields(fp):
    """The (name, value) pairs of a header section, read up to its blank
    line; a continuation line (obsolete folding) joins the field above."""
    fields = []
    while True:
        line = fp.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong('header line')
        if line in (b'\r\n', b'\n', b''):
            return fields
        if len(fields) >= _MAX_HEADERS:
            raise http.client.HTTPException(
                'got more than %d headers' % _MAX_HEADERS)
        text = line.decode('iso-8859-1')
        if text[0] in ' \t' and fields:
            name, value = fields[-1]
            fields[-1] = (name, value + ' ' + text.strip())
            continue
        name, colon, value = text.partition(':')
        if not colon:
            raise http.client.HTTPException(
                'malformed header line: %r' % line[:80])
        fields.append((name.strip(), value.strip()))


class KeepAlive:
    """Calls to the service of a keystoneauth ``adapter`` (see the
    module), each with ``OpenStack-API-Version: <api_version>`` and the
    other ``headers`` given."""

    def __init__(self, adapter, session, auth, api_version, user_agent,
                 headers=None):
        self._headers = {'Accept': 'application/json',
                         'OpenStack-API-Version': api_version,
                         'User-Agent': user_agent, **(headers or {})}
        self._adapter = adapter
        self._session = session
        self._auth = auth
        self._local = threading.local()
        self._endpoint = None
        self._usable = not (getattr(session, 'tls_ciphers', None) or
                            getattr(session, 'tls_min_version', None))
        self._ssl = None

    def request(self, method, url, body=None):
        target = self._usable and self._target()
        if not target:
            return None
        headers = dict(self._headers)
        headers.update(self._session.get_auth_headers(self._auth) or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers['Content-Type'] = 'application/json'
        conn = self._connection(target)
        try:
            conn.request(method, target[3] + url, body=data, headers=headers)
            resp = conn.getresponse()
            content = resp.read()
        except socket.timeout:
            self._drop()
            raise
        except (http.client.HTTPException, OSError):
            # The service closed or reset the connection, or cannot be
            # reached: the adapter tries again and reports what it finds.
            self._drop()
            self._endpoint = None
            return None
        if resp.will_close:
            self._drop()
        if resp.status == 401 or 300 <= resp.status < 400:
            # A token to renew, or a redirect (an http endpoint sent to
            # https, a path rewritten): keystoneauth renews and follows.
            return None
        return Response(resp.status, content)

    def _target(self):
        """(scheme, host, port, path prefix) of the endpoint, or None."""
        if self._endpoint is None:
            try:
                endpoint = self._adapter.get_endpoint()
            except ks_exc.ClientException:
                return None
            if not endpoint or requests_utils.get_environ_proxies(
                    endpoint) or self._session.session.proxies:
                return None
            parts = parse.urlsplit(endpoint)
            if parts.scheme not in ('http', 'https'):
                return None
            self._endpoint = (parts.scheme, parts.hostname, parts.port,
                              parts.path.rstrip('/'))
        return self._endpoint

    def _connection(self, target):
        conn = getattr(self._local, 'conn', None)
        if conn is not None and (self._local.target != target or
                                 closed_by_peer(conn)):
            self._drop()
            conn = None
        if conn is None:
            scheme, host, port, _prefix = target
            timeout = self._session.timeout
            if scheme == 'https':
                conn = http.client.HTTPSConnection(
                    host, port, timeout=timeout, context=self._context())
            else:
                conn = http.client.HTTPConnection(host, port,
                                                  timeout=timeout)
            conn.response_class = _Response
            self._local.conn, self._local.target = conn, target
        return conn

    def _drop(self):
        conn = getattr(self._local, 'conn', None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def _context(self):
        """An SSL context from the session's verify and cert options."""
        if self._ssl is None:
            verify, cert = self._session.verify, self._session.cert
            # The CA bundle requests would trust, unless one is configured.
            context = ssl.create_default_context(
                cafile=verify if isinstance(verify, str) else
                requests_certs.where())
            if verify is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if cert:
                if isinstance(cert, (tuple, list)):
                    context.load_cert_chain(cert[0], cert[1])
                else:
                    context.load_cert_chain(cert)
            self._ssl = context
        return self._ssl


def closed_by_peer(conn):
    """Whether an idle kept-alive connection was closed by the server (it
    reads as readable: EOF), so it must not carry the next call."""
    if conn.sock is None:
        return False
    try:
        return bool(select.select([conn.sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True
