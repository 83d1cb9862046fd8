"""The OpenAPI 3.1 document of the API, generated from the operations'
declarations (``cyborg.api.routes``): served at /v2/openapi.json and
committed as doc/api/openapi.json (a test keeps the copy current).

A schema that changes with the microversion is documented as ``anyOf`` its
variants, each titled with the microversions it applies to; the
dispatcher itself checks the exact variant of each request's version.
"""

import copy
import re

from cyborg.api import dispatch
from cyborg.api import microversion
from cyborg.api import schemas
from cyborg.api.schemas import common

_ERROR_TEXT = {
    400: 'Invalid input (body, query string or microversion).',
    401: 'No valid token.',
    403: 'Denied by policy, a service token is needed, or over a quota.',
    404: 'Not found (or not available at this microversion).',
    406: 'Microversion not supported.',
    409: 'Conflict with the current state.',
    413: 'The request body is larger than '
         '[oslo_middleware]max_request_body_size.',
    415: 'The request body is sent as another media type than JSON '
         '(application/json).',
    423: 'Accelerator requests of the instance are still binding.',
    503: 'A backing service (database, conductor, Keystone\'s limits) '
         'is unavailable.',
}

ERROR = {
    'type': 'object',
    'description': 'error_message is a JSON string of {faultcode, '
                   'faultstring, debuginfo}.',
    'properties': {'error_message': common.STRING},
    'required': ['error_message'],
}


def _ref(name):
    return {'$ref': '#/components/schemas/%s' % name}


def _version_text(version):
    return '%d.%d' % tuple(version)


def _ranges(schema):
    """[(title, schema)] of the variants of ``schema``: 'from 2.0 to 2.2'."""
    found = schemas.variants(schema)
    out = []
    for i, (since, variant) in enumerate(found):
        if i + 1 < len(found):
            first, last = _version_text(since), _before(found[i + 1][0])
            title = ('Microversion %s' % first if first == last else
                     'Microversions %s to %s' % (first, last))
        else:
            title = 'Microversion %s and later' % _version_text(since)
        out.append((title, variant))
    return out


def _before(version):
    """The microversion just before ``version`` in the list."""
    texts = microversion.VERSIONS
    return texts[texts.index(_version_text(version)) - 1]


def _document_schema(schema):
    variants = _ranges(schema)
    if len(variants) == 1:
        return copy.deepcopy(variants[0][1])
    return {'anyOf': [dict(copy.deepcopy(v), title=title)
                      for title, v in variants]}


def _responses(operation):
    ok = {'description': 'Success.'}
    if (operation.response is not None
            and operation.status not in dispatch.NO_CONTENT):
        ok['content'] = {
            media: {'schema': _document_schema(operation.response)
                    if media == 'application/json' else
                    copy.deepcopy(operation.response)}
            for media in operation.media_types}
    responses = {str(operation.status): ok}
    # A body over the size limit is refused before the operation is
    # known (cyborg.wsgi.middleware.read_body); one sent as another type
    # than JSON when it is read (cyborg.api.dispatch.check_media_type).
    body_errors = (413, 415) if operation.body is not None else ()
    for code in sorted(operation.errors + body_errors):
        responses[str(code)] = {'description': _ERROR_TEXT[code], 'content': {
            'application/json': {'schema': _ref('Error')}}}
    return responses


def _query_parameters(operation):
    """Every parameter of any variant; those a variant adds say since."""
    merged = {}
    required = None
    for _title, variant in _ranges(operation.query or {}):
        for name, schema in variant.get('properties', {}).items():
            merged.setdefault(name, schema)
        names = set(variant.get('required', []))
        required = names if required is None else required & names
    return [{'name': name, 'in': 'query',
             'required': name in (required or ()),
             'schema': copy.deepcopy(schema)}
            for name, schema in sorted(merged.items())]


def _parameters(operation):
    params = [{'name': name, 'in': 'path', 'required': True,
               'schema': {'type': 'string', 'minLength': 1}}
              for name in re.findall(r'{(\w+)}', operation.path)]
    params += _query_parameters(operation)
    if operation.path.startswith('/v2'):
        versions = [v for v in microversion.VERSIONS
                    if operation.available_at(
                        microversion.APIVersion.parse(v).as_tuple())]
        params.append({
            'name': microversion.HEADER, 'in': 'header', 'required': False,
            'description': '"accelerator 2.N" or "accelerator latest"; '
                           'none means 2.0.',
            'schema': {'type': 'string', 'enum': [
                'accelerator %s' % v for v in versions] + [
                'accelerator latest']}})
    return params


def _operation(operation):
    doc = (operation.handler.__doc__ or operation.name).strip()
    lines = doc.splitlines()
    out = {'operationId': operation.name,
           'summary': lines[0],
           'parameters': _parameters(operation),
           'responses': _responses(operation),
           'x-openstack-microversions': {
               'min': _version_text(operation.min_version),
               'max': (_version_text(operation.max_version)
                       if operation.max_version else None)}}
    if len(lines) > 1:
        out['description'] = ' '.join(line.strip() for line in lines)
    if operation.policy is not None:
        out['x-openstack-policy'] = operation.policy
    if operation.body is not None:
        out['requestBody'] = {'required': True, 'content': {
            'application/json': {
                'schema': _document_schema(operation.body)}}}
    return out


def document():
    """The OpenAPI 3.1 document (a JSON-able dict)."""
    from cyborg.api import routes
    paths = {}
    for operation in routes.OPERATIONS:
        paths.setdefault(operation.path, {})[operation.method.lower()] = (
            _operation(operation))
    return {
        'openapi': '3.1.0',
        'info': {'title': 'OpenStack Cyborg API (accelerator)',
                 'version': str(microversion.MAX_VERSION),
                 'description': 'Wire-compatible Cyborg v2 API; '
                                'microversions %s to %s.' % (
                                    microversion.MIN_VERSION,
                                    microversion.MAX_VERSION)},
        'paths': paths,
        'components': {'schemas': {'Error': copy.deepcopy(ERROR)}},
    }
