"""The API application: each request served by its operation's
declaration (``cyborg.api.routes``).

For every request the dispatcher: parses the microversion (so that even an
unknown /v2 path answers 406 for a bad one, as Cyborg does) and the
caller's identity; finds the operation of the method, path and
microversion (404, or 405 with ``Allow``); checks the declared policy
rule; validates the query string and the body against the declared
schemas of the request's microversion; calls the handler, which returns
the body to send (or None); answers with the declared status; and, with
``[api]validate_responses``, checks the body against the declared response
schema.  Any exception becomes the error body (doc/source/contract.rst,
"Errors"); the version served is left in the environ
(``microversion.SERVED``) for the middleware that names it in every /v2
response (``cyborg.api.app``).  Handlers hold only what is particular to
them.
"""

import codecs
import json

from oslo_log import log as logging
import oslo_messaging as messaging
import webob
from webob import exc as webob_exc

from cyborg.api import auth
from cyborg.api import faults
from cyborg.api import microversion
from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import policy
from cyborg.common import timing

LOG = logging.getLogger(__name__)

NO_CONTENT = (202, 204)
V2_PREFIX = '/v2'
# Project ids are opaque, but stored in 255 characters.
MAX_PROJECT_ID = 255
# No body of the API nests deeper than a handful of levels; a deeper one
# is refused before anything walks it recursively.
MAX_DEPTH = 32
_UTF8 = codecs.lookup('utf-8').name
# The media types a request body is read as JSON from (besides any
# application/...+json, such as application/json-patch+json): JSON, and
# the two JavaScript types Cyborg also read as JSON.  Any other type is
# a 415 (as in Cyborg and Placement), text/plain included.
JSON_MEDIA_TYPES = ('application/json', 'text/javascript',
                    'application/javascript')


class Application:
    """The WSGI app inside the middleware (``cyborg.api.app``)."""

    def __init__(self, conf, conductor):
        self.conf = conf
        self.conductor = conductor

    def __call__(self, environ, start_response):
        # Plain WSGI around a webob request: webob.dec.wsgify would also
        # make a response object per request that no handler uses.
        return self._respond(webob.Request(environ))(environ,
                                                      start_response)

    def _respond(self, req):
        """The response to ``req`` (a webob request)."""
        req.conf = self.conf
        req.conductor = self.conductor
        req.version = microversion.MIN_VERSION
        try:
            req.path_info       # noqa: B018 - decoded once, or a 400
        except UnicodeDecodeError:
            return faults.from_exception(exception.Invalid(
                reason='the path is not valid UTF-8'))
        try:
            if is_v2(req.path_info):
                req.version = microversion.from_headers(req.headers)
                req.environ[microversion.SERVED] = req.version
            req.cyborg_context = _context(req.environ)
            resp = call(req, *find(req))
        except Exception as exc:  # noqa: BLE001 - every error has a body
            resp = error_response(req, exc)
        if req.method == 'HEAD':
            resp.body = b''
        return resp


def is_v2(path):
    return path == V2_PREFIX or path.startswith(V2_PREFIX + '/')


def _context(environ):
    ctx = cyborg_context.RequestContext.from_environ(
        environ, is_service=environ.get(auth.IS_SERVICE, False))
    if ctx.project_id and len(ctx.project_id) > MAX_PROJECT_ID:
        raise exception.Invalid(reason='project id longer than %d '
                                       'characters' % MAX_PROJECT_ID)
    return ctx


def _decide_rights(conf, ctx):
    """Set ``ctx.is_admin`` and ``ctx.sees_every_project`` as the policy's
    ``admin`` and ``service`` rules decide (``policy.base_rights``),
    once per request; every ownership check of the handlers and the
    conductor reads these two.  A service token (``auth.IS_SERVICE``)
    counts as the ``service`` rule says, as any role does: the default
    rule passes it (``is_service:True``), so Nova reads and deletes the
    ARQs of the instances it builds whichever project the user's token
    names.  Before any rule is checked both are False (``is_admin``,
    oslo.context's default) or the token's alone."""
    admin, service = policy.base_rights(conf, ctx)
    ctx.is_admin = admin
    ctx.sees_every_project = admin or service


def find(request):
    """(operation, path variables) of ``request``; raises 404 or 405.
    The operation's template is left in the environ
    (``routes.MATCHED``): the request's label in the metrics."""
    from cyborg.api import routes
    version = request.version.as_tuple()
    operation, path_vars, allowed = routes.match(
        request.method, request.path_info, version)
    if operation is None:
        if allowed:
            raise webob_exc.HTTPMethodNotAllowed(
                headers=[('Allow', ', '.join(sorted(allowed)))])
        later, _vars, _allowed = routes.match(request.method,
                                              request.path_info)
        if later is not None and version < tuple(later.min_version):
            # There, but not at this microversion: say which it needs.
            raise exception.NotFound(
                '%s %s needs microversion %d.%d or later (this request '
                'asked for %s; send "OpenStack-API-Version: accelerator '
                '%d.%d")' % (later.method, later.path,
                             *later.min_version, request.version,
                             *later.min_version))
        raise webob_exc.HTTPNotFound()
    request.environ[routes.MATCHED] = operation.path
    return operation, path_vars


def call(request, operation, path_vars):
    """The response of ``operation`` to ``request``."""
    r = base.ApiRequest(request)
    version = request.version.as_tuple()
    if operation.policy is not None:
        target = None
        if operation.policy_project is not None:
            target = {'project_id': path_vars[operation.policy_project]}
        with timing.phase(timing.POLICY):
            _decide_rights(request.conf, r.context)
            r.authorize(operation.policy, target)
    with timing.phase(timing.VALIDATE):
        if operation.query is not None:
            r.query = _query(request)
            _check_query_names(operation, version, r.query)
            schemas.validate(r.query, operation.query, version)
        if operation.body is not None:
            r.body = json_body(request)
            schemas.validate(r.body, operation.body, version)
    with timing.phase(timing.HANDLER):
        result = operation.handler(r, **_canonical_uuids(path_vars))
    if operation.status in NO_CONTENT:
        return base.empty_response(operation.status)
    with timing.phase(timing.RENDER):
        if isinstance(result, base.Text):
            # A document in another format (text/plain, YAML): its content
            # is checked by its own tests, not by a JSON schema.
            if result.content_type not in operation.media_types:
                raise exception.CyborgException(
                    message='%s answered %s, which it does not declare' % (
                        operation.name, result.content_type))
            return base.text_response(operation.status, result)
        if request.conf.api.validate_responses:
            _check_response(operation, version, result)
        return base.json_response(operation.status, result)


# Path variables that name a resource by uuid.
_UUID_VARS = ('uuid', 'name_or_uuid')


def _canonical_uuids(path_vars):
    """The path variables with each uuid in the form we store
    (``base.canonical_uuid``)."""
    for name in _UUID_VARS:
        if path_vars.get(name) is not None:
            path_vars = dict(path_vars,
                             **{name: base.canonical_uuid(path_vars[name])})
    return path_vars


def _query(request):
    """{name: value} of the request's query string.  A parameter given
    twice is a 400: keeping one of its values would silently drop the
    other (``DELETE /accelerator_requests?arqs=A&arqs=B`` deleting B
    alone); several values go in one, separated by commas."""
    try:
        pairs = list(request.GET.items())
    except UnicodeDecodeError:
        raise exception.Invalid(
            reason='the query string is not valid UTF-8') from None
    found = dict(pairs)
    if len(found) != len(pairs):
        seen = set()
        for name, _value in pairs:
            if name in seen:
                raise exception.Invalid(reason=(
                    '%s: given twice; give a query parameter once (where '
                    'it takes several values, separate them with commas '
                    'in that one)' % name)[:schemas.MAX_REASON])
            seen.add(name)
    return found


def _check_query_names(operation, version, query):
    """400 naming any parameter the operation does not take at
    ``version``, rather than ignoring it."""
    known = schemas.at(operation.query, version).get('properties', {})
    unknown = sorted(set(query) - set(known))
    if not unknown:
        return
    later = {}
    for since, variant in schemas.variants(operation.query):
        for name in variant.get('properties', {}):
            later.setdefault(name, since)
    name = unknown[0]
    if name in later:
        reason = '%s: needs microversion %d.%d or later' % (
            (name,) + later[name])
    else:
        reason = '%s: unknown query parameter; %s takes %s' % (
            name, operation.name, ', '.join(sorted(known)) or 'none')
    raise exception.Invalid(reason=reason[:schemas.MAX_REASON])


def json_body(request):
    """The request's body as JSON: sent as JSON (``check_media_type``:
    415 otherwise), UTF-8, not compressed, not nested deeper than
    MAX_DEPTH (400 with the reason otherwise)."""
    if request.body:
        check_media_type(request.content_type)
    encoding = request.headers.get('Content-Encoding', 'identity').strip()
    if encoding.lower() not in ('', 'identity'):
        raise exception.Invalid(
            reason='Content-Encoding %s is not supported: send the JSON '
                   'body uncompressed' % encoding[:40])
    charset = request.content_type and request.charset
    if charset and _codec_name(charset) != _UTF8:
        raise exception.Invalid(
            reason='charset %s is not supported: send UTF-8' % charset[:40])
    try:
        text = request.body.decode('utf-8')
    except UnicodeDecodeError as e:
        raise exception.Invalid(reason='the body is not valid UTF-8: %s'
                                       % e)
    try:
        data = json.loads(text or 'null', object_pairs_hook=_object)
    except RecursionError:
        data = _TOO_DEEP
    except ValueError as e:
        raise exception.Invalid(reason='malformed JSON body: %s' % e)
    if data is _TOO_DEEP or _depth(data) > MAX_DEPTH:
        raise exception.Invalid(reason='the body nests deeper than %d '
                                       'levels' % MAX_DEPTH)
    # Only an escape puts a NUL or a lone surrogate in a string (the
    # parser refuses a raw NUL; raw surrogates are not UTF-8): most
    # bodies are not walked for them.
    if '\\u' in text:
        check_strings('the body', _strings(data))
    return data


def check_media_type(content_type):
    """415 unless ``content_type`` (the media type, without parameters)
    is one a body is read as JSON from (``JSON_MEDIA_TYPES``, or any
    ``application/...+json``).  A body sent without a Content-Type is
    read as JSON too: every client sends the header with a body
    (keystoneauth's ``json=``, so openstacksdk, the cyborg CLI and Nova),
    and RFC 9110 lets a recipient look at a body whose type is not
    named."""
    media_type = (content_type or '').strip().lower()
    if (not media_type or media_type in JSON_MEDIA_TYPES
            or (media_type.startswith('application/')
                and media_type.endswith('+json'))):
        return
    shown = media_type if len(media_type) <= 60 else media_type[:60] + '...'
    raise exception.UnsupportedMediaType(
        reason='a body sent as %s; send it as application/json' % shown)


def check_strings(where, strings):
    """400 when one of ``strings`` holds a NUL character, which no field
    accepts (PostgreSQL cannot store one; a read that searches for one
    matches nothing instead: ``cyborg.db.api._sql.matchable``), or a lone
    UTF-16 surrogate (``\\ud800``), which is no character and no
    database stores."""
    for string in strings:
        if '\x00' in string:
            raise exception.Invalid(
                reason=f'{where} holds a NUL character (\\u0000), which no '
                       f'field accepts')
        try:
            string.encode('utf-8')
        except UnicodeEncodeError:
            raise exception.Invalid(
                reason=f'{where} holds a lone surrogate (\\ud800 to '
                       f'\\udfff not in a pair), which is not a character'
            ) from None


def _strings(data):
    """Every string in ``data`` (keys included), without recursion."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


_TOO_DEEP = object()


def _object(pairs):
    """A JSON object as a dict; 400 when it gives a key twice, rather
    than keep the last value and drop the others unseen."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen = set()
        for key, _value in pairs:
            if key in seen:
                shown = repr(key)
                if len(shown) > schemas.MAX_VALUE:
                    shown = shown[:schemas.MAX_VALUE] + '...'
                raise exception.Invalid(
                    reason='the body gives key %s twice in one object'
                           % shown)
            seen.add(key)
    return found


def _codec_name(charset):
    """Python's name of the codec ``charset`` names, or None.  A name
    with a NUL in it is a ValueError there, not a LookupError."""
    try:
        return codecs.lookup(charset).name
    except (LookupError, ValueError):
        return None


def _depth(data):
    """How deeply ``data`` nests (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(data, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            level += 1
            deepest = max(deepest, level)
            if deepest > MAX_DEPTH:
                break
            stack.extend((child, level) for child in item)
    return deepest


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


def error_response(req, exc):
    """The error response for any exception a request raised."""
    if isinstance(exc, webob_exc.HTTPException):
        # Routing's own 404 and 405.
        allow = exc.headers.get('Allow')
        return faults.response(exc.status_int, exc.title,
                               [('Allow', allow)] if allow else None)
    known = faults.as_cyborg_exception(exc)
    if known is not None:
        if known.code >= 500:
            LOG.warning('Request failed: %s', known)
        return faults.from_exception(known)
    if isinstance(exc, messaging.MessagingTimeout):
        return faults.from_exception(exception.ServiceUnavailable(
            reason='the conductor did not answer in time'))
    if isinstance(exc, messaging.RemoteError):
        # The conductor was reached and failed with an error of its own
        # (its outages come back as ServiceUnavailable, above): a bug,
        # with the conductor's traceback in its log.
        LOG.error('The conductor failed serving %s %s: %s: %s', req.method,
                  req.path, exc.exc_type, exc.value)
        return faults.response(500, 'Internal server error.')
    if isinstance(exc, messaging.MessagingException):
        return faults.from_exception(exception.ServiceUnavailable(
            reason='the conductor cannot be reached'))
    if exception.db_not_ready(exc):
        LOG.warning('Serving %s %s: %s', req.method, req.path,
                    exception.first_line(exc))
        return faults.from_exception(exception.ServiceUnavailable(
            reason=exception.DB_NOT_READY_REASON))
    if isinstance(exc, exception.DB_OUTAGES):
        return faults.from_exception(exception.ServiceUnavailable(
            reason='the database is unreachable'))
    LOG.exception('Unexpected error serving %s %s', req.method, req.path)
    return faults.response(500, 'Internal server error.')
