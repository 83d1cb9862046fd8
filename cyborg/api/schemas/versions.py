"""What the version documents (GET / and GET /v2) look like."""

from cyborg.api.schemas import common
from cyborg.api.schemas import strict_object

_VERSION_TEXT = {'type': 'string', 'pattern': r'^[0-9]+\.[0-9]+$'}

V2 = strict_object({
    'id': {'type': 'string', 'enum': ['v2', 'v2.0']},
    'status': {'type': 'string', 'enum': ['CURRENT']},
    'min_version': _VERSION_TEXT,
    'max_version': _VERSION_TEXT,
    'links': {'type': 'array', 'items': strict_object(
        {'href': common.STRING, 'rel': common.STRING})},
})

ROOT = strict_object({
    'name': common.STRING,
    'description': common.STRING,
    'versions': {'type': 'array', 'items': V2},
    'default_version': V2,
    'service_version': dict(common.STRING, description='The release of '
                            'this server (ours; not in Cyborg\'s document).'),
})
