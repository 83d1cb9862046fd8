"""What the object classes share: building a data class from a DB row."""

import dataclasses
import functools


@functools.lru_cache(maxsize=None)
def _field_names(cls):
    return tuple(f.name for f in dataclasses.fields(cls))


def from_row(cls, row, **extra):
    """An instance of dataclass ``cls`` from a model instance or Row;
    ``extra`` gives (or overrides) some fields."""
    mapping = getattr(row, '_mapping', None)
    values = {}
    for name in _field_names(cls):
        if name in extra:
            values[name] = extra[name]
        elif mapping is not None:
            values[name] = mapping.get(name)
        else:
            values[name] = getattr(row, name, None)
    return cls(**values)


def one(cls, row):
    """``from_row`` of a row that may be None (not found)."""
    return None if row is None else from_row(cls, row)


def many(cls, rows):
    return [from_row(cls, row) for row in rows]


def to_dict(obj):
    """JSON-able dict of a data class (for RPC): its fields, one level.

    The object classes' fields hold plain values (strings, numbers,
    times, dicts and lists of those; a test keeps it so), so the dict is
    made field by field rather than by ``dataclasses.asdict``, which
    copies every container deeply (some 20 us for an ARQ, which every
    create returns, against about 1).  The containers are the object's
    own, not copies: the dict is for sending."""
    return {name: getattr(obj, name) for name in _field_names(type(obj))}
