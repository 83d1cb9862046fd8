"""Every route of the API in one table, and the matcher pecan routes with.

A path template's ``{name}`` matches one path segment and is passed to the
handler as a keyword argument.  The OpenAPI document is built from this
table too (``cyborg.api.openapi``).
"""

import collections

from cyborg.api.controllers import root
Route = collections.namedtuple('Route', 'method path handler')

ROUTES = [
    Route('GET', '/', root.root_versions),
    Route('GET', '/v2', root.v2_version),
    Route('GET', '/v2/openapi.json', root.openapi_document),

]


def _segments(path):
    return [s for s in path.split('/') if s]


def _match_path(template, segments):
    wanted = _segments(template)
    if len(wanted) != len(segments):
        return None
    found = {}
    for want, got in zip(wanted, segments):
        if want.startswith('{'):
            found[want[1:-1]] = got
        elif want != got:
            return None
    return found


def match(method, path):
    """(handler, path variables, allowed methods) for a request.

    handler is None when nothing matches; allowed methods are empty when
    the path itself is unknown (404) and not when only the method is (405).
    """
    segments = _segments(path)
    allowed = []
    for route in ROUTES:
        found = _match_path(route.path, segments)
        if found is None:
            continue
        if route.method == method:
            return route.handler, found, [route.method]
        allowed.append(route.method)
    return None, {}, allowed
