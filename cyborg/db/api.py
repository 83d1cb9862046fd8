"""Database access: small reader/writer functions on one enginefacade.

Every function takes a RequestContext first; functions decorated as
``reader``/``writer`` nest into the caller's transaction, so a conductor
step made of several of them commits once.  Rows come back as model
instances or plain dicts; this module knows nothing of ``cyborg.objects``.

Sections: engine set-up; inventory (conductor reports); health (the
conductor's health state machine); device profiles and ARQs; Nova events.
Keep each function short and its query indexed.
"""

import sqlalchemy as sa
from oslo_db.sqlalchemy import enginefacade
from oslo_utils import timeutils

from cyborg.common import states
from cyborg.db import models  # noqa: F401  (used by the sections below)

context_manager = enginefacade.transaction_context()
reader = context_manager.reader
writer = context_manager.writer


def configure(conf, wait_for_database=True):
    """Point the enginefacade at ``conf.database`` (call once per process).

    The engine starts on first use and, by default, waits for the database
    as ``[database]max_retries`` and ``retry_interval`` say (100 s with
    oslo.db's defaults).  A process serving requests passes
    ``wait_for_database=False``: a request made while the database is away
    answers 503 at once, and the next one connects afresh.
    """
    options = dict(conf.database.items())
    if not wait_for_database:
        options['max_retries'] = 0
    context_manager.configure(**options)


def get_engine():
    return context_manager.writer.get_engine()


def patch_engine(engine):
    """Use ``engine`` (tests); returns a callable that undoes it."""
    if not context_manager._factory._started:
        # patch_engine starts the factory; make sure it never opens the
        # configured (production) database while doing so.
        context_manager.configure(connection='sqlite://')
    return context_manager.patch_engine(engine)


# == inventory ===============================================================
# Owned by the conductor's report handling (cyborg.conductor.inventory_apply,
# placement_sync, device_status).  A host's rows are read with one query per
# table and written with one executemany per table and kind of change, so
# the cost of a report does not grow with round trips per device.  Rows
# travel as plain dicts of columns.

_INVENTORY_MODELS = {'devices': models.Device,
                     'controlpath_ids': models.ControlpathID,
                     'deployables': models.Deployable,
                     'attributes': models.Attribute,
                     'attach_handles': models.AttachHandle}


def _rows(result):
    return [dict(row) for row in result.mappings()]


@writer
def inventory_host_touch(context, hostname, digest):
    """Record an unchanged report in one UPDATE.  True when the host is
    known with this digest and in sync with Placement."""
    h = models.Host.__table__
    result = context.session.execute(
        sa.update(h).where(h.c.hostname == hostname,
                           h.c.report_digest == digest,
                           h.c.placement_synced.is_(True))
        .values(last_report_at=timeutils.utcnow()))
    return result.rowcount == 1


@writer
def inventory_host_lock(context, hostname):
    """The host's row (dict), locked until the transaction ends; inserted
    when new (a racing insert raises DBDuplicateEntry: retry)."""
    h = models.Host.__table__
    query = sa.select(h).where(h.c.hostname == hostname).with_for_update()
    row = context.session.execute(query).mappings().first()
    if row is None:
        context.session.execute(sa.insert(h).values(
            hostname=hostname, placement_synced=False,
            created_at=timeutils.utcnow()))
        row = context.session.execute(query).mappings().first()
    return dict(row)


@reader
def inventory_host_get(context, hostname):
    h = models.Host.__table__
    row = context.session.execute(
        sa.select(h).where(h.c.hostname == hostname)).mappings().first()
    return dict(row) if row else None


@reader
def inventory_hosts(context):
    """[{hostname, compute_rp_uuid, placement_synced, report_digest}]."""
    h = models.Host.__table__
    return _rows(context.session.execute(
        sa.select(h.c.hostname, h.c.compute_rp_uuid, h.c.placement_synced,
                  h.c.report_digest).order_by(h.c.hostname)))


@writer
def inventory_host_update(context, hostname, digest=None, **values):
    """Set host columns; with ``digest``, only if it is still the stored
    one (a later report wins).  True if the row was updated."""
    h = models.Host.__table__
    query = sa.update(h).where(h.c.hostname == hostname)
    if digest is not None:
        query = query.where(h.c.report_digest == digest)
    return context.session.execute(query.values(**values)).rowcount == 1


@reader
def inventory_load(context, hostname, device_uuids=None):
    """The stored rows of a host's devices (all, or these uuids) as
    {table: [row dicts]}: five queries whatever the number of devices."""
    s = context.session
    d = models.Device.__table__
    query = sa.select(d).where(d.c.hostname == hostname)
    if device_uuids is not None:
        query = query.where(d.c.uuid.in_(list(device_uuids)))
    found = {'devices': _rows(s.execute(query))}
    device_ids = [row['id'] for row in found['devices']]
    for table, column in (('controlpath_ids', 'device_id'),
                          ('deployables', 'device_id')):
        t = _INVENTORY_MODELS[table].__table__
        found[table] = _rows(s.execute(
            sa.select(t).where(t.c[column].in_(device_ids))))
    deployable_ids = [row['id'] for row in found['deployables']]
    for table in ('attributes', 'attach_handles'):
        t = _INVENTORY_MODELS[table].__table__
        found[table] = _rows(s.execute(
            sa.select(t).where(t.c.deployable_id.in_(deployable_ids))))
    return found


@writer
def inventory_write(context, add, update, delete):
    """Apply a plan's rows (see cyborg.conductor.inventory_plan.Plan):
    deletes, then updates, then inserts parent tables first."""
    s = context.session
    for table in ('attach_handles', 'attributes'):
        if delete.get(table):
            t = _INVENTORY_MODELS[table].__table__
            s.execute(sa.delete(t).where(t.c.uuid.in_(delete[table])))
    _delete_with_children(s, _ids_of(s, 'deployables', delete),
                          _ids_of(s, 'devices', delete))
    for table, rows in update.items():
        _update_by_uuid(s, _INVENTORY_MODELS[table].__table__, rows)
    ids = {}
    for table, parents in (('devices', ()),
                           ('controlpath_ids', ('device',)),
                           ('deployables', ('device',)),
                           ('attributes', ('deployable',)),
                           ('attach_handles', ('deployable',
                                               'controlpath'))):
        rows = add.get(table) or []
        if not rows:
            continue
        for parent in parents:
            _resolve_ids(s, ids, parent, rows)
        now = timeutils.utcnow()
        s.execute(sa.insert(_INVENTORY_MODELS[table].__table__),
                  [_without_refs(r, parents, ids, now) for r in rows])


def _ids_of(session, table, delete):
    if not delete.get(table):
        return []
    t = _INVENTORY_MODELS[table].__table__
    return list(session.scalars(sa.select(t.c.id)
                                .where(t.c.uuid.in_(delete[table]))))


def _delete_with_children(session, deployable_ids, device_ids):
    """Delete deployables and devices with every row hanging off them,
    without relying on ON DELETE CASCADE (SQLite enforces foreign keys only
    when asked to)."""
    dep = models.Deployable.__table__
    deployable_ids = set(deployable_ids)
    if device_ids:
        deployable_ids.update(session.scalars(
            sa.select(dep.c.id).where(dep.c.device_id.in_(device_ids))))
    if deployable_ids:
        for model in (models.AttachHandle, models.Attribute):
            t = model.__table__
            session.execute(sa.delete(t).where(
                t.c.deployable_id.in_(deployable_ids)))
        session.execute(sa.delete(dep).where(dep.c.id.in_(deployable_ids)))
    if device_ids:
        cp = models.ControlpathID.__table__
        session.execute(sa.delete(cp).where(cp.c.device_id.in_(device_ids)))
        d = models.Device.__table__
        session.execute(sa.delete(d).where(d.c.id.in_(device_ids)))


_PARENT_TABLES = {'device': 'devices', 'deployable': 'deployables',
                  'controlpath': 'controlpath_ids'}
_PARENT_COLUMNS = {'device': 'device_id', 'deployable': 'deployable_id',
                   'controlpath': 'cpid_id'}


def _resolve_ids(session, ids, parent, rows):
    """Fill ``ids[parent]`` with {uuid: id} for the parents ``rows`` name."""
    known = ids.setdefault(parent, {})
    wanted = {r[parent + '_uuid'] for r in rows} - set(known)
    if wanted:
        t = _INVENTORY_MODELS[_PARENT_TABLES[parent]].__table__
        for row in session.execute(sa.select(t.c.uuid, t.c.id)
                                   .where(t.c.uuid.in_(wanted))):
            known[row.uuid] = row.id


def _without_refs(row, parents, ids, now):
    values = {k: v for k, v in row.items() if not k.endswith('_uuid')}
    values['uuid'] = row['uuid']
    if 'rp_uuid' in row:
        values['rp_uuid'] = row['rp_uuid']
    for parent in parents:
        values[_PARENT_COLUMNS[parent]] = ids[parent][row[parent + '_uuid']]
    values['created_at'] = now
    return values


def _update_by_uuid(session, table, rows):
    """One executemany UPDATE per set of changed columns."""
    by_columns = {}
    for row in rows:
        columns = tuple(sorted(k for k in row if k != 'uuid'))
        by_columns.setdefault(columns, []).append(row)
    for columns, group in by_columns.items():
        query = (sa.update(table)
                 .where(table.c.uuid == sa.bindparam('b_uuid'))
                 .values({c: sa.bindparam('b_' + c) for c in columns}))
        session.execute(query, [{'b_' + k: v for k, v in row.items()}
                                for row in group])


@reader
def inventory_host_providers(context, hostname):
    """What a host's provider tree is made from: its deployables (with
    their device's status) and their attributes, in two queries.

    Returns [{deployable columns... (its own health included),
    'device_status', 'device_uuid', 'device_health', 'attributes':
    {key: value}}]."""
    d, dep = models.Device.__table__, models.Deployable.__table__
    a = models.Attribute.__table__
    deployables = _rows(context.session.execute(
        sa.select(dep, d.c.status.label('device_status'),
                  d.c.uuid.label('device_uuid'),
                  d.c.health.label('device_health'))
        .join(d, d.c.id == dep.c.device_id)
        .where(d.c.hostname == hostname).order_by(dep.c.id)))
    attributes = {}
    for row in context.session.execute(
            sa.select(a.c.deployable_id, a.c.key, a.c.value)
            .where(a.c.deployable_id.in_([r['id'] for r in deployables]))):
        attributes.setdefault(row.deployable_id, {})[row.key] = row.value
    for row in deployables:
        row['attributes'] = attributes.get(row['id'], {})
    return deployables


@writer
def inventory_delete_gone(context, deployable_uuids):
    """Delete these deployables if still gone, and the devices left with
    no deployable; returns the uuids deleted."""
    s = context.session
    dep = models.Deployable.__table__
    rows = s.execute(sa.select(dep.c.id, dep.c.uuid, dep.c.device_id).where(
        dep.c.uuid.in_(list(deployable_uuids)), dep.c.gone.is_(True))).all()
    if not rows:
        return []
    ids = {r.id for r in rows}
    device_ids = {r.device_id for r in rows}
    still_used = set(s.scalars(sa.select(dep.c.device_id).where(
        dep.c.device_id.in_(device_ids), dep.c.id.not_in(ids))))
    _delete_with_children(s, ids, device_ids - still_used)
    return [r.uuid for r in rows]


@writer
def device_set_status(context, device_uuid, status):
    """Set a device's status; returns its row (dict) or None if unknown."""
    d = models.Device.__table__
    context.session.execute(sa.update(d).where(d.c.uuid == device_uuid)
                            .values(status=status))
    row = context.session.execute(
        sa.select(d).where(d.c.uuid == device_uuid)).mappings().first()
    return dict(row) if row else None


# == health ==================================================================
# Owned by the conductor's health state machine (cyborg.conductor.health) and
# device lifecycle (cyborg.conductor.device_status).  A host's health
# records are read in two queries; changes are guarded UPDATEs (WHERE the
# state is still the one read), so two conductors never both apply a step.

_HEALTH_COLUMNS = ('health', 'health_reason', 'health_updated_at',
                   'health_faults', 'health_flaps', 'health_due_at',
                   'health_readmitted_at')

def _health_columns(table):
    return [table.c[name] for name in _HEALTH_COLUMNS]


@writer
def health_host_lock(context, hostname):
    """Lock the host's row until the transaction ends (serialising health
    changes with the host's reports); False when the host is unknown."""
    h = models.Host.__table__
    return context.session.execute(
        sa.select(h.c.hostname).where(h.c.hostname == hostname)
        .with_for_update()).first() is not None


@reader
def health_host_records(context, hostname):
    """(devices, deployables) of a host as row dicts with their health
    columns; devices also carry status, type, vendor, model and their
    control path (cpid_type, cpid_info), deployables name, device_id,
    rp_uuid and gone.  Two queries whatever the number of devices."""
    d, c = models.Device.__table__, models.ControlpathID.__table__
    dep = models.Deployable.__table__
    devices = _rows(context.session.execute(
        sa.select(d.c.id, d.c.uuid, d.c.status, d.c.type, d.c.vendor,
                  d.c.model, c.c.cpid_type, c.c.cpid_info,
                  *_health_columns(d))
        .outerjoin(c, c.c.device_id == d.c.id)
        .where(d.c.hostname == hostname).order_by(d.c.id)))
    deployables = _rows(context.session.execute(
        sa.select(dep.c.id, dep.c.uuid, dep.c.name, dep.c.device_id,
                  dep.c.rp_uuid, dep.c.gone, *_health_columns(dep))
        .where(dep.c.device_id.in_([row['id'] for row in devices]))
        .order_by(dep.c.id)))
    return devices, deployables


@writer
def health_write(context, table_name, rows):
    """Write health changes: ``rows`` are {'uuid', 'old_health',
    'old_due_at', <changed health columns>} for table 'devices' or
    'deployables'.  Each row is updated only while its health and due
    time are still the old ones; returns how many rows were updated."""
    table = _INVENTORY_MODELS[table_name].__table__
    session = context.session
    by_columns = {}
    for row in rows:
        columns = tuple(sorted(k for k in row
                               if k not in ('uuid', 'old_health',
                                            'old_due_at')))
        by_columns.setdefault(columns, []).append(row)
    # psycopg2 cannot count the rows of an executemany: one by one there.
    one_by_one = not session.get_bind().dialect.supports_sane_multi_rowcount
    updated = 0
    for columns, group in by_columns.items():
        query = (sa.update(table)
                 .where(table.c.uuid == sa.bindparam('b_uuid'),
                        table.c.health == sa.bindparam('b_old_health'),
                        table.c.health_due_at.is_not_distinct_from(
                            sa.bindparam('b_old_due_at', type_=sa.DateTime)))
                 .values({c: sa.bindparam('b_' + c) for c in columns}))
        params = [{'b_' + k: v for k, v in row.items()} for row in group]
        for batch in ([p] for p in params) if one_by_one else [params]:
            updated += session.execute(query, batch).rowcount
    return updated


@reader
def health_due_hosts(context, now, limit=100):
    """Hosts with a device or deployable whose timed health step (suspect
    expiry, end of hold-down, probe timeout) is due at ``now``."""
    d, dep = models.Device.__table__, models.Deployable.__table__
    devices = (sa.select(d.c.hostname)
               .where(d.c.health.in_(states.TIMED),
                      d.c.health_due_at <= now))
    deployables = (sa.select(d.c.hostname)
                   .join(dep, dep.c.device_id == d.c.id)
                   .where(dep.c.health.in_(states.TIMED),
                          dep.c.health_due_at <= now))
    union = sa.union(devices, deployables).subquery()
    return list(context.session.scalars(
        sa.select(union.c.hostname).order_by(union.c.hostname)
        .limit(limit)))


@reader
def health_bound_arqs(context, deployable_ids):
    """ARQs binding or bound to these deployables: rows of deployable_id,
    uuid, state, instance_uuid, project_id."""
    a = models.ExtARQ.__table__
    return context.session.execute(
        sa.select(a.c.deployable_id, a.c.uuid, a.c.state, a.c.instance_uuid,
                  a.c.project_id)
        .where(a.c.deployable_id.in_(list(deployable_ids)),
               a.c.state.in_(('BindStarted', 'Bound')))
        .order_by(a.c.id)).all()


@reader
def device_lifecycle_target(context, device_uuid):
    """A device's row (dict) with its control path (cpid_type, cpid_info)
    and 'deployables': [{uuid, name, rp_uuid}], or None if unknown."""
    d, c = models.Device.__table__, models.ControlpathID.__table__
    dep = models.Deployable.__table__
    row = context.session.execute(
        sa.select(d, c.c.cpid_type, c.c.cpid_info)
        .outerjoin(c, c.c.device_id == d.c.id)
        .where(d.c.uuid == device_uuid)).mappings().first()
    if row is None:
        return None
    found = dict(row)
    found['deployables'] = _rows(context.session.execute(
        sa.select(dep.c.uuid, dep.c.name, dep.c.rp_uuid)
        .where(dep.c.device_id == found['id']).order_by(dep.c.id)))
    return found


# == ARQ writes ==============================================================
# Owned by the ARQ state machine (cyborg.conductor.arq_binding).  Every state
# change is a guarded UPDATE ... WHERE state IN (...) whose row count the
# caller checks: never read-then-write.

# Handles a bind races for before giving up on a deployable.
_HANDLE_TAKE_TRIES = 5
# Attempts of one transaction that lost a lock conflict.
_WRITE_TRIES = 8


def _lock_conflict(error):
    """A deadlock (MariaDB, PostgreSQL, via oslo.db) or SQLite's 'database
    is locked': two deferred transactions that read and then write."""
    from oslo_db import exception as db_exc
    if isinstance(error, db_exc.DBDeadlock):
        return True
    text = str(getattr(error, 'orig', error))
    return ('database is locked' in text or 'deadlock' in text.lower()
            or 'could not serialize' in text)


def _sqlite_write_lock(context):
    """On SQLite, take the write lock before the first read: a deferred
    transaction that reads and then writes fails at once ('database is
    locked', not even waiting) when another writer is ahead of it."""
    if context.session.get_bind().dialect.name == 'sqlite':
        context.session.execute(
            sa.text('UPDATE nova_events SET id = id WHERE 0'))


def write_retrying(context, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in one writer transaction of its own, run
    again (with a short random pause) when it loses a lock conflict.
    ``fn`` must be safe to repeat: a lost attempt is rolled back."""
    import random
    import time
    from oslo_db import exception as db_exc
    for attempt in range(1, _WRITE_TRIES + 1):
        try:
            with writer.using(context):
                _sqlite_write_lock(context)
                return fn(*args, **kwargs)
        except (db_exc.DBDeadlock, db_exc.DBError,
                sa.exc.OperationalError) as e:
            if attempt == _WRITE_TRIES or not _lock_conflict(e):
                raise
            time.sleep(random.uniform(0.002, 0.02) * attempt)


@reader
def arq_profile_get(context, profile_uuid):
    """(id, name, profile_json) of a device profile, or None."""
    p = models.DeviceProfile
    return context.session.execute(
        sa.select(p.id, p.name, p.profile_json).where(
            p.uuid == profile_uuid)).first()


@writer
def arq_create_many(context, values):
    """Insert ARQ rows, one dict of column values each."""
    context.session.execute(sa.insert(models.ExtARQ), values)


@reader
def arq_get_many(context, uuids=(), instance_uuid=None):
    """ARQ rows, by uuid or by instance (both indexed), with their
    profile's name and groups, their attach handle's type, uuid and info
    and their deployable's uuid (None when they hold none)."""
    a, p, h = models.ExtARQ, models.DeviceProfile, models.AttachHandle
    d = models.Deployable
    query = (sa.select(a, p.name.label('device_profile_name'),
                       p.profile_json, h.attach_type,
                       h.uuid.label('attach_handle_uuid'), h.attach_info,
                       d.uuid.label('deployable_uuid'))
             .join(p, p.id == a.device_profile_id)
             .outerjoin(h, h.id == a.attach_handle_id)
             .outerjoin(d, d.id == a.deployable_id))
    if instance_uuid is not None:
        query = query.where(a.instance_uuid == instance_uuid)
    else:
        query = query.where(a.uuid.in_(list(uuids)))
    return context.session.execute(query).all()


@reader
def arq_bind_targets(context, rp_uuids):
    """{rp_uuid: row} for the deployables providing ``rp_uuids``, each
    row carrying the deployable and its device's host and status."""
    d, dev = models.Deployable, models.Device
    query = (sa.select(d.id.label('deployable_id'),
                       d.uuid.label('deployable_uuid'), d.rp_uuid, d.gone,
                       d.driver_name, d.bitstream_id, d.device_id,
                       dev.hostname, dev.status)
             .join(dev, dev.id == d.device_id)
             .where(d.rp_uuid.in_(list(rp_uuids))))
    return {row.rp_uuid: row for row in context.session.execute(query)}


@reader
def arq_bound_elsewhere(context, instance_uuids, exclude_uuids):
    """ARQs binding or bound to these instances that are not in
    ``exclude_uuids``: (instance_uuid, uuid) rows."""
    a = models.ExtARQ
    query = (sa.select(a.instance_uuid, a.uuid)
             .where(a.instance_uuid.in_(list(instance_uuids)),
                    a.state.in_(('BindStarted', 'Bound')),
                    a.uuid.not_in(list(exclude_uuids))))
    return context.session.execute(query).all()


@writer
def arq_transition(context, uuid, to_state, from_states, values=None,
                   where=None):
    """Move one ARQ to ``to_state`` if it is in ``from_states`` (and the
    extra ``where`` column values hold); returns the row count (0 or 1)."""
    a = models.ExtARQ
    conditions = [a.uuid == uuid, a.state.in_(from_states)]
    conditions += [getattr(a, k) == v for k, v in (where or {}).items()]
    result = context.session.execute(
        sa.update(a).where(*conditions)
        .values(state=to_state, updated_at=models._now(), **(values or {}))
        .execution_options(synchronize_session=False))
    return result.rowcount


@reader
def arq_handle_state(context, uuid):
    """(state, attach_handle_id, instance_uuid) of one ARQ, or None."""
    a = models.ExtARQ
    return context.session.execute(
        sa.select(a.state, a.attach_handle_id, a.instance_uuid)
        .where(a.uuid == uuid)).first()


@writer
def arq_set_attach_handle(context, uuid, handle_id):
    """Record the handle on an ARQ still in BindStarted with none."""
    a = models.ExtARQ
    result = context.session.execute(
        sa.update(a).where(a.uuid == uuid, a.state == 'BindStarted',
                           a.attach_handle_id.is_(None))
        .values(attach_handle_id=handle_id, updated_at=models._now())
        .execution_options(synchronize_session=False))
    return result.rowcount


@writer
def attach_handle_take(context, deployable_id):
    """Mark one free handle of the deployable in use and return its row,
    or None when none is free.
    FOR UPDATE SKIP LOCKED lets concurrent binds on MariaDB/PostgreSQL
    pass each other's candidates; SQLite renders no lock clause (its
    writers are serialised), so the guarded UPDATE with its row count is
    what makes the take atomic on every engine.
    """
    h = models.AttachHandle
    for _ in range(_HANDLE_TAKE_TRIES):
        row = context.session.execute(
            sa.select(h.id, h.uuid, h.attach_type, h.attach_info)
            .where(h.deployable_id == deployable_id, h.in_use.is_(False))
            .order_by(h.id).limit(1)
            .with_for_update(skip_locked=True)).first()
        if row is None:
            return None
        taken = context.session.execute(
            sa.update(h).where(h.id == row.id, h.in_use.is_(False))
            .values(in_use=True, updated_at=models._now())
            .execution_options(synchronize_session=False)).rowcount
        if taken:
            return row
    return None


@writer
def attach_handle_release(context, handle_id):
    h = models.AttachHandle
    context.session.execute(
        sa.update(h).where(h.id == handle_id)
        .values(in_use=False, updated_at=models._now())
        .execution_options(synchronize_session=False))


@reader
def attach_handle_get(context, handle_id):
    """(id, uuid, attach_type, attach_info, cpid_info) of a handle."""
    h, c = models.AttachHandle, models.ControlpathID
    return context.session.execute(
        sa.select(h.id, h.uuid, h.attach_type, h.attach_info, c.cpid_info)
        .join(c, c.id == h.cpid_id).where(h.id == handle_id)).first()


@reader
def attach_handles_in_use(context, deployable_id):
    h = models.AttachHandle
    return context.session.scalar(
        sa.select(sa.func.count()).select_from(h)
        .where(h.deployable_id == deployable_id, h.in_use.is_(True)))


@reader
def arq_stuck(context, started_before, limit=100):
    """Uuids of ARQs in BindStarted since before ``started_before``."""
    a = models.ExtARQ
    return list(context.session.scalars(
        sa.select(a.uuid).where(a.state == 'BindStarted',
                                a.bind_started_at < started_before)
        .order_by(a.id).limit(limit)))


@writer
def arq_delete_many(context, uuids):
    """Delete ARQ rows (their handles must have been released)."""
    a = models.ExtARQ
    context.session.execute(
        sa.delete(a).where(a.uuid.in_(list(uuids)))
        .execution_options(synchronize_session=False))


@reader
def deployable_program_target(context, deployable_uuid):
    """The deployable with its device's host, status and control path."""
    d, dev, c = models.Deployable, models.Device, models.ControlpathID
    return context.session.execute(
        sa.select(d.id.label('deployable_id'),
                  d.uuid.label('deployable_uuid'), d.rp_uuid, d.gone,
                  d.driver_name, d.bitstream_id, d.device_id, d.name,
                  dev.hostname, dev.status, dev.type.label('device_type'),
                  c.cpid_info)
        .join(dev, dev.id == d.device_id)
        .join(c, c.device_id == dev.id)
        .where(d.uuid == deployable_uuid)).first()


@reader
def deployable_program_target_by_id(context, deployable_id):
    d = models.Deployable
    uuid = context.session.scalar(
        sa.select(d.uuid).where(d.id == deployable_id))
    return None if uuid is None else deployable_program_target(context,
                                                               uuid)


@writer
def deployable_set_bitstream(context, deployable_id, bitstream_id):
    d = models.Deployable
    context.session.execute(
        sa.update(d).where(d.id == deployable_id)
        .values(bitstream_id=bitstream_id, updated_at=models._now())
        .execution_options(synchronize_session=False))


@writer
def deployable_set_function_trait(context, deployable_id, key, trait):
    """Keep (or with ``trait`` None drop) the deployable's FPGA function
    trait as attribute ``key``; its uuid is not derived from the host, so
    reports leave it alone and the Placement sync advertises it."""
    import uuid as uuidlib
    at = models.Attribute
    context.session.execute(
        sa.delete(at).where(at.deployable_id == deployable_id, at.key == key)
        .execution_options(synchronize_session=False))
    if trait:
        context.session.execute(sa.insert(at).values(
            uuid=str(uuidlib.uuid4()), deployable_id=deployable_id, key=key,
            value=trait, created_at=models._now()))


# == Nova events =============================================================
# Bind outcomes Nova has not accepted yet (doc/source/contract.rst, "Every
# bind outcome reaches Nova").


@writer
def nova_event_create_many(context, values):
    context.session.execute(sa.insert(models.NovaEvent), values)


@reader
def nova_event_get_batch(context, batch_id):
    e = models.NovaEvent
    return context.session.execute(
        sa.select(e).where(e.batch_id == batch_id)).scalars().all()


@reader
def nova_event_due_batches(context, now, limit=50):
    """Batch ids with an event whose next attempt is due."""
    e = models.NovaEvent
    return list(context.session.scalars(
        sa.select(e.batch_id).where(e.next_attempt_at <= now)
        .group_by(e.batch_id).limit(limit)))


@writer
def nova_event_claim_batch(context, batch_id, now, next_attempt_at):
    """Push a due batch's next attempt forward; the caller that moved any
    row owns this attempt (another conductor's periodic gets 0)."""
    e = models.NovaEvent
    return context.session.execute(
        sa.update(e).where(e.batch_id == batch_id, e.next_attempt_at <= now)
        .values(next_attempt_at=next_attempt_at)
        .execution_options(synchronize_session=False)).rowcount


@writer
def nova_event_postpone_batch(context, batch_id, next_attempt_at):
    e = models.NovaEvent
    context.session.execute(
        sa.update(e).where(e.batch_id == batch_id)
        .values(next_attempt_at=next_attempt_at, attempts=e.attempts + 1)
        .execution_options(synchronize_session=False))


@writer
def nova_event_delete_ids(context, ids):
    e = models.NovaEvent
    context.session.execute(
        sa.delete(e).where(e.id.in_(list(ids)))
        .execution_options(synchronize_session=False))


# == metrics =================================================================
# Counts the conductor's Prometheus collector reads at scrape time
# (cyborg.conductor.metrics_collector): one GROUP BY or COUNT each, on
# indexed columns.


@reader
def metrics_arqs_by_state(context):
    """{state: number of ARQs} for the states that have any."""
    a = models.ExtARQ
    return dict(context.session.execute(
        sa.select(a.state, sa.func.count()).group_by(a.state)).all())


@reader
def metrics_nova_events_pending(context):
    """Bind outcomes recorded for Nova and not delivered yet."""
    return context.session.scalar(
        sa.select(sa.func.count()).select_from(models.NovaEvent))


@reader
def metrics_devices_by_health(context):
    """{health state: number of devices} for the states that have any."""
    dev = models.Device
    return dict(context.session.execute(
        sa.select(dev.health, sa.func.count()).group_by(dev.health)).all())


# == reads ===================================================================
# What the API reads (owned by the API).  Each filter is on an indexed or
# unique column; lists are one query (plus one for their children), never a
# Python-side scan.  Rows come back as SQLAlchemy Row objects.

def _matchable(*values):
    """False when a value searched for holds a NUL character: no column
    stores one (PostgreSQL refuses it even in a query), so it matches
    nothing and the read answers "none" without asking."""
    for value in values:
        if isinstance(value, (list, tuple, set)):
            if not _matchable(*value):
                return False
        elif isinstance(value, str) and '\x00' in value:
            return False
    return True


def _health_rank(column):
    """How bad a health column is: its index in HEALTH_STATES (the order
    ``states.worst`` uses), 0 for anything unknown."""
    ranks = {state: i for i, state in enumerate(models.HEALTH_STATES)}
    return sa.case(ranks, value=column, else_=0)


def _worse(first, second, column):
    """SQL: ``column`` of ``second`` when its health ranks strictly worse
    than ``first``'s, else ``column`` of ``first`` (both models with
    HealthColumns): with ``first`` NULL (outer join) that is NULL."""
    return sa.case(
        (_health_rank(second.health) > _health_rank(first.health),
         getattr(second, column)),
        else_=getattr(first, column))


def _arq_query():
    # Only the columns the API shows, not ORM entities: a list of 1,000
    # ARQs must stay cheap (PyMySQL parses every value in Python).  The
    # health of the deployable an ARQ is bound to (the worse of its own
    # and its device's) is worked out in SQL: two columns, no extra rows.
    a, p, h = models.ExtARQ, models.DeviceProfile, models.AttachHandle
    d, dev = models.Deployable, models.Device
    return (sa.select(a.uuid, a.state, a.device_profile_group_id,
                      a.project_id, a.hostname, a.device_rp_uuid,
                      a.instance_uuid, a.created_at, a.updated_at,
                      p.name.label('device_profile_name'),
                      h.uuid.label('attach_handle_uuid'),
                      h.attach_type.label('attach_handle_type'),
                      h.attach_info.label('attach_handle_info'),
                      _worse(d, dev, 'health').label('device_health'),
                      _worse(d, dev, 'health_reason').label(
                          'device_health_reason'))
            .join(p, p.id == a.device_profile_id)
            .outerjoin(h, h.id == a.attach_handle_id)
            .outerjoin(d, d.id == a.deployable_id)
            .outerjoin(dev, dev.id == d.device_id))


@reader
def arq_read(context, uuid, project_id=None):
    """One ARQ row with its profile name and handle, or None.

    ``project_id`` restricts it to that project's ARQs.
    """
    a = models.ExtARQ
    if not _matchable(uuid, project_id):
        return None
    query = _arq_query().where(a.uuid == uuid)
    if project_id is not None:
        query = query.where(a.project_id == project_id)
    return context.session.execute(query).first()


@reader
def arq_read_all(context, project_id=None, instance_uuid=None, uuids=None):
    """ARQ rows, optionally of one project, one instance, these uuids."""
    a = models.ExtARQ
    if not _matchable(project_id, instance_uuid, uuids):
        return []
    query = _arq_query().order_by(a.id)
    if uuids is not None:
        query = query.where(a.uuid.in_(list(uuids)))
    if project_id is not None:
        query = query.where(a.project_id == project_id)
    if instance_uuid is not None:
        query = query.where(a.instance_uuid == instance_uuid)
    # Core execution: no ORM result processing for plain columns.
    return context.session.connection().execute(query).all()


def _where_equal(model, filters, order=True):
    """SELECT model WHERE column = value for each non-None filter."""
    query = sa.select(model)
    for column, value in filters.items():
        if value is not None:
            query = query.where(getattr(model, column) == value)
    return query.order_by(model.id) if order else query


def _one(context, model, **filters):
    if all(value is None for value in filters.values()):
        return None
    if not _matchable(*filters.values()):
        return None
    return context.session.scalars(
        _where_equal(model, filters, order=False)).first()


def _all(context, model, **filters):
    if not _matchable(*filters.values()):
        return []
    return context.session.scalars(_where_equal(model, filters)).all()


@reader
def device_profile_read(context, uuid=None, name=None):
    """One device profile by uuid or name, or None."""
    return _one(context, models.DeviceProfile, uuid=uuid, name=name)


@reader
def device_profile_read_all(context, names=None):
    """Device profiles, optionally only those with one of ``names``."""
    p = models.DeviceProfile
    if not _matchable(names):
        return []
    query = sa.select(p).order_by(p.id)
    if names is not None:
        query = query.where(p.name.in_(list(names)))
    return context.session.scalars(query).all()


@reader
def device_read(context, uuid):
    return _one(context, models.Device, uuid=uuid)


@reader
def device_read_all(context, filters=None):
    """Devices whose columns equal ``filters`` (type, vendor, hostname,
    health); a type no device can have matches nothing."""
    filters = dict(filters or {})
    if filters.get('type') not in (None,) + models.DEVICE_TYPES:
        # Not a query: PostgreSQL rejects a label its enum does not know.
        return []
    return _all(context, models.Device, **filters)


@reader
def deployable_read(context, uuid=None, id=None):
    """One deployable by uuid or integer id, or None."""
    return _one(context, models.Deployable, uuid=uuid, id=id)


def _deployable_query():
    """Deployables (``row.Deployable``) with their device's health
    (``row.device_health``, ``_reason``, ``_updated_at``): one join."""
    d, dev = models.Deployable, models.Device
    return (sa.select(d, dev.health.label('device_health'),
                      dev.health_reason.label('device_health_reason'),
                      dev.health_updated_at.label(
                          'device_health_updated_at'))
            .join(dev, dev.id == d.device_id))


@reader
def deployable_read_with_device(context, uuid=None, id=None):
    """One deployable row of ``_deployable_query`` by uuid or integer id,
    or None."""
    d = models.Deployable
    if (uuid is None and id is None) or not _matchable(uuid):
        return None
    query = _deployable_query()
    if uuid is not None:
        query = query.where(d.uuid == uuid)
    if id is not None:
        query = query.where(d.id == id)
    return context.session.execute(query).first()


@reader
def deployable_read_all(context, name=None, limit=None, marker=None,
                        sort_key='id', sort_dir='asc'):
    """A page of ``_deployable_query`` rows, ordered by ``sort_key`` then
    id.

    ``marker`` is the uuid of the last deployable of the previous page.
    """
    d = models.Deployable
    if not _matchable(name, marker):
        return None if marker is not None else []
    column = getattr(d, sort_key)
    order = sa.desc if sort_dir == 'desc' else sa.asc
    query = _deployable_query().order_by(order(column), order(d.id))
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
    return context.session.execute(query).all()


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
    return _one(context, models.Attribute, uuid=uuid)


@reader
def attribute_read_all(context, deployable_id=None, key=None):
    return _all(context, models.Attribute, deployable_id=deployable_id,
                key=key)


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
