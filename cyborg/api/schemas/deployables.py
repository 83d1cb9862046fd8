"""Deployable query strings, the program patch and what deployables look
like."""

from cyborg.api import microversion
from cyborg.api.schemas import common
from cyborg.api.schemas import health
from cyborg.api.schemas import list_of
from cyborg.api.schemas import strict_object
from cyborg.api.schemas import Versioned
from cyborg.objects import deployables

LIST_QUERY = {
    'type': 'object',
    'properties': {
        # Searched for, not written: any name, none matching is [].
        'name': {'type': 'string'},
        **common.PAGE,
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

_DEPLOYABLE = common.resource(
    parent_id=common.NULLABLE_INTEGER, root_id=common.NULLABLE_INTEGER,
    name=common.STRING, num_accelerators=common.INTEGER,
    device_id=common.INTEGER,
    attributes_list=dict(common.STRING, description='A JSON list of '
                         '{key: value} objects, as text.'),
    rp_uuid=common.NULLABLE_STRING, driver_name=common.NULLABLE_STRING,
    bitstream_id=common.NULLABLE_STRING)

_WITH_HEALTH = dict(_DEPLOYABLE, **health.fields(
    'The effective health: the worse of its own and its device\'s (the '
    'reason and time are those of the worse).'))

_PROGRAMMING_UNTIL = dict(
    common.NULLABLE_STRING,
    description='While a conductor programs it (an FPGA): the time by '
                'which that must have ended; null otherwise.  It is out of '
                'the schedule meanwhile.')

DEPLOYABLE = Versioned(
    ((2, 0), strict_object(_DEPLOYABLE)),
    (microversion.HEALTH, strict_object(_WITH_HEALTH)),
    (microversion.PROGRAMMING, strict_object(dict(
        _WITH_HEALTH, programming_until=_PROGRAMMING_UNTIL))),
)
DEPLOYABLE_LIST = list_of('deployables', DEPLOYABLE,
                          microversion.PAGINATION)
