"""Export query strings and documents (microversion 2.9).

The response schemas declare the shape the API promises; the tests check
the documents further against the Kubernetes and Slurm rules
(tests/unit/exports/)."""

from cyborg.api.schemas import common
from cyborg.api.schemas import strict_object

_HOSTNAME = {'type': 'string', 'minLength': 1, 'maxLength': 255,
             'description': 'Only this host (default: every host).'}

SLICES_QUERY = {'type': 'object', 'properties': {
    'hostname': _HOSTNAME,
    'format': {'type': 'string', 'enum': ['json', 'yaml'],
               'description': 'json (default) or yaml.'}}}
GRES_QUERY = {'type': 'object', 'properties': {'hostname': _HOSTNAME}}

_ATTRIBUTE = {'type': 'object', 'minProperties': 1, 'maxProperties': 1,
              'properties': {'string': common.STRING,
                             'int': common.INTEGER,
                             'bool': {'type': 'boolean'},
                             'version': common.STRING},
              'additionalProperties': False}
_DEVICE = strict_object({
    'name': common.STRING,
    'attributes': {'type': 'object', 'additionalProperties': _ATTRIBUTE},
    'capacity': {'type': 'object', 'additionalProperties': strict_object(
        {'value': common.STRING})},
}, optional=('capacity',))
SLICE = strict_object({
    'apiVersion': {'const': 'resource.k8s.io/v1'},
    'kind': {'const': 'ResourceSlice'},
    'metadata': strict_object({
        'name': common.STRING,
        'labels': {'type': 'object', 'additionalProperties': common.STRING,
                   'description': 'app.kubernetes.io/managed-by: cyborg '
                                  'and cyborg.openstack.org/node, to '
                                  'prune by.'},
        'annotations': {'type': 'object',
                        'additionalProperties': common.STRING,
                        'description': 'cyborg.openstack.org/hostname: '
                                       'the cyborg host name.'}}),
    'spec': strict_object({
        'driver': common.STRING,
        'nodeName': common.STRING,
        'pool': strict_object({'name': common.STRING,
                               'generation': common.INTEGER,
                               'resourceSliceCount': common.INTEGER}),
        'devices': {'type': 'array', 'maxItems': 128, 'items': _DEVICE},
    }),
})
SLICE_LIST = strict_object({
    'apiVersion': {'const': 'v1'},
    'kind': {'const': 'List'},
    'items': {'type': 'array', 'items': SLICE},
})
GRES_CONF = {'type': 'string',
             'description': 'gres.conf lines: NodeName=... Name=... '
                            'Type=... [File=...] Count=...'}
