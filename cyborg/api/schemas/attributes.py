"""Attribute input: a deployable is named by its integer id or uuid."""

from cyborg.api import microversion
from cyborg.api.schemas import common
from cyborg.api.schemas import list_of
from cyborg.api.schemas import strict_object
from cyborg.api.schemas import Versioned
from cyborg.db import models

DEPLOYABLE_REF = {'oneOf': [
    {'type': 'integer', 'minimum': 1, 'maximum': 2 ** 31 - 1},
    common.INT_STRING,
    common.UUID,
]}

BARE = {
    'type': 'object',
    'properties': {
        'deployable_id': DEPLOYABLE_REF,
        'key': common.NAME,
        # What a TEXT column holds, at 4 bytes a character at most.
        'value': {'type': 'string', 'maxLength': models.TEXT_BYTES // 4},
    },
    'required': ['deployable_id', 'key', 'value'],
    'additionalProperties': False,
}

# openstacksdk wraps the attribute in its resource key; Cyborg's client
# sends it bare.  Both are accepted, and the shape sent decides which is
# checked, so errors name the field.
WRAPPER = 'attribute'
WRAPPED = {
    'type': 'object',
    'properties': {WRAPPER: BARE},
    'required': [WRAPPER],
    'additionalProperties': False,
}
CREATE = {'if': {'type': 'object', 'required': [WRAPPER]},
          'then': WRAPPED, 'else': BARE}

# Filters are searched for, not written: any value is valid, and one that
# names nothing (no such deployable, an id that is not one) gives [].
_LIST_FILTERS = {
    'deployable_id': {'type': 'string'},
    'key': {'type': 'string'},
}
LIST_QUERY = Versioned(
    ((2, 0), {'type': 'object', 'properties': _LIST_FILTERS}),
    (microversion.PAGINATION, {'type': 'object', 'properties': dict(
        _LIST_FILTERS, **common.page_since(microversion.PAGINATION))}),
)

ATTRIBUTE = strict_object(common.resource(
    deployable_id=common.INTEGER, key=common.STRING, value=common.STRING))
ATTRIBUTE_LIST = list_of('attributes', ATTRIBUTE, microversion.PAGINATION)
