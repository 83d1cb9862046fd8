"""Attributes: key/value facts about a deployable (rc, traits, ...)."""

import dataclasses
import datetime

from cyborg.db import api as db_api
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
        return base.one(cls, db_api.attribute_read(context, uuid))

    @classmethod
    def list(cls, context, deployable_id=None, key=None):
        return base.many(cls, db_api.attribute_read_all(
            context, deployable_id, key))
