"""Schema fragments several nouns use."""

UUID_PATTERN = ('^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?'
                '[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$')
UUID = {'type': 'string', 'pattern': UUID_PATTERN}
NAME = {'type': 'string', 'minLength': 1, 'maxLength': 255}
# Integer ids of rows (deployables' ids in attributes), sent as strings in
# query strings and as numbers or strings in bodies.
INT_STRING = {'type': 'string', 'pattern': '^[0-9]{1,10}$'}
