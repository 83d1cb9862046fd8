"""Deployables: the schedulable units of a device (one provider each)."""

import dataclasses
import datetime

from cyborg.common import states
from cyborg.db.api import deployables as deployable_db
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
    # Effective health: the worse of the deployable's own and its
    # device's, with the reason and time of whichever is worse.
    health: str = states.HEALTHY
    health_reason: str = None
    health_updated_at: datetime.datetime = None
    # Set while a conductor programs it: when that must have ended.
    programming_until: datetime.datetime = None

    @classmethod
    def _from_rows(cls, context, rows):
        """Objects from ``deployable_db.get_with_device`` or ``get_page``
        rows (a deployable and its device's health), with their
        attributes."""
        found = deployable_db.attribute_lists(
            context, [row.id for row in rows])
        return [base.from_row(cls, row, attributes=found.get(row.id, []),
                              **effective_health(row))
                for row in rows]

    @classmethod
    def get(cls, context, uuid):
        return cls._one(context, deployable_db.get_with_device(
            context, uuid=uuid))

    @classmethod
    def get_by_id(cls, context, id):
        return cls._one(context, deployable_db.get_with_device(
            context, id=id))

    @classmethod
    def _one(cls, context, row):
        if row is None:
            return None
        return cls._from_rows(context, [row])[0]

    @classmethod
    def list(cls, context, name=None, limit=None, marker=None,
             sort_key='id', sort_dir='asc'):
        """A page of deployables; None when ``marker`` names none."""
        rows = deployable_db.get_page(context, name, limit, marker, sort_key,
                                      sort_dir)
        if rows is None:
            return None
        return cls._from_rows(context, rows)


def effective_health(row):
    """{health, health_reason, health_updated_at} of a deployable row:
    its own, unless its device's health is strictly worse
    (``states.worst``), then the device's.  A word outside the vocabulary
    ranks as healthy, as in the ARQ query: a bad row must not fail a
    list."""
    mine = _known(row.health)
    device = _known(row.device_health)
    if device != mine and states.worst(mine, device) == device:
        return {'health': row.device_health,
                'health_reason': row.device_health_reason,
                'health_updated_at': row.device_health_updated_at}
    return {'health': row.health, 'health_reason': row.health_reason,
            'health_updated_at': row.health_updated_at}


def _known(health):
    return health if health in states.HEALTH_STATES else states.HEALTHY
