"""What the object classes share: building a data class from a DB row."""

import dataclasses


def from_row(cls, row, **extra):
    """An instance of dataclass ``cls`` from a model instance or Row."""
    values = {}
    mapping = getattr(row, '_mapping', None)
    for field in dataclasses.fields(cls):
        if field.name in extra:
            values[field.name] = extra[field.name]
        elif mapping is not None and field.name in mapping:
            values[field.name] = mapping[field.name]
        else:
            values[field.name] = getattr(row, field.name, None)
    return cls(**values)


def to_dict(obj):
    """JSON-able dict of a data class (for RPC)."""
    return dataclasses.asdict(obj)
