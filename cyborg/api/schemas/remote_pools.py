"""Remote pool input and what remote pools look like (microversion 2.8;
the list paged from 2.12)."""

import os_resource_classes

from cyborg.api import microversion
from cyborg.api.schemas import common
from cyborg.api.schemas import list_of
from cyborg.api.schemas import strict_object
from cyborg.api.schemas import Versioned
from cyborg.common import states

NAME_PATTERN = '^[a-zA-Z0-9-_.]+$'
# Placement names the provider remote_pool_<name>, within its 200.
NAME = {'type': 'string', 'minLength': 1, 'maxLength': 150,
        'pattern': NAME_PATTERN}
# The standard classes a pool may serve: accelerators'.  The others
# (DISK_GB, VCPU, MEMORY_MB...) are what compute nodes provide themselves
# and every flavor asks for: a sharing provider of them would serve
# instances' own disk, CPU or memory.
ACCELERATOR_CLASSES = (os_resource_classes.FPGA, os_resource_classes.PGPU,
                       os_resource_classes.VGPU)
RESOURCE_CLASS = {
    'type': 'string',
    'pattern': '^(CUSTOM_[A-Z0-9_]{1,247}|%s)$' % '|'.join(
        ACCELERATOR_CLASSES),
    'description': 'A custom resource class (CUSTOM_*) or one of the '
                   'standard accelerator classes (%s).' % ', '.join(
                       ACCELERATOR_CLASSES)}
TRAIT = {'type': 'string', 'pattern': '^[A-Z0-9_]{1,255}$'}
# An NVMe-oF NQN is at most 223 bytes; a fabric manager's id is shorter.
FABRIC_ADDRESS = {'type': 'string', 'minLength': 1, 'maxLength': 255,
                  'pattern': r'^[^\s\x00]+$'}
# One provider's inventory and one request: bounded.
MAX_HANDLES = 1024

CREATE = strict_object({
    'name': NAME,
    'uuid': common.UUID,
    'description': {'type': ['string', 'null'], 'maxLength': 255},
    'resource_class': RESOURCE_CLASS,
    'traits': {'type': 'array', 'items': TRAIT, 'uniqueItems': True,
               'maxItems': 64},
    'aggregates': {'type': 'array', 'items': common.UUID, 'minItems': 1,
                   'uniqueItems': True, 'maxItems': 64},
    'fabric_driver': {'type': 'string', 'minLength': 1, 'maxLength': 255,
                      'pattern': '^[a-zA-Z0-9_.-]+$'},
    'handles': {'type': 'array', 'minItems': 1, 'maxItems': MAX_HANDLES,
                'items': strict_object({'fabric_address': FABRIC_ADDRESS,
                                        'uuid': common.UUID},
                                       optional=('uuid',))},
}, optional=('uuid', 'description', 'traits'))

# Names are searched for, not written: one that matches nothing gives [].
# Microversion 2.12 pages the list (below, ?limit= is refused as unknown).
_LIST_FILTERS = {'name': {'type': 'string'}}
LIST_QUERY = Versioned(
    ((2, 0), {'type': 'object', 'properties': _LIST_FILTERS}),
    (microversion.REMOTE_POOLS_PAGED, {'type': 'object', 'properties': dict(
        _LIST_FILTERS,
        **common.page_since(microversion.REMOTE_POOLS_PAGED))}),
)

HANDLE = strict_object({
    'uuid': common.STRING,
    'fabric_address': common.STRING,
    'in_use': {'type': 'boolean'},
    'hostname': dict(common.NULLABLE_STRING,
                     description='The host it is attached to, while in '
                                 'use.')})

POOL = strict_object(common.resource(
    name=common.STRING, description=common.NULLABLE_STRING,
    resource_class=common.STRING,
    traits={'type': 'array', 'items': common.STRING},
    aggregates={'type': 'array', 'items': common.STRING},
    fabric_driver=common.STRING,
    resource_provider_uuid=dict(common.STRING,
                                description='Its sharing provider in '
                                            'Placement.'),
    state={'type': 'string', 'enum': list(states.POOL_STATES)},
    placement_synced={'type': 'boolean'},
    handles={'type': 'array', 'items': HANDLE}))
POOL_LIST = list_of('remote_pools', POOL, microversion.REMOTE_POOLS_PAGED)
