"""WSGI middleware giving every error response the error body
(doc/source/contract.rst, "Errors"), and the body size limit.

The app's own errors already have the body; this catches those made by
the middleware outside the app (auth_token's 401, ...).
"""

from oslo_middleware import sizelimit
import webob
import webob.dec

from cyborg.api import faults

SIZE_GROUP = 'oslo_middleware'


class FaultBody:
    def __init__(self, app):
        self.app = app

    @webob.dec.wsgify
    def __call__(self, req):
        resp = req.get_response(self.app)
        if resp.status_int < 400 or req.method == 'HEAD':
            return resp
        if faults.is_fault(resp.body):
            return resp
        message = resp.status.split(' ', 1)[-1]
        detail = _detail(resp)
        if detail:
            message = '%s: %s' % (message, detail)
        new = faults.response(resp.status_int, message)
        # Keep headers that tell the client what to do next.
        for name in ('WWW-Authenticate', 'Allow', 'Retry-After', 'Vary',
                     'OpenStack-API-Version', 'OpenStack-API-Minimum-Version',
                     'OpenStack-API-Maximum-Version'):
            if name in resp.headers:
                new.headers[name] = resp.headers[name]
        return new


def _detail(resp):
    """A short plain-text reason from the original body, if it has one."""
    if not resp.content_type or 'json' in resp.content_type:
        return ''
    text = resp.text.strip() if resp.charset else ''
    if not text or '<' in text:
        return ''
    return text.splitlines()[-1][:300]


def limit_body(app, conf):
    """413 for a body larger than ``[oslo_middleware]
    max_request_body_size``, before the app reads any of it (a chunked
    body is read up to the limit only)."""
    conf.register_opts(sizelimit.OPTS, group=SIZE_GROUP)

    @webob.dec.wsgify
    def middleware(req):
        limit = conf.oslo_middleware.max_request_body_size
        length = req.content_length
        if length is None and req.is_body_readable:
            data = req.body_file.read(limit + 1)
            length = len(data)
            req.body = data
        if length is not None and length > limit:
            return faults.response(
                413, 'Request body larger than %d bytes '
                     '([oslo_middleware]max_request_body_size).' % limit)
        return req.get_response(app)
    return middleware
