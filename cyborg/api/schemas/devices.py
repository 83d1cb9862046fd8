"""Device query strings.

Filter values are searched for, not written: any string is valid, and one
that matches nothing (an unknown type included) gives an empty list.
"""

from cyborg.common import states

LIST_QUERY = {
    'type': 'object',
    'properties': {
        'type': {'type': 'string'},
        'vendor': {'type': 'string'},
        'hostname': {'type': 'string'},
    },
}

# Microversion 2.4 adds ?health=; below it the parameter is ignored, as
# every parameter a version does not know.  Its value is a word of the
# health vocabulary, so a misspelt one is a 400, not a silent empty list.
LIST_QUERY_2_4 = {
    'type': 'object',
    'properties': dict(
        LIST_QUERY['properties'],
        health={'type': 'string', 'enum': list(states.HEALTH_STATES),
                'description': 'Microversion 2.4 and later.'}),
}
