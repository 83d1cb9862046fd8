"""Device profiles: named lists of groups an ARQ request is made from."""

import dataclasses
import datetime
import json

from cyborg.db.api import device_profiles as profile_db
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
        return base.one(cls, profile_db.get(context, uuid=uuid))

    @classmethod
    def get_by_name(cls, context, name):
        return base.one(cls, profile_db.get(context, name=name))

    @classmethod
    def list(cls, context, names=None):
        return base.many(cls, profile_db.get_all(context, names))
