"""ARQ input (CONTRACT.md §3, §5)."""

from cyborg.api.schemas import common

CREATE = {
    'type': 'object',
    'properties': {'device_profile_name': common.NAME},
    'required': ['device_profile_name'],
}

# The paths a bind (op add) or unbind (op remove) may name.
BIND_PATHS = ('/hostname', '/device_rp_uuid', '/instance_uuid')
PROJECT_PATH = '/project_id'     # microversion 2.1, admin only

_OPERATION = {
    'type': 'object',
    'properties': {
        'path': {'type': 'string',
                 'enum': list(BIND_PATHS) + [PROJECT_PATH]},
        'op': {'type': 'string', 'enum': ['add', 'remove']},
        'value': {'type': 'string', 'minLength': 1, 'maxLength': 255},
    },
    'required': ['path', 'op'],
    'additionalProperties': False,
}

PATCH = {
    'type': 'object',
    'minProperties': 1,
    'patternProperties': {
        common.UUID_PATTERN: {'type': 'array', 'minItems': 1,
                              'maxItems': 4, 'items': _OPERATION},
    },
    'additionalProperties': False,
}

# ?instance= is searched for: any value, none matching gives [].
# ?bind_state= chooses what the call does, so only 'resolved' is valid.
LIST_QUERY = {
    'type': 'object',
    'properties': {
        'instance': {'type': 'string'},
        'bind_state': {'type': 'string', 'enum': ['resolved']},
    },
}

DELETE_QUERY = {
    'type': 'object',
    'properties': {
        'arqs': {'type': 'string', 'minLength': 1},
        'instance': common.UUID,
    },
    'oneOf': [{'required': ['arqs']}, {'required': ['instance']}],
}
