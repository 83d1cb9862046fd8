"""Deployables: the schedulable units of a device (one provider each)."""

import dataclasses
import datetime

from cyborg.db import api as db_api
from cyborg.objects import base

SORT_KEYS = ('id', 'uuid', 'name', 'num_accelerators', 'created_at',
             'updated_at')


@dataclasses.dataclass
class Deployable:
    id: int
    uuid: str
    parent_id: int
    root_id: int
    name: str
    num_accelerators: int
    device_id: int
    driver_name: str
    rp_uuid: str
    bitstream_id: str
    created_at: datetime.datetime
    updated_at: datetime.datetime
    attributes: list = dataclasses.field(default_factory=list)

    @classmethod
    def _with_attributes(cls, context, rows):
        found = db_api.deployable_attributes_read(
            context, [row.id for row in rows])
        return [base.from_row(cls, row, attributes=found.get(row.id, []))
                for row in rows]

    @classmethod
    def get(cls, context, uuid):
        return cls._one(context, db_api.deployable_read(context, uuid=uuid))

    @classmethod
    def get_by_id(cls, context, id):
        return cls._one(context, db_api.deployable_read(context, id=id))

    @classmethod
    def _one(cls, context, row):
        if row is None:
            return None
        return cls._with_attributes(context, [row])[0]

    @classmethod
    def list(cls, context, name=None, limit=None, marker=None,
             sort_key='id', sort_dir='asc'):
        """A page of deployables; None when ``marker`` names none."""
        rows = db_api.deployable_read_all(context, name, limit, marker,
                                          sort_key, sort_dir)
        if rows is None:
            return None
        return cls._with_attributes(context, rows)
