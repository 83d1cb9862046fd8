"""Deployable query strings and the program patch."""

from cyborg.api.schemas import common
from cyborg.objects import deployables

LIST_QUERY = {
    'type': 'object',
    'properties': {
        # Searched for, not written: any name, none matching is [].
        'name': {'type': 'string'},
        'limit': {'type': 'string', 'pattern': '^[1-9][0-9]{0,8}$'},
        'marker': common.UUID,
        'sort_key': {'type': 'string', 'enum': list(deployables.SORT_KEYS)},
        'sort_dir': {'type': 'string', 'enum': ['asc', 'desc']},
    },
}

PROGRAM = {
    'type': 'array',
    'minItems': 1,
    'maxItems': 1,
    'items': {
        'type': 'object',
        'properties': {
            'path': {'type': 'string', 'enum': ['/program']},
            'op': {'type': 'string', 'enum': ['replace']},
            'value': {
                'type': 'array', 'minItems': 1, 'maxItems': 1,
                'items': {
                    'type': 'object',
                    'properties': {'image_uuid': common.UUID},
                    'required': ['image_uuid'],
                },
            },
        },
        'required': ['path', 'op', 'value'],
        'additionalProperties': False,
    },
}
