"""Schema fragments several nouns use, in requests and in responses."""

UUID_PATTERN = ('^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?'
                '[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$')
UUID = {'type': 'string', 'pattern': UUID_PATTERN}
NAME = {'type': 'string', 'minLength': 1, 'maxLength': 255}
# Integer ids of rows (deployables' ids in attributes), sent as strings in
# query strings and as numbers or strings in bodies.
INT_STRING = {'type': 'string', 'pattern': '^[0-9]{1,10}$'}

# ?limit=&marker= of a paged list (GET /deployables; from microversion
# 2.11 the lists of devices, ARQs, device profiles and attributes too,
# from 2.12 that of remote pools).
PAGE = {
    'limit': {'type': 'string', 'pattern': '^[1-9][0-9]{0,8}$',
              'description': 'At most this many items (and at most '
                             '[api]max_limit).'},
    'marker': dict(UUID, description='The uuid of the last item of the '
                   'previous page.'),
}



def page_since(version):
    """PAGE for a list paged from microversion ``version`` on: each
    parameter says since when."""
    return {name: dict(schema, description=since(version,
                                                 schema['description']))
            for name, schema in PAGE.items()}


# -- in responses ---------------------------------------------------------

STRING = {'type': 'string'}
NULLABLE_STRING = {'type': ['string', 'null']}
INTEGER = {'type': 'integer'}
NULLABLE_INTEGER = {'type': ['integer', 'null']}
# '2020-03-09T11:26:05+00:00' (views.timestamp), or null.
TIMESTAMP = {'type': ['string', 'null'], 'format': 'date-time'}
LINKS = {'type': 'array', 'minItems': 2, 'maxItems': 2, 'items': {
    'type': 'object',
    'properties': {'href': STRING, 'rel': {'enum': ['self', 'bookmark']}},
    'required': ['href', 'rel'],
    'additionalProperties': False}}


# ``<key>_links`` of a paged list: the next page, where there is one.
NEXT_LINKS = {'type': 'array', 'minItems': 1, 'maxItems': 1, 'items': {
    'type': 'object',
    'properties': {'href': STRING, 'rel': {'enum': ['next']}},
    'required': ['href', 'rel'],
    'additionalProperties': False}}


def resource(**properties):
    """The fields every shown resource has, plus ``properties``."""
    return dict(properties, uuid=STRING, created_at=TIMESTAMP,
                updated_at=TIMESTAMP, links=LINKS)


def since(version, description=''):
    """'Microversion 2.N and later.' for a field's description."""
    text = 'Microversion %d.%d and later.' % version
    return '%s %s' % (description, text) if description else text
