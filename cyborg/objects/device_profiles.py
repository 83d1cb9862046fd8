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
        return base.one(cls, db_api.device_profile_read(context, uuid=uuid))

    @classmethod
    def get_by_name(cls, context, name):
        return base.one(cls, db_api.device_profile_read(context, name=name))

    @classmethod
    def list(cls, context, names=None):
        return base.many(cls, db_api.device_profile_read_all(context, names))
