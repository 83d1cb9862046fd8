"""Every route of the API in one table, and the matcher pecan routes with.

A path template's ``{name}`` matches one path segment and is passed to the
handler as a keyword argument.  The OpenAPI document is built from this
table too (``cyborg.api.openapi``).
"""

import collections

from cyborg.api.controllers import root
from cyborg.api.controllers.v2 import accelerator_requests
from cyborg.api.controllers.v2 import attributes
from cyborg.api.controllers.v2 import deployables
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api.controllers.v2 import devices

from cyborg.api.schemas import accelerator_requests as arq_schema
from cyborg.api.schemas import attributes as attribute_schema
from cyborg.api.schemas import deployables as deployable_schema
from cyborg.api.schemas import device_profiles as profile_schema
from cyborg.api.schemas import devices as device_schema


class Route(collections.namedtuple(
        'Route', 'method path handler status query body')):
    """One route: its success status and the schemas of its query string
    and body (for validation they are used by the handler itself; here
    they document the route in the OpenAPI document)."""

    def __new__(cls, method, path, handler, status=200, query=None,
                body=None):
        return super().__new__(cls, method, path, handler, status, query,
                               body)


_arq = accelerator_requests
ROUTES = [
    Route('GET', '/', root.root_versions),
    Route('GET', '/v2', root.v2_version),
    Route('GET', '/v2/openapi.json', root.openapi_document),

    Route('GET', '/v2/device_profiles', device_profiles.list_device_profiles,
          query=profile_schema.LIST_QUERY),
    Route('POST', '/v2/device_profiles',
          device_profiles.create_device_profile, 201,
          body=profile_schema.CREATE),
    Route('DELETE', '/v2/device_profiles',
          device_profiles.delete_device_profiles, 204,
          query=profile_schema.DELETE_QUERY),
    Route('GET', '/v2/device_profiles/{name_or_uuid}',
          device_profiles.show_device_profile),
    Route('DELETE', '/v2/device_profiles/{name_or_uuid}',
          device_profiles.delete_device_profile, 204),

    Route('GET', '/v2/accelerator_requests', _arq.list_arqs,
          query=arq_schema.LIST_QUERY),
    Route('POST', '/v2/accelerator_requests', _arq.create_arqs, 201,
          body=arq_schema.CREATE),
    Route('PATCH', '/v2/accelerator_requests', _arq.bind_or_unbind_arqs,
          202, body=arq_schema.PATCH),
    Route('DELETE', '/v2/accelerator_requests', _arq.delete_arqs, 204,
          query=arq_schema.DELETE_QUERY),
    Route('GET', '/v2/accelerator_requests/{uuid}', _arq.show_arq),
    Route('PATCH', '/v2/accelerator_requests/{uuid}', _arq.bind_or_unbind_arq,
          202, body=arq_schema.PATCH),
    Route('DELETE', '/v2/accelerator_requests/{uuid}', _arq.delete_arq,
          204),

    Route('GET', '/v2/devices', devices.list_devices,
          query=device_schema.LIST_QUERY_2_4),
    Route('GET', '/v2/devices/{uuid}', devices.show_device),
    Route('POST', '/v2/devices/{uuid}/disable', devices.disable_device),
    Route('POST', '/v2/devices/{uuid}/enable', devices.enable_device),

    Route('GET', '/v2/deployables', deployables.list_deployables,
          query=deployable_schema.LIST_QUERY),
    Route('GET', '/v2/deployables/{uuid}', deployables.show_deployable),
    Route('PATCH', '/v2/deployables/{uuid}/program',
          deployables.program_deployable, body=deployable_schema.PROGRAM),

    Route('GET', '/v2/attributes', attributes.list_attributes,
          query=attribute_schema.LIST_QUERY),
    Route('POST', '/v2/attributes', attributes.create_attribute, 201,
          body=attribute_schema.CREATE),
    Route('GET', '/v2/attributes/{uuid}', attributes.show_attribute),
    Route('DELETE', '/v2/attributes/{uuid}', attributes.delete_attribute,
          204),
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


def template(path):
    """The template of the route(s) ``path`` matches, whatever the method
    (a 405 belongs to its route too), or None: what metrics label a
    request with, never the raw path."""
    segments = _segments(path)
    for route in ROUTES:
        if _match_path(route.path, segments) is not None:
            return route.path
    return None


def match(method, path):
    """(handler, path variables, allowed methods) for a request.

    handler is None when nothing matches; allowed methods are empty when
    the path itself is unknown (404) and not when only the method is (405).
    """
    segments = _segments(path)
    if method == 'HEAD':
        method = 'GET'      # the server sends the headers only
    allowed = []
    for route in ROUTES:
        found = _match_path(route.path, segments)
        if found is None:
            continue
        if route.method == method:
            return route.handler, found, [route.method]
        allowed.append(route.method)
    return None, {}, allowed
