"""WSGI middleware giving every error response the error body
(doc/source/contract.rst, "Errors").

The app's own errors already have the body; this catches those made by
the middleware outside the app (auth_token's 401, the body limit's 413,
...).
"""

import webob
import webob.dec

from cyborg.api import faults



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

