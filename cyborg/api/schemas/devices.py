"""Device query strings."""

from cyborg.db import models

LIST_QUERY = {
    'type': 'object',
    'properties': {
        'type': {'type': 'string', 'enum': list(models.DEVICE_TYPES)},
        'vendor': {'type': 'string', 'maxLength': 255},
        'hostname': {'type': 'string', 'maxLength': 255},
    },
}
