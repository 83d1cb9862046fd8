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
    ``oslo_messaging.RemoteError`` carrying the class name, the message
    and the traceback.  A class this API does not know (a newer
    conductor's, during a rolling upgrade) is rebuilt as the nearest one
    it knows of those the traceback's note names, with the status the
    conductor noted (``exception.remote_status``): not a 500 as if the
    conductor had failed.
    """
    if isinstance(exc, exception.CyborgException):
        return exc
    value = getattr(exc, 'value', None)
    if value is None:
        return None
    exc_type = getattr(exc, 'exc_type', None)
    noted = exception.remote_status(exc_type,
                                    getattr(exc, 'traceback', None))
    code, names = noted or (None, [exc_type])
    for name in names:
        cls = getattr(exception, name or '', None)
        if (isinstance(cls, type)
                and issubclass(cls, exception.CyborgException)):
            rebuilt = cls(message=value)
            if code is not None:
                rebuilt.code = code
            return rebuilt
    return None
