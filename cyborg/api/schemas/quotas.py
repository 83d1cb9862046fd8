"""What a project's quota looks like (microversion 2.7 and later)."""

from cyborg.api.schemas import common
from cyborg.api.schemas import strict_object

_RESOURCE = strict_object({
    'limit': dict(common.INTEGER, minimum=-1,
                  description='How much the project may use; -1 for no '
                              'limit.'),
    'in_use': dict(common.INTEGER, minimum=0,
                   description='How much its accelerator requests use.'),
})

QUOTA = strict_object({'quota': strict_object({
    'project_id': common.STRING,
    'enforced': {'type': 'boolean',
                 'description': 'Whether creating accelerator requests '
                                'is refused over a limit ([quota]driver '
                                'unified_limits).'},
    'resources': {
        'type': 'object',
        'description': 'By resource name: accelerator_requests, and '
                       'class:<resource class> for the accelerators of '
                       'each class.',
        'propertyNames': {'minLength': 1},
        'additionalProperties': _RESOURCE,
    },
})})
