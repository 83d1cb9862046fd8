"""Remote (fabric-attached) accelerator pools and their handles, as the
API reads them."""

import dataclasses
import datetime
import json

from cyborg.db.api import remote_pools as pool_db
from cyborg.objects import base


@dataclasses.dataclass
class RemotePoolHandle:
    id: int
    uuid: str
    pool_id: int
    fabric_address: str
    in_use: bool
    hostname: str


@dataclasses.dataclass
class RemotePool:
    id: int
    uuid: str
    name: str
    description: str
    resource_class: str
    traits: str
    aggregates: str
    fabric_driver: str
    rp_uuid: str
    state: str
    placement_synced: bool
    created_at: datetime.datetime
    updated_at: datetime.datetime
    handles: list = dataclasses.field(default_factory=list)

    @property
    def trait_list(self):
        return json.loads(self.traits or '[]')

    @property
    def aggregate_list(self):
        return json.loads(self.aggregates or '[]')

    @classmethod
    def get_by_uuid(cls, context, uuid):
        return cls._with_handles(context,
                                 [pool_db.get(context, uuid=uuid)])

    @classmethod
    def get_by_name(cls, context, name):
        return cls._with_handles(context,
                                 [pool_db.get(context, name=name)])

    @classmethod
    def list(cls, context, name=None, limit=None, marker=None):
        """Pools (optionally only the one named) with their handles: at
        most ``limit`` after the pool whose uuid is ``marker``; None when
        no pool has that uuid."""
        rows = pool_db.get_all(context, name=name, limit=limit,
                               marker=marker)
        if rows is None:
            return None
        pools = base.many(cls, rows)
        handles = base.many(RemotePoolHandle, pool_db.handles(
            context, [p.id for p in pools])) if pools else []
        for pool in pools:
            pool.handles = [h for h in handles if h.pool_id == pool.id]
        return pools

    @classmethod
    def _with_handles(cls, context, rows):
        if rows[0] is None:
            return None
        pool = base.from_row(cls, rows[0], handles=[])
        pool.handles = base.many(RemotePoolHandle,
                                 pool_db.handles(context, [pool.id]))
        return pool
