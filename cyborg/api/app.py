"""The WSGI application: the dispatcher and its middleware, in one place."""

from oslo_middleware import cors
from oslo_middleware import healthcheck
from oslo_middleware import http_proxy_to_wsgi

from cyborg.api import auth
from cyborg.api import conductor_client
from cyborg.api import dispatch
from cyborg.api import metrics as api_metrics
from cyborg.api import microversion
from cyborg.api import wsgi_errors
from cyborg.common import metrics
from cyborg.wsgi import middleware

# The API is also mounted under this prefix (devstack serves it there).
MOUNT_PREFIX = '/accelerator'
HEALTHCHECK_PATH = '/healthcheck'
HEALTHCHECK_PATHS = (HEALTHCHECK_PATH, MOUNT_PREFIX + HEALTHCHECK_PATH)


def build_app(conf, conductor=None, metrics_of=metrics.API):
    """The full WSGI app for a parsed ConfigOpts with cyborg's options.

    ``conductor`` is the conductor RPC client; by default one is made on
    the configured transport when the first write needs it.
    ``metrics_of``: the families ``/metrics`` serves (None: all, for the
    all-in-one).
    """
    app = dispatch.Application(
        conf, conductor_client.ConductorClient(conf, conductor))
    return _wrap(app, conf, metrics_of)


def _wrap(app, conf, metrics_of):
    """Middleware, innermost first; the last one wrapped sees a request
    first.  The order matters:

    - auth sits right outside the app so only the app sees identities;
    - the mount prefix is stripped before auth, so auth's public-path check
      and the app's routing see the same path with or without it;
    - the body is read whole before auth and the app, at most
      [oslo_middleware]max_request_body_size bytes (a client gone
      mid-body is one INFO line, not an error deep in the app);
      inside fault_body, so its 413 has the error body clients parse;
    - fault_body gives auth's own errors (401) the error body;
    - request metrics wrap fault_body, so they count the status the client
      gets (auth's 401 included), and sit inside healthcheck and /metrics
      so that probes and scrapes do not count themselves;
    - healthcheck answers /healthcheck before auth (load balancers have no
      token), and /metrics likewise (Prometheus has none);
    - CORS answers preflight requests before anything else needs a token
      (only requests with an Origin header go through it: it does nothing
      to the others);
    - the version headers go on every /v2 response, whoever answers it
      (the app, auth's 401, the body limit's 413, CORS's preflight), so
      they are put on outside all of those;
    - request_id comes next so every line logged below carries the id;
    - http_proxy_to_wsgi fixes scheme and host from the proxy's headers
      before anyone builds a link (only with
      [oslo_middleware]enable_proxy_headers_parsing, as it does nothing
      otherwise);
    - each layer is plain WSGI where it can be: building request and
      response objects in every layer cost more than the rest of a small
      read;
    - the access log is outermost: it times and counts everything.
    """
    if conf.api.auth_strategy == 'keystone':
        app = auth.keystone(app, conf)
    else:
        app = auth.noauth(app)
    app = _strip_prefix(app)
    app = middleware.read_body(app, conf)
    app = wsgi_errors.fault_body(app)
    app = api_metrics.count_requests(app, MOUNT_PREFIX)
    app = _healthcheck(app, conf)
    app = api_metrics.serve_metrics(app, conf, MOUNT_PREFIX, metrics_of)
    _cors_defaults(conf)
    app = _cors(app, conf)
    app = _version_headers(app)
    app = middleware.request_id(app)
    conf.register_opts(http_proxy_to_wsgi.OPTS, group='oslo_middleware')
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    app = middleware.access_log(app, quiet=HEALTHCHECK_PATHS)
    return app


def _cors_defaults(conf):
    """Let browsers send the microversion and token headers and read the
    version headers back.  Defaults of this ConfigOpts only (the [cors]
    options of a config file still win; the global defaults and so the
    config sample stay oslo.middleware's)."""
    conf.register_opts(cors.CORS_OPTS, 'cors')
    version_headers = [microversion.HEADER, microversion.MIN_HEADER,
                       microversion.MAX_HEADER]
    defaults = {
        'allow_headers': ['Content-Type', 'X-Auth-Token', 'X-Service-Token',
                          'X-OpenStack-Request-ID', microversion.HEADER],
        'expose_headers': ['X-OpenStack-Request-ID'] + version_headers,
        'allow_methods': ['GET', 'POST', 'PATCH', 'DELETE', 'HEAD',
                          'OPTIONS'],
    }
    for name, value in defaults.items():
        conf.set_default(name, value, group='cors')


def _cors(app, conf):
    """oslo.middleware's CORS for requests that name an Origin (browsers'
    requests), straight to ``app`` for the rest."""
    cors_app = cors.CORS(app, conf)

    def middleware(environ, start_response):
        if 'HTTP_ORIGIN' in environ:
            return cors_app(environ, start_response)
        return app(environ, start_response)
    return middleware


def _healthcheck(app, conf):
    """Send ``GET`` and ``HEAD /healthcheck`` (also under the mount
    prefix) to oslo.middleware's healthcheck ([healthcheck] options);
    other methods go on to the app, which has no such route."""
    health = healthcheck.Healthcheck(None, conf)

    def middleware(environ, start_response):
        if (environ.get('PATH_INFO') in HEALTHCHECK_PATHS
                and environ.get('REQUEST_METHOD') in ('GET', 'HEAD')):
            return health(environ, start_response)
        return app(environ, start_response)
    return middleware


def _strip_prefix(app):
    """Serve ``/accelerator/...`` like ``/...``; links keep the prefix."""
    def middleware(environ, start_response):
        path = environ.get('PATH_INFO', '')
        if _mounted(path):
            environ['SCRIPT_NAME'] = (environ.get('SCRIPT_NAME', '')
                                      + MOUNT_PREFIX)
            environ['PATH_INFO'] = path[len(MOUNT_PREFIX):] or '/'
        return app(environ, start_response)
    return middleware


def _mounted(path):
    return path == MOUNT_PREFIX or path.startswith(MOUNT_PREFIX + '/')


def _version_headers(app):
    """Name the microversion in every /v2 response (doc/source/contract.rst,
    "Versions and microversions"): the version the app served, or for a
    response made before the app read it, the one the request asked for
    (``microversion.answered_at``).  Plain WSGI; other paths pass
    untouched."""
    def middleware(environ, start_response):
        path = environ.get('PATH_INFO', '')
        if _mounted(path):
            path = path[len(MOUNT_PREFIX):]
        if not dispatch.is_v2(path):
            return app(environ, start_response)

        def adding_start_response(status, headers, exc_info=None):
            return start_response(status, microversion.with_response_headers(
                headers, microversion.answered_at(environ)), exc_info)
        return app(environ, adding_start_response)
    return middleware

