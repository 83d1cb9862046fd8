"""Serving a request by its operation's declaration (``cyborg.api.routes``).

For every request the dispatcher: finds the operation of the method, path
and microversion (404, or 405 with ``Allow``); checks the declared policy
rule; validates the query string and the body against the declared
schemas of the request's microversion; calls the handler, which returns
the body to send (or None); answers with the declared status; and, with
``[api]validate_responses``, checks the body against the declared
response schema.  Handlers hold only what is particular to them.
"""

import json

from oslo_log import log as logging
from webob import exc as webob_exc

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.common import exception

LOG = logging.getLogger(__name__)
NO_CONTENT = (202, 204)


def find(request):
    """(operation, path variables) of ``request``; raises 404 or 405."""
    from cyborg.api import routes
    operation, path_vars, allowed = routes.match(
        request.method, request.path_info, request.version.as_tuple())
    if operation is None:
        if allowed:
            raise webob_exc.HTTPMethodNotAllowed(
                headers=[('Allow', ', '.join(sorted(allowed)))])
        raise webob_exc.HTTPNotFound()
    return operation, path_vars


def call(request, operation, path_vars):
    """The response of ``operation`` to ``request``."""
    r = base.ApiRequest(request)
    version = request.version.as_tuple()
    if operation.policy is not None:
        r.authorize(operation.policy)
    if operation.query is not None:
        # The last value of a repeated parameter wins.
        r.query = dict(request.GET.items())
        schemas.validate(r.query, schemas.at(operation.query, version))
    if operation.body is not None:
        r.body = _json(request)
        schemas.validate(r.body, schemas.at(operation.body, version))
    result = operation.handler(r, **path_vars)
    if operation.status in NO_CONTENT:
        return base.empty_response(operation.status)
    if request.conf.api.validate_responses:
        _check_response(operation, version, result)
    return base.json_response(operation.status, result)


def _json(request):
    try:
        return json.loads(request.body or b'null')
    except ValueError as e:
        raise exception.Invalid(reason='malformed JSON body: %s' % e)


def _check_response(operation, version, body):
    schema = schemas.at(operation.response, version)
    reason = schemas.first_error(body, schema)
    if reason is not None:
        LOG.error('%s %s at %s answered a body its declaration does not '
                  'allow: %s', operation.method, operation.path,
                  '.'.join(map(str, version)), reason)
        raise exception.CyborgException(
            message='response of %s does not match its schema: %s' % (
                operation.name, reason))
