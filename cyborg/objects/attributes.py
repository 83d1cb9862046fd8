"""Attributes: key/value facts about a deployable (rc, traits, ...)."""

import dataclasses
import datetime

from cyborg.db.api import attributes as attribute_db
from cyborg.objects import base


@dataclasses.dataclass
class Attribute:
    id: int
    uuid: str
    deployable_id: int
    key: str
    value: str
    created_at: datetime.datetime
    updated_at: datetime.datetime

    @classmethod
    def get(cls, context, uuid):
        return base.one(cls, attribute_db.get(context, uuid))

    @classmethod
    def list(cls, context, deployable_id=None, key=None, limit=None,
             marker=None):
        """Attributes (of a deployable, with a key): at most ``limit``
        after the one whose uuid is ``marker``; None when none has it."""
        rows = attribute_db.get_all(context, deployable_id, key, limit,
                                    marker)
        return None if rows is None else base.many(cls, rows)
