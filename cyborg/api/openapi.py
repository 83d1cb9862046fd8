"""The OpenAPI 3 document of the API, built from the route table and the
JSON schemas the handlers validate with (served at /v2/openapi.json and
committed as doc/api/openapi.json; a test keeps the copy current)."""

import copy
import re

from cyborg.api import microversion
from cyborg.common import states

_STRING = {'type': 'string'}
_NULLABLE_STRING = {'type': ['string', 'null']}
_TIMESTAMP = {'type': ['string', 'null'], 'format': 'date-time'}
_LINKS = {'type': 'array', 'items': {
    'type': 'object',
    'properties': {'href': _STRING, 'rel': _STRING}}}


def _object(**properties):
    return {'type': 'object', 'properties': properties,
            'required': sorted(properties)}


# What the views show (CONTRACT.md §4).
COMPONENTS = {
    'DeviceProfile': _object(
        uuid=_STRING, name=_STRING, description=_NULLABLE_STRING,
        groups={'type': 'array', 'items': {
            'type': 'object', 'additionalProperties': _STRING}},
        created_at=_TIMESTAMP, updated_at=_TIMESTAMP, links=_LINKS),
    'AcceleratorRequest': _object(
        uuid=_STRING, state=_STRING, device_profile_name=_STRING,
        device_profile_group_id={'type': 'integer'},
        hostname=_NULLABLE_STRING, device_rp_uuid=_NULLABLE_STRING,
        instance_uuid=_NULLABLE_STRING, project_id=_NULLABLE_STRING,
        attach_handle_type=_STRING, attach_handle_uuid=_NULLABLE_STRING,
        attach_handle_info={'type': 'object'},
        created_at=_TIMESTAMP, updated_at=_TIMESTAMP, links=_LINKS),
    'Device': dict(_object(
        uuid=_STRING, type=_STRING, vendor=_STRING, model=_STRING,
        std_board_info=_NULLABLE_STRING, vendor_board_info=_NULLABLE_STRING,
        hostname=_STRING, created_at=_TIMESTAMP, updated_at=_TIMESTAMP,
        links=_LINKS)),
    'Deployable': _object(
        uuid=_STRING, parent_id={'type': ['integer', 'null']},
        root_id={'type': ['integer', 'null']}, name=_STRING,
        num_accelerators={'type': 'integer'},
        device_id={'type': 'integer'}, attributes_list=_STRING,
        rp_uuid=_NULLABLE_STRING, driver_name=_NULLABLE_STRING,
        bitstream_id=_NULLABLE_STRING, created_at=_TIMESTAMP,
        updated_at=_TIMESTAMP, links=_LINKS),
    'Attribute': _object(
        uuid=_STRING, deployable_id={'type': 'integer'}, key=_STRING,
        value=_STRING, created_at=_TIMESTAMP, updated_at=_TIMESTAMP,
        links=_LINKS),
    'Error': {
        'type': 'object',
        'description': 'error_message is a JSON string of {faultcode, '
                       'faultstring, debuginfo}.',
        'properties': {'error_message': _STRING},
        'required': ['error_message']},
}
COMPONENTS['Device']['properties']['status'] = {
    'type': 'string', 'enum': ['enabled', 'maintaining'],
    'description': 'Microversion 2.3 and later.'}

_HEALTH = {'type': 'string', 'enum': list(states.HEALTH_STATES)}
_SINCE_2_4 = 'Microversion 2.4 and later.'


def _health_fields(what):
    return {
        'health': dict(_HEALTH, description='%s %s' % (what, _SINCE_2_4)),
        'health_reason': dict(_NULLABLE_STRING,
                              description='Why, in words. ' + _SINCE_2_4),
        'health_updated_at': dict(_TIMESTAMP,
                                  description='When it last changed. '
                                              + _SINCE_2_4),
    }


COMPONENTS['Device']['properties'].update(
    _health_fields('The device\'s health.'))
COMPONENTS['Deployable']['properties'].update(_health_fields(
    'The effective health: the worse of its own and its device\'s (the '
    'reason and time are those of the worse).'))
COMPONENTS['AcceleratorRequest']['properties'].update({
    'device_health': dict(
        _HEALTH, type=['string', 'null'], enum=_HEALTH['enum'] + [None],
        description='The effective health of the deployable the request '
                    'is bound to; null while unbound. ' + _SINCE_2_4),
    'device_health_reason': dict(
        _NULLABLE_STRING, description='Why, in words. ' + _SINCE_2_4),
})


def _ref(name):
    return {'$ref': '#/components/schemas/%s' % name}


def _list_of(key, name):
    return {'type': 'object', 'properties': {
        key: {'type': 'array', 'items': _ref(name)}}, 'required': [key]}


_COLLECTIONS = {
    'device_profiles': ('DeviceProfile', 'device_profiles'),
    'accelerator_requests': ('AcceleratorRequest', 'arqs'),
    'devices': ('Device', 'devices'),
    'deployables': ('Deployable', 'deployables'),
    'attributes': ('Attribute', 'attributes'),
}


def _success_schema(route):
    parts = route.path.strip('/').split('/')
    if len(parts) < 2 or parts[1] not in _COLLECTIONS or route.status in (
            202, 204):
        return {'type': 'object'}
    name, key = _COLLECTIONS[parts[1]]
    if len(parts) == 2:
        if route.method == 'GET' or key == 'arqs':
            return _list_of(key, name)
        return _ref(name)
    if key == 'device_profiles':
        return {'type': 'object', 'properties': {'device_profile':
                                                 _ref(name)}}
    return _ref(name)


_ERRORS = {'400': 'Invalid input.', '403': 'Denied by policy.',
           '404': 'Not found.', '406': 'Microversion not supported.',
           '409': 'Conflict.', '423': 'Instance ARQs still binding.',
           '503': 'A backing service is unavailable.'}


def _responses(route):
    ok = {'description': 'Success.'}
    if route.status != 204 and route.status != 202:
        ok['content'] = {'application/json': {
            'schema': _success_schema(route)}}
    responses = {str(route.status): ok}
    for code, text in _ERRORS.items():
        responses[code] = {'description': text, 'content': {
            'application/json': {'schema': _ref('Error')}}}
    return responses


def _parameters(route):
    params = []
    for name in re.findall(r'{(\w+)}', route.path):
        schema = {'type': 'string', 'minLength': 1}
        params.append({'name': name, 'in': 'path', 'required': True,
                       'schema': schema})
    query = route.query or {}
    required = set(query.get('required', []))
    for name, schema in sorted(query.get('properties', {}).items()):
        params.append({'name': name, 'in': 'query',
                       'required': name in required,
                       'schema': copy.deepcopy(schema)})
    if route.path.startswith('/v2'):
        params.append({
            'name': microversion.HEADER, 'in': 'header', 'required': False,
            'description': '"accelerator 2.N" or "accelerator latest"; '
                           'none means 2.0.',
            'schema': {'type': 'string', 'enum': [
                'accelerator %s' % v for v in microversion.VERSIONS]}})
    return params


def _operation(route):
    doc = (route.handler.__doc__ or route.handler.__name__).strip()
    operation = {'operationId': route.handler.__name__,
                 'summary': doc.splitlines()[0],
                 'parameters': _parameters(route),
                 'responses': _responses(route)}
    if route.body is not None:
        operation['requestBody'] = {'required': True, 'content': {
            'application/json': {'schema': copy.deepcopy(route.body)}}}
    return operation


def document():
    """The OpenAPI 3.1 document (a JSON-able dict)."""
    from cyborg.api import routes
    paths = {}
    for route in routes.ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = (
            _operation(route))
    return {
        'openapi': '3.1.0',
        'info': {'title': 'OpenStack Cyborg API (accelerator)',
                 'version': str(microversion.MAX_VERSION),
                 'description': 'Wire-compatible Cyborg v2 API; '
                                'microversions %s to %s.' % (
                                    microversion.MIN_VERSION,
                                    microversion.MAX_VERSION)},
        'paths': paths,
        'components': {'schemas': copy.deepcopy(COMPONENTS)},
    }
