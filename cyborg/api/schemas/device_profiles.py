"""Device profile input and what profiles look like."""

import os_resource_classes

from cyborg.api.schemas import common
from cyborg.api.schemas import list_of
from cyborg.api.schemas import strict_object

NAME_PATTERN = '^[a-zA-Z0-9-_]+$'
# What the profile_json TEXT column holds on every engine (MySQL: 64 KiB).
MAX_GROUPS_BYTES = 65535
_RESOURCE_CLASSES = '|'.join(sorted(os_resource_classes.STANDARDS))

# One group: what Nova turns into Placement request group
# device_profile_<i> (resources:, trait:) plus our accel: keys.
GROUP = {
    'type': 'object',
    'minProperties': 1,
    'patternProperties': {
        '^resources:(CUSTOM_[A-Z0-9_]+|%s)$' % _RESOURCE_CLASSES: {
            # Each unit becomes one ARQ: bounded, so a profile cannot ask
            # for millions of them.
            'type': 'string', 'pattern': '^[1-9][0-9]{0,2}$'},
        '^trait:[A-Z0-9_]{1,255}$': {
            'type': 'string', 'enum': ['required', 'forbidden']},
        '^accel:[a-zA-Z0-9_:.-]{1,255}$': {
            'type': 'string', 'maxLength': 255},
    },
    'additionalProperties': False,
}

CREATE = {
    'type': 'array',
    'minItems': 1,
    'maxItems': 1,
    'items': {
        'type': 'object',
        'properties': {
            'name': {'type': 'string', 'minLength': 1, 'maxLength': 255,
                     'pattern': NAME_PATTERN},
            'uuid': common.UUID,
            'description': {'type': ['string', 'null'], 'maxLength': 255},
            'groups': {'type': 'array', 'minItems': 1, 'items': GROUP},
        },
        'required': ['name', 'groups'],
        'additionalProperties': False,
    },
}

# Names are searched for, not written: ?name=x,y with none existing (or
# an empty one) gives [].
LIST_QUERY = {
    'type': 'object',
    'properties': {'name': {'type': 'string'}},
}

DELETE_QUERY = {
    'type': 'object',
    'properties': {'value': {'type': 'string', 'minLength': 1}},
    'required': ['value'],
}

PROFILE = strict_object(common.resource(
    name=common.STRING, description=common.NULLABLE_STRING,
    groups={'type': 'array', 'items': {
        'type': 'object', 'additionalProperties': common.STRING}}))
PROFILE_LIST = list_of('device_profiles', PROFILE)
# GET /device_profiles/{name_or_uuid} wraps it; POST answers it bare.
PROFILE_WRAPPED = strict_object({'device_profile': PROFILE})
