"""The validators of the declared schemas: one per schema, found by the
schema object itself on every request, and by content for another object
of the same schema."""

import copy

import pytest

from cyborg.api import routes
from cyborg.api import schemas


def _declared():
    found = []
    for operation in routes.OPERATIONS:
        for schema in (operation.query, operation.body):
            if schema is not None:
                found.extend(variant for _since, variant
                             in schemas.variants(schema))
    return found


def test_each_declared_schema_keeps_its_validator():
    declared = _declared()
    assert declared
    for schema in declared:
        first = schemas.validator(schema)
        assert schemas.validator(schema) is first
        assert first.schema == schema


def test_an_equal_schema_gets_the_same_validator():
    schema = {'type': 'object', 'properties': {'n': {'type': 'integer'}},
              'additionalProperties': False}
    twin = copy.deepcopy(schema)
    assert schemas.validator(twin) is schemas.validator(schema)
    assert schemas.first_error({'n': 1}, twin) is None
    assert schemas.first_error({'m': 1}, schema) is not None


def test_schemas_made_on_the_fly_do_not_grow_the_cache(monkeypatch):
    monkeypatch.setattr(schemas, '_BY_OBJECT', {})
    monkeypatch.setattr(schemas, '_MAX_BY_OBJECT', 3)
    made = [{'type': 'string', 'maxLength': n} for n in range(10)]
    for schema in made:
        assert schemas.first_error('abcd', schema) == (
            None if schema['maxLength'] >= 4 else
            schemas.first_error('abcd', copy.deepcopy(schema)))
    assert len(schemas._BY_OBJECT) == 3
    # Past the cap, a schema is still validated by its own content.
    assert schemas.first_error('abcdefghijk', made[-1]) is not None
    assert schemas.first_error('abc', made[0]) is not None


@pytest.mark.parametrize('pattern, python', [
    ('^[a-z]+$', '^[a-z]+\\Z'),
    # Escaped, or in a character class, a '$' is a dollar sign.
    ('^a\\$$', '^a\\$\\Z'),
    ('^[$]+$', '^[$]+\\Z'),
    ('^[]$]$', '^[]$]\\Z'),
    ('^[^]$]$', '^[^]$]\\Z'),
    ('^(a$|b$)', '^(a\\Z|b\\Z)'),
    ('^[^\\]$]+$', '^[^\\]$]+\\Z'),
])
def test_a_pattern_s_end_is_the_end_of_the_value(pattern, python):
    """ECMA 262's ``$`` (JSON schema's) is Python's ``\\Z``: Python's
    own ``$`` also matches before a final newline."""
    assert schemas.python_regex(pattern) == python


@pytest.mark.parametrize('schema, value', [
    ({'type': 'string', 'pattern': '^[a-z]+$'}, 'abc\n'),
    ({'type': 'object', 'patternProperties': {'^[a-z]+$': {}},
      'additionalProperties': False}, {'abc\n': 1}),
    ({'type': 'object', 'patternProperties': {
        '^[a-z]+$': {'type': 'string', 'pattern': '^[0-9]$'}}},
     {'abc': '1\n'}),
])
def test_a_trailing_newline_does_not_match(schema, value):
    assert schemas.first_error(value, schema) is not None
    assert schemas.first_error(
        value.rstrip('\n') if isinstance(value, str) else
        {k.rstrip('\n'): v.rstrip('\n') if isinstance(v, str) else v
         for k, v in value.items()}, schema) is None
