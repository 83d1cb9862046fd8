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
        row = db_api.attribute_read(context, uuid)
        return None if row is None else base.from_row(cls, row)

    @classmethod
    def list(cls, context, deployable_id=None, key=None):
        return [base.from_row(cls, row) for row in
                db_api.attribute_read_all(context, deployable_id, key)]
