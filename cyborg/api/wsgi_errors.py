"""WSGI middleware giving every error response the error body
(doc/source/contract.rst, "Errors").

The app's own errors already have the body; this catches those made by
the middleware outside the app (auth_token's 401, the body limit's 413,
...).  Plain WSGI: a response below 400 passes through untouched, with no
request or response object built for it.
"""

import webob

from cyborg.api import faults

# Headers of the original error that tell the client what to do next.
_KEPT_HEADERS = ('WWW-Authenticate', 'Allow', 'Retry-After', 'Vary',
                 'OpenStack-API-Version', 'OpenStack-API-Minimum-Version',
                 'OpenStack-API-Maximum-Version')


def fault_body(app):
    def middleware(environ, start_response):
        error = {}
        passed = []

        def checking_start_response(status, headers, exc_info=None):
            if (int(status.split(' ', 1)[0]) < 400
                    or environ.get('REQUEST_METHOD') == 'HEAD'):
                passed.append(True)
                return start_response(status, headers, exc_info)
            error.update(status=status, headers=headers)
            return _unsupported_write

        body = app(environ, checking_start_response)
        if passed:
            return body
        # An error, or an app that starts its response only once iterated.
        try:
            data = b''.join(body)
        finally:
            if hasattr(body, 'close'):
                body.close()
        if passed:
            return [data]
        original = webob.Response(status=error['status'],
                                  headerlist=list(error['headers']),
                                  body=data)
        return _with_fault_body(original)(environ, start_response)
    return middleware


def _unsupported_write(data):
    raise RuntimeError('the write() callable is not supported for error '
                       'responses')


def _with_fault_body(resp):
    if faults.is_fault(resp.body):
        return resp
    message = resp.status.split(' ', 1)[-1]
    detail = _detail(resp)
    if detail:
        message = '%s: %s' % (message, detail)
    new = faults.response(resp.status_int, message)
    for name in _KEPT_HEADERS:
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
    return text.splitlines()[-1].strip()[:300]
