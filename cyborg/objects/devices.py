"""Devices: one physical accelerator card (or function) on a host."""

import dataclasses
import datetime

from cyborg.db import api as db_api
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

    @classmethod
    def get(cls, context, uuid):
        row = db_api.device_read(context, uuid)
        return None if row is None else base.from_row(cls, row)

    @classmethod
    def list(cls, context, filters=None):
        """Devices whose type, vendor, hostname equal ``filters``."""
        return [base.from_row(cls, row)
                for row in db_api.device_read_all(context, filters)]
