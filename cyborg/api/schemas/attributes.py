"""Attribute input: a deployable is named by its integer id or uuid."""

from cyborg.api.schemas import common

DEPLOYABLE_REF = {'oneOf': [
    {'type': 'integer', 'minimum': 1, 'maximum': 2 ** 31 - 1},
    common.INT_STRING,
    common.UUID,
]}

CREATE = {
    'type': 'object',
    'properties': {
        'deployable_id': DEPLOYABLE_REF,
        'key': common.NAME,
        # A TEXT column holds 64 KiB: 4 bytes a character at most.
        'value': {'type': 'string', 'maxLength': 16383},
    },
    'required': ['deployable_id', 'key', 'value'],
    'additionalProperties': False,
}

LIST_QUERY = {
    'type': 'object',
    'properties': {
        'deployable_id': {'oneOf': [common.INT_STRING, common.UUID]},
        'key': {'type': 'string', 'maxLength': 255},
    },
}
