"""Device profiles: named lists of groups an ARQ request is made from."""

import dataclasses
import datetime
import json

from cyborg.db import api as db_api
from cyborg.objects import base


@dataclasses.dataclass
class DeviceProfile:
    id: int
    uuid: str
    name: str
    description: str
    profile_json: str
    created_at: datetime.datetime
    updated_at: datetime.datetime

    @property
    def groups(self):
        """The groups: a list of {str: str} dicts."""
        return json.loads(self.profile_json or '[]')

    @classmethod
    def get_by_uuid(cls, context, uuid):
        row = db_api.device_profile_read(context, uuid=uuid)
        return None if row is None else base.from_row(cls, row)

    @classmethod
    def get_by_name(cls, context, name):
        row = db_api.device_profile_read(context, name=name)
        return None if row is None else base.from_row(cls, row)

    @classmethod
    def list(cls, context, names=None):
        return [base.from_row(cls, row)
                for row in db_api.device_profile_read_all(context, names)]
