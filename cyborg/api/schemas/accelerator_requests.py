"""ARQ input and what ARQs look like."""

from cyborg.api import microversion
from cyborg.api.schemas import common
from cyborg.api.schemas import health
from cyborg.api.schemas import list_of
from cyborg.api.schemas import strict_object
from cyborg.api.schemas import Versioned
from cyborg.common import states

# python-cyborgclient's `arq create` also sends device_profile_group_id
# and image_uuid (null unless given); like Cyborg, ARQs are made for every
# group of the profile whatever they say, but they must be well formed.
# cyborgclient 3.0.0 sends --group-id as argparse left it, a string ("0"):
# the digits of the same integer are accepted too.
CREATE = {
    'type': 'object',
    'properties': {
        'device_profile_name': common.NAME,
        'device_profile_group_id': {
            'oneOf': [
                {'type': 'integer', 'minimum': 0, 'maximum': 2 ** 31 - 1},
                {'type': 'string', 'pattern': '^[0-9]{1,10}$'},
                {'type': 'null'}],
            'description': 'Accepted and ignored (every group gets ARQs); '
                           'an integer or its digits as a string.'},
        'image_uuid': {
            'oneOf': [common.UUID, {'type': 'null'}],
            'description': 'Accepted and ignored.'},
    },
    'required': ['device_profile_name'],
    'additionalProperties': False,
}

# Free-form words, but no control characters (they end up in logs).
_WORD = {'type': 'string', 'minLength': 1, 'maxLength': 255,
         'pattern': '^[^\\x00-\\x1f\\x7f]+$'}

ALLOCATE = {
    'type': 'object',
    'properties': {
        'consumer_id': dict(_WORD, description='Who holds the accelerator '
                            '(a pod\'s uid, a job id).'),
        'consumer_type': dict(_WORD, description='What kind of consumer '
                              'that is (e.g. k8s-pod); Placement records '
                              'it upper-cased, other characters as _.'),
        'hostname': dict(common.NAME, description='Only an accelerator of '
                         'this host.'),
    },
    'required': ['consumer_id', 'consumer_type'],
    'additionalProperties': False,
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
_LIST_FILTERS = {
    'instance': {'type': 'string'},
    'bind_state': {'type': 'string', 'enum': ['resolved']},
}
LIST_QUERY = Versioned(
    ((2, 0), {'type': 'object', 'properties': _LIST_FILTERS}),
    (microversion.PAGINATION, {'type': 'object', 'properties': dict(
        _LIST_FILTERS, **common.page_since(microversion.PAGINATION))}),
)

DELETE_QUERY = {
    'type': 'object',
    'properties': {
        'arqs': {'type': 'string', 'minLength': 1},
        'instance': common.UUID,
    },
    'oneOf': [{'required': ['arqs']}, {'required': ['instance']}],
}

_ARQ = common.resource(
    state={'type': 'string', 'enum': list(states.ARQ_STATES)},
    device_profile_name=common.STRING,
    device_profile_group_id=common.INTEGER,
    hostname=common.NULLABLE_STRING, device_rp_uuid=common.NULLABLE_STRING,
    instance_uuid=common.NULLABLE_STRING, project_id=common.NULLABLE_STRING,
    attach_handle_type=dict(common.STRING, description='Empty until '
                            'bound.'),
    attach_handle_uuid=common.NULLABLE_STRING,
    attach_handle_info={'type': 'object',
                        'additionalProperties': common.STRING})
_DEVICE_HEALTH = {
    'device_health': dict(
        health.STATE, type=['string', 'null'],
        enum=health.STATE['enum'] + [None],
        description=common.since(
            microversion.HEALTH, 'The effective health of the deployable '
            'the request is bound to; null while unbound.')),
    'device_health_reason': dict(
        common.NULLABLE_STRING,
        description=common.since(microversion.HEALTH, 'Why, in words.')),
}

_CONSUMER = {
    'consumer_id': dict(common.NULLABLE_STRING, description=common.since(
        microversion.STANDALONE, 'Who holds an accelerator request '
        'allocated without Nova; null otherwise.')),
    'consumer_type': dict(common.NULLABLE_STRING, description=common.since(
        microversion.STANDALONE, 'What kind of consumer that is, in the '
        'words of whoever allocated it.')),
}

ARQ = Versioned(
    ((2, 0), strict_object(_ARQ)),
    (microversion.HEALTH, strict_object(dict(_ARQ, **_DEVICE_HEALTH))),
    (microversion.STANDALONE,
     strict_object(dict(_ARQ, **_DEVICE_HEALTH, **_CONSUMER))),
)
ARQ_LIST = list_of('arqs', ARQ, microversion.PAGINATION)
# What a create answers: every ARQ it made, never paged.
CREATED_ARQS = list_of('arqs', ARQ)
