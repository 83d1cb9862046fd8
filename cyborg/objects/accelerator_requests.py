"""Accelerator requests (ARQs), as read with their profile and handle."""

import dataclasses
import datetime
import json

from cyborg.common import exception
from cyborg.common import states
from cyborg.db.api import arqs as arq_db
from cyborg.objects import base


def check_may_delete(context, arqs):
    """403 unless the caller may delete ``arqs`` (ARQs or rows, with
    ``state`` and ``consumer_id``): one that holds a device (bound, or
    being bound or unbound) goes only with Nova's service token, or, when
    it was allocated standalone, with the rights that see every project
    (those that allocated it)."""
    holding = [a for a in arqs if a.state in states.ARQ_HOLDING]
    if holding and not context.is_service and not (
            context.sees_every_project
            and all(a.consumer_id for a in holding)):
        raise exception.ServiceTokenRequired(
            action='Deleting a bound accelerator request')


@dataclasses.dataclass
class AcceleratorRequest:
    uuid: str
    state: str
    device_profile_name: str
    device_profile_group_id: int
    project_id: str
    hostname: str
    device_rp_uuid: str
    instance_uuid: str
    attach_handle_type: str
    attach_handle_uuid: str
    attach_handle_info: dict
    created_at: datetime.datetime
    updated_at: datetime.datetime
    # The health of the deployable the ARQ is bound to (the worse of its
    # own and its device's) and its reason; None while unbound.
    device_health: str = None
    device_health_reason: str = None
    # Who holds an ARQ allocated without Nova (microversion 2.6).
    consumer_id: str = None
    consumer_type: str = None

    @classmethod
    def _from_row(cls, row):
        # A handle's info is a JSON text column; a bad one must not make
        # the whole list fail (doc/source/contract.rst, "A refused request
        # writes nothing").
        info = {}
        if row.attach_handle_info:
            try:
                info = json.loads(row.attach_handle_info)
            except ValueError:
                pass
        return base.from_row(cls, row,
                             attach_handle_type=row.attach_handle_type or '',
                             attach_handle_uuid=row.attach_handle_uuid,
                             attach_handle_info=info)

    @classmethod
    def from_dict(cls, values):
        """An ARQ from ``base.to_dict`` of one, as it arrives over RPC (the
        timestamps as ISO strings): what the conductor returns is rendered
        without reading it back."""
        values = dict(values)
        for name in ('created_at', 'updated_at'):
            if isinstance(values.get(name), str):
                values[name] = datetime.datetime.fromisoformat(values[name])
        return cls(**values)

    @classmethod
    def get(cls, context, uuid, project_id=None):
        """The ARQ, or None (also when it belongs to another project)."""
        row = arq_db.get(context, uuid, project_id)
        return None if row is None else cls._from_row(row)

    @classmethod
    def list(cls, context, project_id=None, instance_uuid=None, uuids=None,
             limit=None, marker=None, states=None):
        """The ARQs (of a project, an instance, these uuids, in one of
        these states): at most ``limit`` after the one whose uuid is
        ``marker``; None when that names none (of the project)."""
        rows = arq_db.get_all(context, project_id, instance_uuid, uuids,
                              limit, marker, states)
        return None if rows is None else [cls._from_row(r) for r in rows]
