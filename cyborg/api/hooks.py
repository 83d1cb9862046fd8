"""Pecan hooks: per-request context and version, errors, version headers."""

from oslo_db import exception as db_exc
from oslo_log import log as logging
import oslo_messaging as messaging
from pecan import hooks

from cyborg.api import auth
from cyborg.api import faults
from cyborg.api import microversion
from cyborg.common import context as cyborg_context
from cyborg.common import exception

LOG = logging.getLogger(__name__)

V2_PREFIX = '/v2'


def _is_v2(path):
    return path == V2_PREFIX or path.startswith(V2_PREFIX + '/')


class RequestStateHook(hooks.PecanHook):
    """Attach the RequestContext and the microversion to the request.

    The version is parsed before routing so that even an unknown /v2 path
    answers 406 for a bad version, as Cyborg does.
    """

    priority = 10

    def __init__(self, conf, conductor):
        self.conf = conf
        self.conductor = conductor

    def on_route(self, state):
        req = state.request
        req.conf = self.conf
        req.conductor = self.conductor
        req.version = microversion.MIN_VERSION
        if _is_v2(req.path_info):
            req.version = microversion.from_headers(req.headers)
        req.cyborg_context = _context(req.environ)


# Project ids are opaque, but stored in 255 characters.
MAX_PROJECT_ID = 255


def _context(environ):
    ctx = cyborg_context.RequestContext.from_environ(
        environ, is_service=environ.get(auth.IS_SERVICE, False))
    ctx.is_admin = 'admin' in (r.lower() for r in ctx.roles)
    if ctx.project_id and len(ctx.project_id) > MAX_PROJECT_ID:
        raise exception.Invalid(reason='project id longer than %d '
                                       'characters' % MAX_PROJECT_ID)
    return ctx


class ErrorHook(hooks.PecanHook):
    """Every exception becomes the error body (doc/source/contract.rst,
    "Errors")."""

    priority = 20

    def on_error(self, state, exc):
        status = getattr(exc, 'status_int', None)
        if status is not None and hasattr(exc, 'title'):
            # webob HTTP exceptions raised by pecan's routing (404, 405).
            allow = getattr(exc, 'headers', {}).get('Allow')
            return faults.response(status, exc.title,
                                   [('Allow', allow)] if allow else None)
        known = faults.as_cyborg_exception(exc)
        if known is not None:
            if known.code >= 500:
                LOG.warning('Request failed: %s', known)
            return faults.from_exception(known)
        if isinstance(exc, messaging.MessagingTimeout):
            return faults.from_exception(exception.ServiceUnavailable(
                reason='the conductor did not answer in time'))
        if isinstance(exc, messaging.MessagingException):
            return faults.from_exception(exception.ServiceUnavailable(
                reason='the conductor cannot be reached'))
        if _is_db_outage(exc):
            return faults.from_exception(exception.ServiceUnavailable(
                reason='the database is unreachable'))
        LOG.exception('Unexpected error serving %s %s',
                      state.request.method, state.request.path)
        return faults.response(500, 'Internal server error.')


def _is_db_outage(exc):
    return isinstance(exc, (db_exc.DBConnectionError,
                            db_exc.CantStartEngineError))


class VersionHeadersHook(hooks.PecanHook):
    """Every /v2 response names its microversion (even errors)."""

    priority = 30

    def after(self, state):
        req = state.request
        resp = state.response
        if resp.status_int >= 400 and not resp.content_type:
            # pecan drops the type of responses returned by on_error hooks.
            resp.content_type = 'application/json'
        if not _is_v2(req.path_info):
            return
        version = getattr(req, 'version', None) or microversion.MIN_VERSION
        for name, value in microversion.response_headers(version):
            state.response.headers[name] = value
