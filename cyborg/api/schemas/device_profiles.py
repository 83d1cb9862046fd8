"""Device profile input and what profiles look like."""

import os_resource_classes
import os_traits

from cyborg.api import microversion
from cyborg.api.schemas import common
from cyborg.api.schemas import list_of
from cyborg.api.schemas import strict_object
from cyborg.api.schemas import Versioned
from cyborg.common import states
from cyborg.db import models
from cyborg.objects import device_profiles as profile_objects

NAME_PATTERN = '^[a-zA-Z0-9-_]+$'
# What the profile_json TEXT column holds on every engine.
MAX_GROUPS_BYTES = models.TEXT_BYTES
_RESOURCE_CLASSES = '|'.join(sorted(os_resource_classes.STANDARDS))
_TRAITS = '|'.join(sorted(os_traits.get_traits()))

# One group: what Nova turns into Placement request group
# device_profile_<i> (resources:, trait:) plus our accel: keys.
GROUP = {
    'type': 'object',
    'minProperties': 1,
    'patternProperties': {
        # Placement's resource class names: at most 255 characters.
        '^resources:(CUSTOM_[A-Z0-9_]{1,248}|%s)$' % _RESOURCE_CLASSES: {
            # Each unit becomes one ARQ: bounded, so a profile cannot ask
            # for millions of them.  An integer too, as Cyborg took it
            # (python-cyborgclient's help shows one): stored as its
            # string, so every answer shows the string form.
            'oneOf': [
                {'type': 'string', 'pattern': '^[1-9][0-9]{0,2}$'},
                {'type': 'integer', 'minimum': 1,
                 'maximum': profile_objects.MAX_ARQS}]},
        # A trait Placement can know: standard, or CUSTOM_ (another one
        # makes every boot with the profile fail NoValidHost, Placement
        # answering Nova's query 400 "No such trait").
        '^trait:(CUSTOM_[A-Z0-9_]{1,248}|%s)$' % _TRAITS: {
            'type': 'string', 'enum': ['required', 'forbidden']},
        '^accel:[a-zA-Z0-9_:.-]{1,255}$': {
            'type': 'string', 'maxLength': 255},
    },
    'additionalProperties': False,
}

# A private profile is shared with at most this many projects.
MAX_PROJECTS = 100
# Project ids are opaque strings (Keystone's are 32 hex digits).
PROJECT_ID = {'type': 'string', 'minLength': 1, 'maxLength': 255,
              'pattern': '^[^\\s,]+$'}

_CREATE_FIELDS = {
    'name': {'type': 'string', 'minLength': 1, 'maxLength': 255,
             'pattern': NAME_PATTERN},
    'uuid': common.UUID,
    'description': {'type': ['string', 'null'], 'maxLength': 255},
    'groups': {'type': 'array', 'minItems': 1, 'items': GROUP},
}
_SHARING_FIELDS = {
    'visibility': {
        'type': 'string', 'enum': list(states.PROFILE_VISIBILITIES),
        'description': common.since(
            microversion.PROFILE_VISIBILITY,
            "'public' (the default): every project sees and uses it; "
            "'private': only the creator's project and those listed in "
            "projects (and admins).")},
    'projects': {
        'type': 'array', 'items': PROJECT_ID, 'uniqueItems': True,
        'maxItems': MAX_PROJECTS,
        'description': common.since(
            microversion.PROFILE_VISIBILITY,
            'The projects a private profile is shared with.')},
}


def _create(fields):
    return {
        'type': 'array',
        'minItems': 1,
        'maxItems': 1,
        'items': {
            'type': 'object',
            'properties': fields,
            'required': ['name', 'groups'],
            'additionalProperties': False,
        },
    }


CREATE = Versioned(
    ((2, 0), _create(_CREATE_FIELDS)),
    (microversion.PROFILE_VISIBILITY,
     _create(dict(_CREATE_FIELDS, **_SHARING_FIELDS))),
)

# Names are searched for, not written: ?name=x,y with none existing (or
# an empty one) gives [].
LIST_QUERY = Versioned(
    ((2, 0), {'type': 'object', 'properties': {'name': {'type': 'string'}}}),
    (microversion.PAGINATION, {'type': 'object', 'properties': dict(
        name={'type': 'string'},
        **common.page_since(microversion.PAGINATION))}),
)

DELETE_QUERY = {
    'type': 'object',
    'properties': {'value': {'type': 'string', 'minLength': 1}},
    'required': ['value'],
}

_PROFILE = common.resource(
    name=common.STRING, description=common.NULLABLE_STRING,
    groups={'type': 'array', 'items': {
        'type': 'object', 'additionalProperties': common.STRING}})
_SHARING = {
    'project_id': dict(common.NULLABLE_STRING, description=common.since(
        microversion.PROFILE_VISIBILITY,
        'The project that created it (null for profiles made before '
        '2.5 existed).')),
    'visibility': {'type': 'string',
                   'enum': list(states.PROFILE_VISIBILITIES),
                   'description': common.since(
                       microversion.PROFILE_VISIBILITY)},
    'projects': {'type': 'array', 'items': common.STRING,
                 'description': common.since(
                     microversion.PROFILE_VISIBILITY,
                     'The projects a private profile is shared with.')},
}
PROFILE = Versioned(
    ((2, 0), strict_object(_PROFILE)),
    (microversion.PROFILE_VISIBILITY,
     strict_object(dict(_PROFILE, **_SHARING))),
)
PROFILE_LIST = list_of('device_profiles', PROFILE,
                       microversion.PAGINATION)
# GET /device_profiles/{name_or_uuid} wraps it; POST answers it bare.
PROFILE_WRAPPED = PROFILE.map(lambda s: strict_object({'device_profile': s}))
