"""Devices: one physical accelerator card (or function) on a host."""

import dataclasses
import datetime

from cyborg.db.api import devices as device_db
from cyborg.objects import base


@dataclasses.dataclass
class Device:
    id: int
    uuid: str
    type: str
    vendor: str
    model: str
    std_board_info: str
    vendor_board_info: str
    hostname: str
    status: str
    created_at: datetime.datetime
    updated_at: datetime.datetime
    health: str = None
    health_reason: str = None
    health_updated_at: datetime.datetime = None

    @classmethod
    def get(cls, context, uuid):
        return base.one(cls, device_db.get(context, uuid))

    @classmethod
    def list(cls, context, filters=None, limit=None, marker=None):
        """Devices whose type, vendor, hostname, health equal
        ``filters``: at most ``limit`` after the device whose uuid is
        ``marker``; None when no device has that uuid."""
        rows = device_db.get_all(context, filters, limit, marker)
        return None if rows is None else base.many(cls, rows)
