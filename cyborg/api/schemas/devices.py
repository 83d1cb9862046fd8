"""Device query strings and what devices look like."""

from cyborg.api import microversion
from cyborg.api.schemas import common
from cyborg.api.schemas import health
from cyborg.api.schemas import strict_object
from cyborg.api.schemas import Versioned
from cyborg.api.schemas import list_of
from cyborg.common import states
from cyborg.db import models

# Filter values are searched for, not written: any string is valid, and
# one that matches nothing (an unknown type included) gives an empty list.
_FILTERS = {
    'type': {'type': 'string'},
    'vendor': {'type': 'string'},
    'hostname': {'type': 'string'},
}

# Microversion 2.4 adds ?health= (below, it is refused as unknown).  Its
# value is a word of the health vocabulary, so a misspelt one is a 400,
# not a silent empty list.
_HEALTH_FILTER = dict(_FILTERS, health=dict(
    health.STATE, description=common.since(microversion.HEALTH)))
LIST_QUERY = Versioned(
    ((2, 0), {'type': 'object', 'properties': _FILTERS}),
    (microversion.HEALTH, {'type': 'object', 'properties': _HEALTH_FILTER}),
    (microversion.PAGINATION, {'type': 'object', 'properties': dict(
        _HEALTH_FILTER, **common.page_since(microversion.PAGINATION))}),
)

_DEVICE = common.resource(
    type={'type': 'string', 'enum': list(models.DEVICE_TYPES)},
    vendor=common.STRING, model=common.STRING,
    std_board_info=common.NULLABLE_STRING,
    vendor_board_info=common.NULLABLE_STRING,
    hostname=common.STRING)
_STATUS = {'status': {'type': 'string', 'enum': list(states.DEVICE_STATUSES),
                      'description': common.since(microversion.DEVICE_STATUS)}}

DEVICE = Versioned(
    ((2, 0), strict_object(_DEVICE)),
    (microversion.DEVICE_STATUS, strict_object(dict(_DEVICE, **_STATUS))),
    (microversion.HEALTH, strict_object(dict(
        _DEVICE, **_STATUS, **health.fields('The device\'s health.')))),
)
DEVICE_LIST = list_of('devices', DEVICE, microversion.PAGINATION)
