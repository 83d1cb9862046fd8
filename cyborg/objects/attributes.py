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
    def list(cls, context, deployable_id=None, key=None):
        return base.many(cls, attribute_db.get_all(
            context, deployable_id, key))
