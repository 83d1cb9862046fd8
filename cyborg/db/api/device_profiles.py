"""Device profiles: read by the API and by ARQ creation, written by
cyborg.conductor.device_profiles."""

import sqlalchemy as sa

from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer


@reader
def get(context, uuid=None, name=None):
    """One device profile (model instance) by uuid or name, or None."""
    return _sql.one(context, models.DeviceProfile, uuid=uuid, name=name)


@reader
def get_all(context, names=None):
    """Device profiles, optionally only those with one of ``names``."""
    p = models.DeviceProfile
    if not _sql.matchable(names):
        return []
    query = sa.select(p).order_by(p.id)
    if names is not None:
        query = query.where(p.name.in_(list(names)))
    return context.session.scalars(query).all()


@reader
def get_groups(context, uuid):
    """(id, name, profile_json) of a device profile, or None: what making
    its ARQs needs, without loading the whole row."""
    p = models.DeviceProfile
    return context.session.execute(
        sa.select(p.id, p.name, p.profile_json).where(p.uuid == uuid)).first()


@writer
def insert(context, values):
    """Insert a profile row; the unique keys reject duplicates."""
    row = models.DeviceProfile(**values)
    context.session.add(row)
    context.session.flush()
    return row


@writer
def delete_many(context, uuids):
    """Delete the profiles with ``uuids``; returns how many went."""
    p = models.DeviceProfile
    return context.session.execute(
        sa.delete(p).where(p.uuid.in_(list(uuids)))
        .execution_options(synchronize_session=False)).rowcount


@reader
def in_use(context, uuids):
    """Uuids of the profiles among ``uuids`` that ARQs use."""
    a, p = models.ExtARQ, models.DeviceProfile
    return set(context.session.scalars(
        sa.select(p.uuid).distinct().join(a, a.device_profile_id == p.id)
        .where(p.uuid.in_(list(uuids)))))
