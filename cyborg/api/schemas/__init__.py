"""JSON schemas of request bodies and query strings, one module per noun."""

import functools
import json

import jsonschema


@functools.lru_cache(maxsize=None)
def _cached(schema_text):
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validator(schema):
    """A (cached) validator for ``schema``."""
    return _cached(json.dumps(schema, sort_keys=True))
