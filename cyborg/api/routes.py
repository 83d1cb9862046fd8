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

Route = collections.namedtuple('Route', 'method path handler')

_arq = accelerator_requests
ROUTES = [
    Route('GET', '/', root.root_versions),
    Route('GET', '/v2', root.v2_version),
    Route('GET', '/v2/openapi.json', root.openapi_document),

    Route('GET', '/v2/device_profiles', device_profiles.list_device_profiles),
    Route('POST', '/v2/device_profiles',
          device_profiles.create_device_profile),
    Route('DELETE', '/v2/device_profiles',
          device_profiles.delete_device_profiles),
    Route('GET', '/v2/device_profiles/{name_or_uuid}',
          device_profiles.show_device_profile),
    Route('DELETE', '/v2/device_profiles/{name_or_uuid}',
          device_profiles.delete_device_profile),

    Route('GET', '/v2/accelerator_requests', _arq.list_arqs),
    Route('POST', '/v2/accelerator_requests', _arq.create_arqs),
    Route('PATCH', '/v2/accelerator_requests', _arq.bind_or_unbind_arqs),
    Route('DELETE', '/v2/accelerator_requests', _arq.delete_arqs),
    Route('GET', '/v2/accelerator_requests/{uuid}', _arq.show_arq),
    Route('DELETE', '/v2/accelerator_requests/{uuid}', _arq.delete_arq),

    Route('GET', '/v2/devices', devices.list_devices),
    Route('GET', '/v2/devices/{uuid}', devices.show_device),
    Route('POST', '/v2/devices/{uuid}/disable', devices.disable_device),
    Route('POST', '/v2/devices/{uuid}/enable', devices.enable_device),

    Route('GET', '/v2/deployables', deployables.list_deployables),
    Route('GET', '/v2/deployables/{uuid}', deployables.show_deployable),
    Route('PATCH', '/v2/deployables/{uuid}/program',
          deployables.program_deployable),

    Route('GET', '/v2/attributes', attributes.list_attributes),
    Route('POST', '/v2/attributes', attributes.create_attribute),
    Route('GET', '/v2/attributes/{uuid}', attributes.show_attribute),
    Route('DELETE', '/v2/attributes/{uuid}', attributes.delete_attribute),
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
