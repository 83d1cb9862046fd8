"""API metrics: a middleware that counts and times every request, and the
``/metrics`` endpoint that serves them.

Every request is labelled with its method and its route *template*
(``/v2/devices/{uuid}``, from ``cyborg.api.routes``), never the raw path,
so the number of label values is bounded whatever clients send; a path no
route matches is ``unmatched``.  ``cyborg_api_requests_total`` also has the
final status, as the client saw it (authentication's 401 included).

``GET /metrics`` (also ``/accelerator/metrics``) answers only when
``[metrics]enabled``, without authentication like ``/healthcheck``: expose
it only to the monitoring network.  Otherwise it is a 404 like any unknown
path.

Several worker processes (gunicorn, uWSGI, or ``cyborg-api`` with
``[api]api_workers`` > 1) each have their own registry, so one scrape would
see one worker's counts.  For them, set the environment variable
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory writable by the workers,
one per API service, before the server starts: the workers then record
into files there and ``/metrics`` reports the sum over all of them
(prometheus_client's multiprocess collector).  The files of a previous run
must go before the workers start, or their counts are added to the new
ones: ``cyborg-api`` with several workers removes them itself, before it
forks; under gunicorn or uWSGI, or ``cyborg-api`` with one worker (which
needs no such directory), empty it before each start.  The files of a
worker that is gone are folded into archives by ``cyborg-api``'s parent,
and under gunicorn by its ``child_exit`` hook
(``cyborg.api.metrics_files``).
"""

import os
import time

from cyborg.api import metrics_files
from cyborg.api import routes
from cyborg.common import metrics
from cyborg.common import timing

METRICS_PATH = '/metrics'
UNMATCHED = 'unmatched'
# Methods a label may name; anything else is 'other' (bounded labels).
METHODS = frozenset(('GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE',
                     'OPTIONS'))


def count_requests(app, prefix):
    """Wrap ``app`` to record API_REQUESTS and API_REQUEST_SECONDS; paths
    under ``prefix`` (the mount prefix) count as the same route."""

    def middleware(environ, start_response):
        method = environ.get('REQUEST_METHOD', '').upper()
        method = method if method in METHODS else 'other'
        path = environ.get('PATH_INFO', '')
        status = ['500']

        def recording_start_response(status_line, headers, *exc_info):
            status[0] = status_line.split(None, 1)[0]
            return start_response(status_line, headers, *exc_info)

        started = time.monotonic()
        with timing.measure() as timings:
            try:
                return app(environ, recording_start_response)
            finally:
                # Bodies are built before they are returned (webob), so
                # this is the time of the whole request.
                elapsed = time.monotonic() - started
                # The dispatcher's match, else (refused by auth, unknown,
                # a method the path does not take) the path's template.
                route = (environ.get(routes.MATCHED)
                         or _route(path, prefix))
                metrics.API_REQUEST_SECONDS.labels(method, route).observe(
                    elapsed)
                metrics.API_REQUESTS.labels(method, route, status[0]).inc()
                _record_phases(method, route, timings)
    return middleware


def _record_phases(method, route, timings):
    for phase, seconds in timings.seconds.items():
        metrics.API_PHASE_SECONDS.labels(method, route, phase).observe(
            seconds)
    if timings.statements:
        metrics.API_DB_STATEMENTS.labels(method, route).inc(
            timings.statements)


def _route(path, prefix):
    if path == prefix or path.startswith(prefix + '/'):
        path = path[len(prefix):] or '/'
    return routes.template(path) or UNMATCHED


def serve_metrics(app, conf, prefix, only=metrics.API):
    """Wrap ``app`` to answer ``GET /metrics`` (and under ``prefix``) with
    the registry (the families of ``only``, or all) when
    ``[metrics]enabled``; everything else goes to ``app``."""
    paths = (METRICS_PATH, prefix + METRICS_PATH)

    def middleware(environ, start_response):
        if (conf.metrics.enabled and environ.get('PATH_INFO') in paths
                and environ.get('REQUEST_METHOD') in ('GET', 'HEAD')):
            content_type, body = render(only)
            start_response('200 OK', [('Content-Type', content_type),
                                      ('Content-Length', str(len(body)))])
            return [body if environ['REQUEST_METHOD'] == 'GET' else b'']
        return app(environ, start_response)
    return middleware


def render(only=metrics.API):
    """(content type, body): this process's registry, or the sum over
    every worker's files when PROMETHEUS_MULTIPROC_DIR is set; the
    families of ``only`` (None: all), read while no dead worker's files
    are being folded into the archives (``metrics_files.reading``)."""
    path = os.environ.get(metrics_files.MULTIPROC_ENV)
    if not path:
        return metrics.render(only)
    import prometheus_client as prom
    from prometheus_client import multiprocess
    registry = prom.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path)
    with metrics_files.reading(path):
        return metrics.render(only, registry)
