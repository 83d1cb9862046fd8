"""Database access: small reader/writer functions on one enginefacade.

Every function takes a RequestContext first; functions decorated as
``reader``/``writer`` nest into the caller's transaction, so a conductor
step made of several of them commits once.  Rows come back as model
instances or plain dicts; this module knows nothing of ``cyborg.objects``.

Sections: engine set-up; inventory (conductor reports); device profiles and
ARQs; Nova events.  Keep each function short and its query indexed.
"""

from oslo_db.sqlalchemy import enginefacade
import sqlalchemy as sa

from cyborg.db import models  # noqa: F401  (used by the sections below)

context_manager = enginefacade.transaction_context()
reader = context_manager.reader
writer = context_manager.writer


def configure(conf):
    """Point the enginefacade at ``conf.database`` (call once per process)."""
    context_manager.configure(**dict(conf.database.items()))


def get_engine():
    return context_manager.writer.get_engine()


def patch_engine(engine):
    """Use ``engine`` (tests); returns a callable that undoes it."""
    if not context_manager._factory._started:
        # patch_engine starts the factory; make sure it never opens the
        # configured (production) database while doing so.
        context_manager.configure(connection='sqlite://')
    return context_manager.patch_engine(engine)


# == reads ===================================================================
# What the API reads (owned by the API).  Each filter is on an indexed or
# unique column; lists are one query (plus one for their children), never a
# Python-side scan.  Rows come back as SQLAlchemy Row objects.

def _arq_query():
    a, p, h = models.ExtARQ, models.DeviceProfile, models.AttachHandle
    return (sa.select(a, p.name.label('device_profile_name'),
                      h.uuid.label('attach_handle_uuid'),
                      h.attach_type.label('attach_handle_type'),
                      h.attach_info.label('attach_handle_info'))
            .join(p, p.id == a.device_profile_id)
            .outerjoin(h, h.id == a.attach_handle_id))


@reader
def arq_read(context, uuid, project_id=None):
    """One ARQ row with its profile name and handle, or None.

    ``project_id`` restricts it to that project's ARQs.
    """
    a = models.ExtARQ
    query = _arq_query().where(a.uuid == uuid)
    if project_id is not None:
        query = query.where(a.project_id == project_id)
    return context.session.execute(query).first()


@reader
def arq_read_all(context, project_id=None, instance_uuid=None, uuids=None):
    """ARQ rows, optionally of one project, one instance, these uuids."""
    a = models.ExtARQ
    query = _arq_query().order_by(a.id)
    if uuids is not None:
        query = query.where(a.uuid.in_(list(uuids)))
    if project_id is not None:
        query = query.where(a.project_id == project_id)
    if instance_uuid is not None:
        query = query.where(a.instance_uuid == instance_uuid)
    return context.session.execute(query).all()


@reader
def device_profile_read(context, uuid=None, name=None):
    """One device profile by uuid or name, or None."""
    p = models.DeviceProfile
    query = sa.select(p)
    if uuid is not None:
        query = query.where(p.uuid == uuid)
    if name is not None:
        query = query.where(p.name == name)
    return context.session.scalars(query).first()


@reader
def device_profile_read_all(context, names=None):
    """Device profiles, optionally only those with one of ``names``."""
    p = models.DeviceProfile
    query = sa.select(p).order_by(p.id)
    if names is not None:
        query = query.where(p.name.in_(list(names)))
    return context.session.scalars(query).all()


@reader
def device_read(context, uuid):
    d = models.Device
    return context.session.scalars(sa.select(d).where(d.uuid == uuid)).first()


@reader
def device_read_all(context, filters=None):
    """Devices whose columns equal ``filters`` (type, vendor, hostname)."""
    d = models.Device
    query = sa.select(d).order_by(d.id)
    for column, value in (filters or {}).items():
        query = query.where(getattr(d, column) == value)
    return context.session.scalars(query).all()


@reader
def deployable_read(context, uuid=None, id=None):
    """One deployable by uuid or integer id, or None."""
    d = models.Deployable
    query = sa.select(d)
    if uuid is not None:
        query = query.where(d.uuid == uuid)
    if id is not None:
        query = query.where(d.id == id)
    return context.session.scalars(query).first()


@reader
def deployable_read_all(context, name=None, limit=None, marker=None,
                        sort_key='id', sort_dir='asc'):
    """A page of deployables, ordered by ``sort_key`` then id.

    ``marker`` is the uuid of the last deployable of the previous page.
    """
    d = models.Deployable
    column = getattr(d, sort_key)
    order = sa.desc if sort_dir == 'desc' else sa.asc
    query = sa.select(d).order_by(order(column), order(d.id))
    if name is not None:
        query = query.where(d.name == name)
    if marker is not None:
        last = context.session.execute(
            sa.select(column.label('key'), d.id).where(d.uuid == marker)
        ).first()
        if last is None:
            return None
        after = (sa.tuple_(column, d.id) > sa.tuple_(last.key, last.id)
                 if sort_dir != 'desc' else
                 sa.tuple_(column, d.id) < sa.tuple_(last.key, last.id))
        query = query.where(after)
    if limit is not None:
        query = query.limit(limit)
    return context.session.scalars(query).all()


@reader
def deployable_attributes_read(context, deployable_ids):
    """{deployable id: [(key, value), ...]} for these deployables."""
    a = models.Attribute
    rows = context.session.execute(
        sa.select(a.deployable_id, a.key, a.value)
        .where(a.deployable_id.in_(list(deployable_ids))).order_by(a.id))
    found = {}
    for row in rows:
        found.setdefault(row.deployable_id, []).append((row.key, row.value))
    return found


@reader
def attribute_read(context, uuid):
    a = models.Attribute
    return context.session.scalars(sa.select(a).where(a.uuid == uuid)).first()


@reader
def attribute_read_all(context, deployable_id=None, key=None):
    a = models.Attribute
    query = sa.select(a).order_by(a.id)
    if deployable_id is not None:
        query = query.where(a.deployable_id == deployable_id)
    if key is not None:
        query = query.where(a.key == key)
    return context.session.scalars(query).all()


# == device profiles / attributes writes =====================================
# Owned by cyborg.conductor.device_profiles and cyborg.conductor.attributes.


@writer
def device_profile_insert(context, values):
    """Insert a profile row; the unique keys reject duplicates."""
    row = models.DeviceProfile(**values)
    context.session.add(row)
    context.session.flush()
    return row


@writer
def device_profile_delete_many(context, uuids):
    """Delete the profiles with ``uuids``; returns how many went."""
    p = models.DeviceProfile
    return context.session.execute(
        sa.delete(p).where(p.uuid.in_(list(uuids)))
        .execution_options(synchronize_session=False)).rowcount


@reader
def device_profile_users(context, uuids):
    """Uuids of the profiles among ``uuids`` that ARQs use."""
    a, p = models.ExtARQ, models.DeviceProfile
    return set(context.session.scalars(
        sa.select(p.uuid).distinct().join(a, a.device_profile_id == p.id)
        .where(p.uuid.in_(list(uuids)))))


@writer
def attribute_insert(context, values):
    row = models.Attribute(**values)
    context.session.add(row)
    context.session.flush()
    return row


@writer
def attribute_delete(context, uuid):
    """Delete one attribute; returns how many went (0 or 1)."""
    a = models.Attribute
    return context.session.execute(
        sa.delete(a).where(a.uuid == uuid)
        .execution_options(synchronize_session=False)).rowcount
