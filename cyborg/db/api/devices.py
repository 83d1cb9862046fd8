"""Devices, one at a time: what the API reads, the status an operator
sets (cyborg.conductor.device_status) and the count the conductor's
metrics collector reads at scrape time.  A host's devices as a whole are
read and written by its reports (``inventory``)."""

import sqlalchemy as sa

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer


@reader
def get(context, uuid):
    """One device (a Row of its columns), or None."""
    return _sql.one(context, models.Device, uuid=uuid)


@reader
def get_all(context, filters=None, limit=None, marker=None):
    """Devices whose columns equal ``filters`` (type, vendor, hostname,
    health), by id; a type no device can have matches nothing.  With
    ``limit`` and ``marker`` (a device's uuid): at most ``limit`` of them
    after that device; None when no device has that uuid."""
    filters = dict(filters or {})
    d = models.Device
    if filters.get('type') not in (None,) + models.DEVICE_TYPES:
        # Not a query: PostgreSQL rejects a label its enum does not know.
        # Nothing matches; an unknown marker is still unknown.
        if marker is not None and _sql.marker_id(context, d.id, d.uuid,
                                                 marker) is None:
            return None
        return []
    return _sql.every(context, d, limit, marker, **filters)


@writer
def set_status(context, device_uuid, status):
    """Set a device's status; returns its row (dict) or None if unknown."""
    d = models.Device.__table__
    context.session.execute(sa.update(d).where(d.c.uuid == device_uuid)
                            .values(status=status))
    row = context.session.execute(
        sa.select(d).where(d.c.uuid == device_uuid)).mappings().first()
    return dict(row) if row else None


@reader
def lifecycle_target(context, device_uuid):
    """A device's row (dict) with its control path (cpid_type, cpid_info)
    and 'deployables': [{uuid, name, rp_uuid}], or None if unknown."""
    d, c = models.Device.__table__, models.ControlpathID.__table__
    dep = models.Deployable.__table__
    row = _sql.connection(context).execute(
        sa.select(d, c.c.cpid_type, c.c.cpid_info)
        .outerjoin(c, c.c.device_id == d.c.id)
        .where(d.c.uuid == device_uuid)).mappings().first()
    if row is None:
        return None
    found = dict(row)
    found['deployables'] = _sql.rows(_sql.connection(context).execute(
        sa.select(dep.c.uuid, dep.c.name, dep.c.rp_uuid)
        .where(dep.c.device_id == found['id']).order_by(dep.c.id)))
    return found


@reader
def count_by_health(context):
    """``({health state: number of devices}, {health state: number of
    them in maintenance})`` for the states that have any (one GROUP BY).
    A device in maintenance is out of the schedule by an operator's
    choice: what happens to it meanwhile (a card pulled for repair) is
    counted apart."""
    dev = models.Device
    devices, maintained = {}, {}
    for health, status, count in _sql.connection(context).execute(
            sa.select(dev.health, dev.status, sa.func.count())
            .group_by(dev.health, dev.status)):
        devices[health] = devices.get(health, 0) + count
        if status == states.MAINTAINING:
            maintained[health] = maintained.get(health, 0) + count
    return devices, maintained
