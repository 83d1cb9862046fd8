"""JSON schemas of what each operation takes and answers, one module per
noun, and the tools to declare and check them.

A schema that changes with the microversion is a ``Versioned``: the
variants it has had, each with the microversion it appeared in.  The
dispatcher validates a request against the variant of the request's
version, and (with ``[api]validate_responses``, which the tests turn on)
the response too; the OpenAPI document lists every variant.
"""

import functools
import json
import re

import jsonschema
from jsonschema import exceptions as jsonschema_exceptions

from cyborg.api.schemas import common
from cyborg.common import exception

# Reasons are cut here, after the field name, so they stay readable.
MAX_REASON = 300
MAX_VALUE = 60


class Versioned:
    """A schema with variants by microversion, oldest first.

    ``Versioned(((2, 0), schema_a), ((2, 4), schema_b))`` is ``schema_a``
    from 2.0 and ``schema_b`` from 2.4 on.
    """

    def __init__(self, *variants):
        if not variants or variants[0][0] != (2, 0):
            raise ValueError('the first variant must start at 2.0')
        self.variants = tuple((tuple(v), s) for v, s in variants)

    def at(self, version):
        """The variant a request at ``version`` (a tuple) gets."""
        chosen = self.variants[0][1]
        for since, schema in self.variants:
            if tuple(version) >= since:
                chosen = schema
        return chosen

    def map(self, fn):
        """The same breakpoints, each variant passed through ``fn``."""
        return Versioned(*((since, fn(s)) for since, s in self.variants))


def at(schema, version):
    """``schema`` as a request at ``version`` sees it (None stays None)."""
    if isinstance(schema, Versioned):
        return schema.at(version)
    return schema


def variants(schema):
    """[(since, schema)] of a plain or versioned schema."""
    if isinstance(schema, Versioned):
        return list(schema.variants)
    return [((2, 0), schema)]


def strict_object(properties, optional=()):
    """An object with exactly ``properties``, all required but
    ``optional``."""
    return {'type': 'object', 'properties': properties,
            'required': sorted(set(properties) - set(optional)),
            'additionalProperties': False}


def list_of(key, item, paged_since=None):
    """{key: [item, ...]}, for a plain or versioned item schema; from
    microversion ``paged_since`` with ``<key>_links`` (the next page) where
    there is a next page."""
    since = [tuple(paged_since)] if paged_since else []
    breaks = sorted({v for v, _ in variants(item)} | set(since))

    def wrap(version):
        properties = {key: {'type': 'array', 'items': at(item, version)}}
        if since and version >= since[0]:
            properties[key + '_links'] = common.NEXT_LINKS
        return strict_object(properties, optional=(key + '_links',))
    if len(breaks) == 1:
        return wrap(breaks[0])
    return Versioned(*((version, wrap(version)) for version in breaks))


def python_regex(pattern):
    r"""``pattern``, an ECMA 262 regex as JSON schema and the OpenAPI
    document write them, for Python's ``re``: each ``$`` outside a
    character class becomes ``\Z``.  ECMA's ``$`` matches only at the end
    of the text; Python's also before a final newline, which let a name
    ending in "\n" (or a uuid and a newline, too long for its column)
    through."""
    out = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == '\\':
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != ']'
        elif char == '[':
            in_class = True
            # A ']' first in a class ("[]a]", "[^]a]") is one of its
            # characters, not its end.
            start = i + 2 if pattern.startswith('[^', i) else i + 1
            if pattern.startswith(']', start):
                out.append(pattern[i:start + 1])
                i = start + 1
                continue
        elif char == '$':
            char = '\\Z'
        out.append(char)
        i += 1
    return ''.join(out)


@functools.lru_cache(maxsize=None)
def _regex(pattern):
    return re.compile(python_regex(pattern))


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, 'string') and not _regex(
            pattern).search(instance):
        yield jsonschema_exceptions.ValidationError(
            '%r does not match %r' % (instance, pattern))


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, 'object'):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _regex(pattern).search(key):
                yield from validator.descend(value, subschema, path=key,
                                             schema_path=pattern)


def _additional_properties(validator, allowed, instance, schema):
    """jsonschema's additionalProperties, with ``patternProperties``
    matched as ``_pattern_properties`` matches them."""
    if not validator.is_type(instance, 'object'):
        return
    known = schema.get('properties', {})
    patterns = [_regex(p) for p in schema.get('patternProperties', {})]
    extras = [key for key in instance if key not in known
              and not any(p.search(key) for p in patterns)]
    if validator.is_type(allowed, 'object'):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed,
                                         path=extra)
    elif not allowed and extras:
        extras.sort()
        if 'patternProperties' in schema:
            yield jsonschema_exceptions.ValidationError(
                '%s %s not match any of the regexes: %s' % (
                    ', '.join(map(repr, extras)),
                    'does' if len(extras) == 1 else 'do',
                    ', '.join(map(repr, sorted(
                        schema['patternProperties'])))))
        else:
            yield jsonschema_exceptions.ValidationError(
                'Additional properties are not allowed (%s %s '
                'unexpected)' % (', '.join(map(repr, extras)),
                                 'was' if len(extras) == 1 else 'were'))


# The keywords that match regexes, as ECMA 262 means them.
_ECMA_KEYWORDS = {'pattern': _pattern,
                  'patternProperties': _pattern_properties,
                  'additionalProperties': _additional_properties}


@functools.lru_cache(maxsize=None)
def _validator_class(cls):
    return jsonschema.validators.extend(cls, _ECMA_KEYWORDS)


@functools.lru_cache(maxsize=None)
def _cached(schema_text):
    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema)
    return _validator_class(cls)(schema,
                                 format_checker=cls.FORMAT_CHECKER)


# Validators by the schema object they were asked for: the declarations'
# schemas are made once, at import, so finding one by identity spares
# each request serialising its schema to find the validator by content.
# The entry keeps the schema alive, so its id cannot name another object;
# schemas made on the fly (tests) fill at most _MAX_BY_OBJECT entries and
# are then found by content alone.
_BY_OBJECT = {}
_MAX_BY_OBJECT = 1024


def validator(schema):
    """A (cached) validator for ``schema``, which must not change once
    it has been validated against."""
    entry = _BY_OBJECT.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    found = _cached(json.dumps(schema, sort_keys=True))
    if len(_BY_OBJECT) < _MAX_BY_OBJECT:
        _BY_OBJECT[id(schema)] = (schema, found)
    return found


def first_error(data, schema):
    """The most relevant way ``data`` fails ``schema``, in words, or None.

    Within ``oneOf``/``anyOf`` the error of the branch that came closest
    is reported, so the reason names the field, not the combinator.
    """
    error = jsonschema_exceptions.best_match(
        validator(schema).iter_errors(data))
    if error is None:
        return None
    where = '/'.join(str(p) for p in error.absolute_path)
    plain = _plainly(error, where)
    if plain is not None:
        return plain
    message = error.message
    shown = repr(error.instance)
    if len(shown) > MAX_VALUE:
        # "'xxxx...' is too long": keep the reason, not the whole value.
        message = message.replace(shown, shown[:MAX_VALUE] + '...')
    if len(message) > MAX_REASON:
        message = message[:MAX_REASON] + '...'
    return '%s: %s' % (where, message) if where else message


def _plainly(error, where):
    """A plainer reason than jsonschema's for the failures whose own
    message only echoes the input back; None for the others."""
    kind, instance, wanted = error.validator, error.instance, \
        error.validator_value
    if kind == 'type' and instance is None and not where:
        return 'a JSON body is required'
    if kind in ('oneOf', 'anyOf') and all(
            set(branch) == {'required'} for branch in wanted):
        names = ', '.join(name for branch in wanted
                          for name in branch['required'])
        return '%sgive exactly one of: %s' % (
            where + ': ' if where else '', names)
    if kind in ('maxItems', 'minItems') and isinstance(instance, list):
        bound = 'at most' if kind == 'maxItems' else 'at least'
        return '%s%s %d item%s, not %d' % (
            where + ': ' if where else '', bound, wanted,
            '' if wanted == 1 else 's', len(instance))
    return None


def validate(data, schema, version=None):
    """Raise 400 naming the field when ``data`` does not match ``schema``
    (a plain one, or a versioned one as ``version`` sees it; when a later
    microversion would take ``data``, the reason says which)."""
    reason = first_error(data, at(schema, version) if version else schema)
    if reason is None:
        return
    if version is not None:
        for since, variant in variants(schema):
            if since > tuple(version) and first_error(data, variant) is None:
                reason += ('; that needs microversion %d.%d or later'
                           % since)
                break
    raise exception.Invalid(reason=reason)
