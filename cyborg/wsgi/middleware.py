"""WSGI middleware about the HTTP exchange itself, whatever the server:

- ``access_log``: one INFO line per request on the ``cyborg.api.access``
  logger (method, path, status, bytes sent, duration, request id), logged
  when the response is finished, so the duration includes sending it.
  Requests for the ``quiet`` paths (the API's healthcheck) are logged at
  DEBUG: a load balancer asks every few seconds.
- ``request_id``: the request id every log line and the response carry.
- ``read_body``: reads the request body before anything else looks at it,
  so that a client that goes away while sending it costs one INFO line
  instead of an ERROR with a traceback from deep inside the framework;
  a body over ``[oslo_middleware]max_request_body_size`` bytes is refused
  with 413 without being read (a chunked one is read up to the limit),
  and one the server stopped waiting for (its idle timeout, or its
  deadline for the whole request: ``cyborg.common.serving``) with 408.
"""

import io
import re
import time
from urllib import parse

from oslo_context import context as oslo_context
from oslo_log import log as logging
from oslo_middleware import request_id as oslo_request_id
from oslo_middleware import sizelimit
import webob
import webob.exc

ACCESS_LOG = logging.getLogger('cyborg.api.access')
LOG = logging.getLogger(__name__)

_INBOUND_REQUEST_ID = 'HTTP_X_OPENSTACK_REQUEST_ID'
_RESPONSE_REQUEST_ID = oslo_request_id.HTTP_RESP_HEADER_REQUEST_ID
_REQUEST_ID_FORMAT = re.compile(oslo_request_id.ID_FORMAT)
SIZE_GROUP = 'oslo_middleware'
_CHUNK = 65536


def _context(environ):
    # The request's own id, never the thread's last context (a request
    # that auth refused made none).
    return oslo_context.RequestContext(
        request_id=environ.get(oslo_request_id.ENV_REQUEST_ID),
        overwrite=False)


def access_log(app, quiet=()):
    """Log one line per request once its response is sent (at DEBUG for
    the paths in ``quiet``)."""
    def middleware(environ, start_response):
        started = time.monotonic()
        seen = {'status': None,
                'level': (logging.DEBUG if environ.get('PATH_INFO') in quiet
                          else logging.INFO)}

        def recording_start_response(status, headers, exc_info=None):
            seen['status'] = status.split(' ', 1)[0]
            return start_response(status, headers, exc_info)

        try:
            body = app(environ, recording_start_response)
        except Exception:
            seen['status'] = seen['status'] or '500'
            _log(environ, seen, 0, started)
            raise
        return _LoggedBody(body, environ, seen, started)
    return middleware


class _LoggedBody:
    """The response body, counted as it is sent; logs once, when the
    server asks for more after the last chunk or closes it (a client gone
    mid-response: what was sent until then)."""

    def __init__(self, body, environ, seen, started):
        self._body = body
        self._environ = environ
        self._seen = seen
        self._started = started
        self._sent = 0
        self._logged = False

    def __iter__(self):
        for chunk in self._body:
            self._sent += len(chunk)
            yield chunk
        self._log_once()

    def close(self):
        try:
            if hasattr(self._body, 'close'):
                self._body.close()
        finally:
            self._log_once()

    def _log_once(self):
        if not self._logged:
            self._logged = True
            _log(self._environ, self._seen, self._sent, self._started)


# What the access line keeps of a request's path as it is; anything else
# (spaces, quotes, control characters, bytes past ASCII) is percent-encoded,
# so that a path cannot end the line or forge another one.
_PATH_SAFE = "/:@!$&'()*+,;=-._~[]"
_QUERY_SAFE = _PATH_SAFE + '%?'


def _logged_path(environ):
    """The request's path and query for the access line: the path as the
    server decoded it (WSGI: the bytes as latin-1) encoded again, the
    query as sent, with what is not printable ASCII encoded."""
    path = parse.quote(environ.get('SCRIPT_NAME', '') +
                       environ.get('PATH_INFO', '') or '/',
                       safe=_PATH_SAFE, encoding='latin-1')
    if environ.get('QUERY_STRING'):
        path += '?' + parse.quote(environ['QUERY_STRING'], safe=_QUERY_SAFE,
                                  encoding='latin-1')
    return path


def _log(environ, seen, sent, started):
    path = _logged_path(environ)
    status = seen['status']
    ACCESS_LOG.log(
        seen['level'], '%(remote)s "%(method)s %(path)s" status: %(status)s '
        'len: %(len)d time: %(time).4f request_id: %(request_id)s',
        {'remote': environ.get('REMOTE_ADDR', '-'),
         'method': environ.get('REQUEST_METHOD', '-'), 'path': path,
         'status': status or '-', 'len': sent,
         'time': time.monotonic() - started,
         'request_id': environ.get(oslo_request_id.ENV_REQUEST_ID, '-')},
        context=_context(environ))


def request_id(app):
    """Give each request an id (``openstack.request_id`` in the environ, the
    ``x-openstack-request-id`` response header) and keep a well-formed
    global request id sent by the caller (``openstack.global_request_id``),
    as oslo.middleware's RequestId does, without building request and
    response objects for it."""
    def middleware(environ, start_response):
        inbound = environ.get(_INBOUND_REQUEST_ID, '')
        if inbound and _REQUEST_ID_FORMAT.match(inbound):
            environ[oslo_request_id.GLOBAL_REQ_ID] = inbound
        req_id = oslo_context.generate_request_id()
        environ[oslo_request_id.ENV_REQUEST_ID] = req_id

        def adding_start_response(status, headers, exc_info=None):
            if not any(name.lower() == _RESPONSE_REQUEST_ID
                       for name, _value in headers):
                headers = list(headers) + [(_RESPONSE_REQUEST_ID, req_id)]
            return start_response(status, headers, exc_info)
        return app(environ, adding_start_response)
    return middleware


def read_body(app, conf):
    """Read the whole request body first (at most
    ``[oslo_middleware]max_request_body_size`` bytes)."""
    conf.register_opts(sizelimit.OPTS, group=SIZE_GROUP)

    def middleware(environ, start_response):
        limit = conf.oslo_middleware.max_request_body_size
        length = _content_length(environ)
        chunked = 'chunked' in environ.get('HTTP_TRANSFER_ENCODING',
                                           '').lower()
        if length is None and not chunked:
            return app(environ, start_response)
        if length is not None and length > limit:
            return _too_large(limit)(environ, start_response)
        try:
            body = _read(environ['wsgi.input'], length, limit)
        except _TimedOut:
            LOG.info('The client of %s %s was too slow sending the body',
                     environ.get('REQUEST_METHOD'),
                     environ.get('PATH_INFO'), context=_context(environ))
            return webob.exc.HTTPRequestTimeout(
                'The client did not send the body in time.')(
                    environ, start_response)
        except _ClientGone as exc:
            LOG.info('Client went away while sending the body of %s %s: '
                     '%s', environ.get('REQUEST_METHOD'),
                     environ.get('PATH_INFO'), exc,
                     context=_context(environ))
            return webob.exc.HTTPBadRequest(
                'The client disconnected while sending the body.')(
                    environ, start_response)
        except _TooLarge:
            return _too_large(limit)(environ, start_response)
        environ['wsgi.input'] = io.BytesIO(body)
        environ['CONTENT_LENGTH'] = str(len(body))
        environ.pop('HTTP_TRANSFER_ENCODING', None)
        return app(environ, start_response)
    return middleware


def _too_large(limit):
    return webob.exc.HTTPRequestEntityTooLarge(
        'The request body is larger than %d bytes '
        '([oslo_middleware]max_request_body_size).' % limit)


class _ClientGone(Exception):
    pass


class _TooLarge(Exception):
    pass


class _TimedOut(Exception):
    pass


def _content_length(environ):
    value = environ.get('CONTENT_LENGTH')
    if value in (None, ''):
        return None
    try:
        return max(0, int(value))
    except ValueError:
        return None


def _read(stream, length, limit):
    """``length`` bytes from ``stream`` (up to EOF when None)."""
    want = limit + 1 if length is None else length
    parts = []
    got = 0
    while got < want:
        try:
            chunk = stream.read(min(_CHUNK, want - got))
        except TimeoutError as exc:
            raise _TimedOut() from exc
        except OSError as exc:
            raise _ClientGone(exc) from exc
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    if length is None and got > limit:
        raise _TooLarge()
    if length is not None and got < length:
        raise _ClientGone('%d of %d bytes received' % (got, length))
    return b''.join(parts)
