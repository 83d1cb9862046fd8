"""What every handler uses: the request, JSON in and out, links, policy.

A handler is ``verb_noun(r, **path_vars)`` and does four things: check
policy, validate input against a schema, read through ``cyborg.objects`` or
write through the conductor RPC API, and shape the response with a view.
"""

import json

import jsonschema
import webob

from cyborg.api import schemas
from cyborg.common import exception
from cyborg.common import policy


class ApiRequest:
    """A request as handlers see it."""

    def __init__(self, req):
        self.req = req
        self.context = req.cyborg_context
        self.version = req.version
        self.conf = req.conf
        self.conductor = req.conductor
        # Once per request: lists build two links per item.
        base = self.conf.api.public_endpoint
        if not base:
            base = req.host_url + req.script_name
        self.base_url = base.rstrip('/')

    @property
    def params(self):
        return self.req.GET

    def url(self, *parts):
        """An absolute link: [api]public_endpoint or the request's URL."""
        return '/'.join([self.base_url] + [p.strip('/') for p in parts])

    def authorize(self, rule, target=None):
        """Raise 403 unless policy allows ``rule`` on ``target``."""
        policy.authorize(self.conf, self.context, rule, target)

    def json_body(self, schema):
        """The request body parsed as JSON and validated against ``schema``."""
        try:
            data = json.loads(self.req.body or b'null')
        except ValueError as e:
            raise exception.Invalid(reason='malformed JSON body: %s' % e)
        validate(data, schema)
        return data

    def query(self, schema):
        """The query string as a {name: last value} dict, validated."""
        values = {k: v for k, v in self.req.GET.items()}
        validate(values, schema)
        return values


def validate(data, schema):
    """Raise 400 naming the field when ``data`` does not match ``schema``."""
    try:
        schemas.validator(schema).validate(data)
    except jsonschema.ValidationError as e:
        raise exception.Invalid(reason=_explain(e))


def _explain(error):
    where = '/'.join(str(p) for p in error.absolute_path)
    message = error.message
    if len(message) > 300:
        message = message[:300] + '...'
    if where:
        return '%s: %s' % (where, message)
    return message


def require(obj, resource, id):
    """``obj``, or 404 for the ``resource`` named ``id`` when it is None."""
    if obj is None:
        raise exception.ResourceNotFound(resource=resource, id=id)
    return obj


def json_response(status, body=None):
    resp = webob.Response(status=status, content_type='application/json',
                          charset='utf-8')
    if body is not None:
        resp.text = json.dumps(body)
    else:
        resp.content_type = None
        resp.body = b''
    return resp


def empty_response(status):
    return json_response(status, None)


def split_csv(value):
    """'a,b' -> ['a', 'b'] (empty items dropped)."""
    return [v.strip() for v in (value or '').split(',') if v.strip()]
