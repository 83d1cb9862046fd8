"""The error body of every error the API answers (doc/source/contract.rst,
"Errors").

``{"error_message": "<JSON of {faultcode, faultstring, debuginfo}>"}``:
clients (python-cyborgclient, openstacksdk, Nova) parse exactly this.
"""

import json

import webob

from cyborg.common import exception


def body(status, message):
    """The JSON text of an error response with ``status`` and ``message``."""
    fault = {'faultcode': 'Client' if status < 500 else 'Server',
             'faultstring': message,
             'debuginfo': None}
    return json.dumps({'error_message': json.dumps(fault)})


def is_fault(text):
    """True when ``text`` is already an error body of our format."""
    try:
        return 'error_message' in json.loads(text)
    except (ValueError, TypeError):
        return False


def response(status, message, headers=None):
    resp = webob.Response(status=status, content_type='application/json',
                          charset='utf-8')
    for name, value in headers or ():
        resp.headers[name] = value
    resp.text = body(status, message)
    return resp


def from_exception(exc):
    """The response for a CyborgException (its code and message)."""
    return response(exc.code, str(exc))


def as_cyborg_exception(exc):
    """``exc`` as a CyborgException when it is one, or was one remotely.

    Exceptions raised by the conductor come back over RPC as
    ``oslo_messaging.RemoteError`` carrying the class name and message.
    """
    if isinstance(exc, exception.CyborgException):
        return exc
    exc_type = getattr(exc, 'exc_type', None)
    cls = getattr(exception, exc_type or '', None)
    if (isinstance(cls, type) and issubclass(cls, exception.CyborgException)
            and getattr(exc, 'value', None) is not None):
        return cls(message=exc.value)
    return None
