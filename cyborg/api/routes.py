"""Every operation of the API, each declared once, and the matcher that
finds the operation of a request.

An operation's declaration is all there is to know about it: method and
path, handler, policy rule (a constant of ``cyborg.policies``), the schemas
of its query string, body and success response (``Versioned`` where they
change with the microversion), its success status, the microversions it
exists in and the error statuses it may answer.  The dispatcher
(``cyborg.api.dispatch``) enforces it, the OpenAPI document
(``cyborg.api.openapi``) and the policy reference (``cyborg.policies``) are
generated from it.

A path template's ``{name}`` matches one path segment and is passed to the
handler as a keyword argument.
"""

import dataclasses

from cyborg.api import microversion
from cyborg.api.controllers import root
from cyborg.api.controllers.v2 import accelerator_requests as arqs
from cyborg.api.controllers.v2 import attributes
from cyborg.api.controllers.v2 import deployables
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api.controllers.v2 import devices
from cyborg.api.controllers.v2 import exports
from cyborg.api.controllers.v2 import quotas
from cyborg.api.controllers.v2 import remote_pools
from cyborg.api.schemas import accelerator_requests as arq_schema
from cyborg.api.schemas import attributes as attribute_schema
from cyborg.api.schemas import deployables as deployable_schema
from cyborg.api.schemas import device_profiles as profile_schema
from cyborg.api.schemas import devices as device_schema
from cyborg.api.schemas import exports as export_schema
from cyborg.api.schemas import quotas as quota_schema
from cyborg.api.schemas import remote_pools as pool_schema
from cyborg.api.schemas import versions as version_schema
from cyborg.policies import accelerator_requests as arq_policy
from cyborg.policies import attributes as attribute_policy
from cyborg.policies import deployables as deployable_policy
from cyborg.policies import device_profiles as profile_policy
from cyborg.policies import devices as device_policy
from cyborg.policies import exports as export_policy
from cyborg.policies import quotas as quota_policy
from cyborg.policies import remote_pools as pool_policy

# Errors any /v2 operation may answer: a malformed microversion or body,
# no valid token, refused by policy, a missing resource, an unsupported
# microversion, and a backing service (database, conductor) unreachable.
ERRORS = (400, 401, 403, 404, 406, 503)
# ...and those that write may conflict with the state of things.
WRITE_ERRORS = ERRORS + (409,)


@dataclasses.dataclass(frozen=True)
class Operation:
    method: str
    path: str
    handler: object
    # The policy rule checked (with the caller's project as target) before
    # anything else; None only for the public version documents.
    policy: str | None
    response: object = None          # schema of the success body
    status: int = 200
    query: object = None             # schema of the query string
    body: object = None              # schema of the request body
    min_version: tuple = (2, 0)
    max_version: tuple | None = None
    errors: tuple = ERRORS
    # The media types of the success body: JSON (checked against
    # ``response``) unless the handler returns a ``base.Text`` of another.
    media_types: tuple = ('application/json',)
    # The path variable holding the project the policy rule is checked
    # against; None for the caller's own project.
    policy_project: str | None = None

    @property
    def name(self):
        """The operationId: the handler's name."""
        return self.handler.__name__

    def available_at(self, version):
        """True when the operation exists at ``version`` (a tuple)."""
        version = tuple(version)
        if version < tuple(self.min_version):
            return False
        return self.max_version is None or version <= tuple(
            self.max_version)


_ARQS = '/v2/accelerator_requests'
_PROFILES = '/v2/device_profiles'
_POOLS = '/v2/remote_pools'

OPERATIONS = [
    Operation('GET', '/', root.root_versions, None,
              response=version_schema.ROOT, errors=()),
    Operation('GET', '/v2', root.v2_version, None,
              response=version_schema.V2, errors=(400, 406)),
    Operation('GET', '/v2/openapi.json', root.openapi_document, None,
              response={'type': 'object'}, errors=(400, 406)),

    Operation('GET', _PROFILES, device_profiles.list_device_profiles,
              profile_policy.GET_ALL, profile_schema.PROFILE_LIST,
              query=profile_schema.LIST_QUERY),
    Operation('POST', _PROFILES, device_profiles.create_device_profile,
              profile_policy.CREATE, profile_schema.PROFILE, 201,
              body=profile_schema.CREATE, errors=WRITE_ERRORS),
    Operation('DELETE', _PROFILES, device_profiles.delete_device_profiles,
              profile_policy.DELETE, status=204,
              query=profile_schema.DELETE_QUERY, errors=WRITE_ERRORS),
    Operation('GET', _PROFILES + '/{name_or_uuid}',
              device_profiles.show_device_profile, profile_policy.GET_ONE,
              profile_schema.PROFILE_WRAPPED),
    Operation('DELETE', _PROFILES + '/{name_or_uuid}',
              device_profiles.delete_device_profile, profile_policy.DELETE,
              status=204, errors=WRITE_ERRORS),

    Operation('GET', _ARQS, arqs.list_arqs, arq_policy.GET_ALL,
              arq_schema.ARQ_LIST, query=arq_schema.LIST_QUERY,
              errors=ERRORS + (423,)),
    Operation('POST', _ARQS, arqs.create_arqs, arq_policy.CREATE,
              arq_schema.CREATED_ARQS, 201, body=arq_schema.CREATE,
              errors=WRITE_ERRORS),
    Operation('PATCH', _ARQS, arqs.bind_or_unbind_arqs, arq_policy.UPDATE,
              status=202, body=arq_schema.PATCH, errors=WRITE_ERRORS),
    Operation('DELETE', _ARQS, arqs.delete_arqs, arq_policy.DELETE,
              status=204, query=arq_schema.DELETE_QUERY,
              errors=WRITE_ERRORS),
    Operation('GET', _ARQS + '/{uuid}', arqs.show_arq, arq_policy.GET_ONE,
              arq_schema.ARQ),
    Operation('PATCH', _ARQS + '/{uuid}', arqs.bind_or_unbind_arq,
              arq_policy.UPDATE, status=202, body=arq_schema.PATCH,
              errors=WRITE_ERRORS),
    Operation('DELETE', _ARQS + '/{uuid}', arqs.delete_arq,
              arq_policy.DELETE, status=204, errors=WRITE_ERRORS),
    Operation('POST', _ARQS + '/{uuid}/allocate', arqs.allocate_arq,
              arq_policy.ALLOCATE, arq_schema.ARQ, body=arq_schema.ALLOCATE,
              min_version=microversion.STANDALONE, errors=WRITE_ERRORS),

    Operation('GET', '/v2/devices', devices.list_devices,
              device_policy.GET_ALL, device_schema.DEVICE_LIST,
              query=device_schema.LIST_QUERY),
    Operation('GET', '/v2/devices/{uuid}', devices.show_device,
              device_policy.GET_ONE, device_schema.DEVICE),
    Operation('POST', '/v2/devices/{uuid}/disable', devices.disable_device,
              device_policy.DISABLE, device_schema.DEVICE,
              errors=WRITE_ERRORS),
    Operation('POST', '/v2/devices/{uuid}/enable', devices.enable_device,
              device_policy.ENABLE, device_schema.DEVICE,
              errors=WRITE_ERRORS),

    Operation('GET', '/v2/deployables', deployables.list_deployables,
              deployable_policy.GET_ALL, deployable_schema.DEPLOYABLE_LIST,
              query=deployable_schema.LIST_QUERY),
    Operation('GET', '/v2/deployables/{uuid}', deployables.show_deployable,
              deployable_policy.GET_ONE, deployable_schema.DEPLOYABLE),
    Operation('PATCH', '/v2/deployables/{uuid}/program',
              deployables.program_deployable, deployable_policy.PROGRAM,
              deployable_schema.DEPLOYABLE, body=deployable_schema.PROGRAM,
              errors=WRITE_ERRORS),

    Operation('GET', '/v2/attributes', attributes.list_attributes,
              attribute_policy.GET_ALL, attribute_schema.ATTRIBUTE_LIST,
              query=attribute_schema.LIST_QUERY),
    Operation('POST', '/v2/attributes', attributes.create_attribute,
              attribute_policy.CREATE, attribute_schema.ATTRIBUTE, 201,
              body=attribute_schema.CREATE, errors=WRITE_ERRORS),
    Operation('GET', '/v2/attributes/{uuid}', attributes.show_attribute,
              attribute_policy.GET_ONE, attribute_schema.ATTRIBUTE),
    Operation('DELETE', '/v2/attributes/{uuid}', attributes.delete_attribute,
              attribute_policy.DELETE, status=204, errors=WRITE_ERRORS),

    Operation('GET', _POOLS, remote_pools.list_remote_pools,
              pool_policy.GET_ALL, pool_schema.POOL_LIST,
              query=pool_schema.LIST_QUERY,
              min_version=microversion.REMOTE_POOLS),
    Operation('POST', _POOLS, remote_pools.create_remote_pool,
              pool_policy.CREATE, pool_schema.POOL, 201,
              body=pool_schema.CREATE, min_version=microversion.REMOTE_POOLS,
              errors=WRITE_ERRORS),
    Operation('GET', _POOLS + '/{name_or_uuid}',
              remote_pools.show_remote_pool, pool_policy.GET_ONE,
              pool_schema.POOL, min_version=microversion.REMOTE_POOLS),
    Operation('DELETE', _POOLS + '/{name_or_uuid}',
              remote_pools.delete_remote_pool, pool_policy.DELETE,
              status=204, min_version=microversion.REMOTE_POOLS,
              errors=WRITE_ERRORS),

    Operation('GET', '/v2/exports/resourceslices',
              exports.export_resource_slices,
              export_policy.RESOURCE_SLICES, export_schema.SLICE_LIST,
              query=export_schema.SLICES_QUERY,
              min_version=microversion.EXPORTS,
              media_types=('application/json', 'application/yaml')),
    Operation('GET', '/v2/exports/gres.conf', exports.export_gres_conf,
              export_policy.GRES_CONF, export_schema.GRES_CONF,
              query=export_schema.GRES_QUERY,
              min_version=microversion.EXPORTS,
              media_types=('text/plain',)),
    Operation('GET', '/v2/quotas', quotas.show_own_quota, quota_policy.GET,
              quota_schema.QUOTA, min_version=microversion.QUOTAS),
    Operation('GET', '/v2/quotas/{project_id}', quotas.show_quota,
              quota_policy.GET, quota_schema.QUOTA,
              min_version=microversion.QUOTAS,
              policy_project='project_id'),
]


def _segments(path):
    return [s for s in path.split('/') if s]


def _match_path(wanted, segments):
    """{variable: value} when ``segments`` fit a template's ``wanted``
    segments (of the same number), else None."""
    found = {}
    for want, got in zip(wanted, segments):
        if want.startswith('{'):
            found[want[1:-1]] = got
        elif want != got:
            return None
    return found


def _by_length():
    # The operations, in their order, with their templates' segments, by
    # the number of segments: a request is matched against those of its
    # own length only (a fifth of them), split once per process.
    found = {}
    for operation in OPERATIONS:
        wanted = tuple(_segments(operation.path))
        found.setdefault(len(wanted), []).append((operation, wanted))
    return found


_BY_LENGTH = _by_length()

# Where the dispatcher leaves the template of the operation it found, in
# the request's environ: the metrics' label for the request, without
# matching its path a second time (``template`` labels the others).
MATCHED = 'cyborg.route'


def template(path):
    """The template of the operation(s) ``path`` matches, whatever the
    method (a 405 belongs to its path too), or None: what metrics label a
    request with, never the raw path."""
    segments = _segments(path)
    for operation, wanted in _BY_LENGTH.get(len(segments), ()):
        if _match_path(wanted, segments) is not None:
            return operation.path
    return None


def match(method, path, version=None):
    """(operation, path variables, allowed methods) for a request.

    operation is None when nothing matches; allowed methods are empty when
    the path itself is unknown (404) and not when only the method is
    (405).  With ``version`` (a tuple), operations that do not exist at
    that microversion do not match: their path is unknown (404) there.
    """
    segments = _segments(path)
    if method == 'HEAD':
        method = 'GET'      # the server sends the headers only
    allowed = []
    for operation, wanted in _BY_LENGTH.get(len(segments), ()):
        if version is not None and not operation.available_at(version):
            continue
        found = _match_path(wanted, segments)
        if found is None:
            continue
        if operation.method == method:
            return operation, found, [operation.method]
        allowed.append(operation.method)
    return None, {}, allowed
