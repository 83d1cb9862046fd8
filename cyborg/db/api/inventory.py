"""A host's inventory rows, read and written in bulk by its reports.

Owned by the conductor's report handling (cyborg.conductor.inventory_apply,
placement_sync, device_status).  A host's rows are read with one query per
table and written with one executemany per table and kind of change, so
the cost of a report does not grow with round trips per device.  Rows
travel as plain dicts of columns.
"""

import sqlalchemy as sa

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import clock as clock_db
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import AskFirst, reader, writer

# The tables of a host's inventory, by the names a plan uses.
TABLES = {'devices': models.Device,
          'controlpath_ids': models.ControlpathID,
          'deployables': models.Deployable,
          'attributes': models.Attribute,
          'attach_handles': models.AttachHandle}


@reader
def load(context, hostname, device_uuids=None):
    """The stored rows of a host's devices (all, or these uuids) as
    {table: [row dicts]}: five queries whatever the number of devices
    (none for a host name no row can hold)."""
    if not _sql.matchable(hostname, device_uuids):
        return {table: [] for table in TABLES}
    s = _sql.connection(context)
    d = models.Device.__table__
    query = sa.select(d).where(d.c.hostname == hostname)
    if device_uuids is not None:
        query = query.where(d.c.uuid.in_(list(device_uuids)))
    found = {'devices': _sql.rows(s.execute(query))}
    device_ids = [row['id'] for row in found['devices']]
    for table in ('controlpath_ids', 'deployables'):
        found[table] = _children(s, table, 'device_id', device_ids)
    deployable_ids = [row['id'] for row in found['deployables']]
    for table in ('attributes', 'attach_handles'):
        found[table] = _children(s, table, 'deployable_id', deployable_ids)
    return found


def _children(session, table, column, parent_ids):
    """The rows of ``table`` whose ``column`` is one of ``parent_ids`` (no
    query when there is none: a new host's first report)."""
    if not parent_ids:
        return []
    t = TABLES[table].__table__
    return _sql.rows(session.execute(
        sa.select(t).where(t.c[column].in_(parent_ids))))


@reader
def load_hosts(context, hostnames=None):
    """The stored rows of every host's devices, as {hostname: {table:
    [row dicts]}} for the hosts that have devices, or of ``hostnames``
    (each of them, with no rows when it has none): five queries whatever
    the number of hosts (the exports of a whole cloud), each child table
    read through its parents' ids in the database, not a list of them
    sent over."""
    if hostnames is not None:
        found = {name: {table: [] for table in TABLES}
                 for name in hostnames}
        found.update(_load_hosts(context, [
            name for name in hostnames if _sql.matchable(name)]))
        return found
    return _load_hosts(context, None)


def _load_hosts(context, hostnames):
    if hostnames == []:
        return {}
    s = _sql.connection(context)
    d = models.Device.__table__
    dep = models.Deployable.__table__
    devices = sa.select(d)
    if hostnames is not None:
        devices = devices.where(d.c.hostname.in_(hostnames))
    device_ids = sa.select(devices.subquery().c.id)
    deployable_ids = sa.select(dep.c.id).where(
        dep.c.device_id.in_(device_ids))
    rows = {'devices': _sql.rows(s.execute(devices))}
    for table, column, parents in (
            ('controlpath_ids', 'device_id', device_ids),
            ('deployables', 'device_id', device_ids),
            ('attributes', 'deployable_id', deployable_ids),
            ('attach_handles', 'deployable_id', deployable_ids)):
        t = TABLES[table].__table__
        rows[table] = _sql.rows(s.execute(
            sa.select(t).where(t.c[column].in_(parents))))
    # Each query may see rows written since the one before (PostgreSQL's
    # READ COMMITTED): a child whose parent was not read is left out.
    host_of = {row['id']: row['hostname'] for row in rows['devices']}
    for row in rows['deployables']:
        host_of[('deployable', row['id'])] = host_of.get(row['device_id'])
    found = {}
    for table, table_rows in rows.items():
        for row in table_rows:
            host = (row['hostname'] if table == 'devices'
                    else host_of.get(row['device_id']) if 'device_id' in row
                    else host_of.get(('deployable', row['deployable_id'])))
            if host is not None:
                found.setdefault(host, {t: [] for t in TABLES})[
                    table].append(row)
    return found


class TakenMeanwhile(AskFirst):
    """Raised by ``write`` when an attach handle it was to delete, or one
    of a deployable or device it was to delete, is in use: a bind took
    it after the caller read it free (binds do not lock the host's row).
    Nothing is asked: ``write_retrying`` rolls the transaction back and
    runs it again, reading the handle taken; a report then keeps it as
    it keeps any vanished handle in use (``inventory_plan``), a host's
    forgetting refuses (``cyborg.conductor.hosts``)."""

    def ask(self):
        pass


@writer
def write(context, add, update, delete):
    """Apply a plan's rows (see cyborg.conductor.inventory_plan.Plan):
    deletes, then updates, then inserts parent tables first.

    An attach handle in use is never deleted, with its deployable and
    device (``_delete_with_children``): the delete of the rows a plan
    read free is guarded on it, and ``TakenMeanwhile`` raised when the
    guard kept one (an ARQ's handle would otherwise go, the ARQ left
    Bound without it).  No statement more: the guard is in the
    DELETEs' WHERE, its outcome their row counts."""
    s = _sql.connection(context)
    handles = delete.get('attach_handles')
    if handles:
        h = models.AttachHandle.__table__
        if s.execute(sa.delete(h).where(
                h.c.uuid.in_(handles),
                h.c.in_use == sa.false())).rowcount != len(handles):
            raise TakenMeanwhile()
    if delete.get('attributes'):
        a = models.Attribute.__table__
        s.execute(sa.delete(a).where(a.c.uuid.in_(delete['attributes'])))
    kept, _devices = _delete_with_children(
        s, _ids_of(s, 'deployables', delete), _ids_of(s, 'devices', delete))
    if kept:
        raise TakenMeanwhile()
    for table, rows in update.items():
        _update_by_uuid(s, TABLES[table].__table__, rows)
    ids = {}
    # Where the database hands back the ids of an executemany INSERT
    # (MariaDB, PostgreSQL, SQLite), children learn their parents' ids from
    # it; elsewhere (MySQL) from one SELECT per parent table.
    returning = s.dialect.insert_executemany_returning
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
        now = clock_db.utcnow()
        t = TABLES[table].__table__
        values = [_without_refs(r, parents, ids, now) for r in rows]
        parent = _PARENT_OF.get(table)
        if parent and returning:
            known = ids.setdefault(parent, {})
            for row in s.execute(sa.insert(t).returning(t.c.uuid, t.c.id),
                                 values):
                known[row.uuid] = row.id
        else:
            s.execute(sa.insert(t), values)


def _ids_of(session, table, delete):
    if not delete.get(table):
        return []
    t = TABLES[table].__table__
    return list(session.scalars(sa.select(t.c.id)
                                .where(t.c.uuid.in_(delete[table]))))


def _delete_with_children(session, deployable_ids, device_ids):
    """Delete deployables and devices with every row hanging off them,
    without relying on ON DELETE CASCADE (SQLite enforces foreign keys only
    when asked to), except a deployable an attach handle in use holds,
    with that handle and its device (its free handles go): the caller
    read it free, and a bind took it since (binds do not lock the host's
    row); deleted, it left the ARQ Bound without a handle (ON DELETE SET
    NULL).  Returns (the ids of the deployables, of the devices, kept
    so): empty sets but in that race.

    The guards are in the DELETEs' WHERE (no statement more): a handle
    whose take has not committed is waited for, and read in use once it
    has; one this delete reached first, the take skips (SKIP LOCKED)."""
    dep = models.Deployable.__table__
    h = models.AttachHandle.__table__
    deployable_ids = set(deployable_ids)
    device_ids = set(device_ids)
    if device_ids:
        deployable_ids.update(session.scalars(
            sa.select(dep.c.id).where(dep.c.device_id.in_(device_ids))))
    kept, kept_devices = set(), set()
    if deployable_ids:
        session.execute(sa.delete(h).where(
            h.c.deployable_id.in_(deployable_ids),
            h.c.in_use == sa.false()))
        a = models.Attribute.__table__
        session.execute(sa.delete(a).where(
            a.c.deployable_id.in_(deployable_ids),
            ~sa.exists().where(h.c.deployable_id == a.c.deployable_id)))
        deleted = session.execute(sa.delete(dep).where(
            dep.c.id.in_(deployable_ids),
            ~sa.exists().where(h.c.deployable_id == dep.c.id))).rowcount
        if deleted != len(deployable_ids):
            for row in session.execute(
                    sa.select(dep.c.id, dep.c.device_id)
                    .where(dep.c.id.in_(deployable_ids))):
                kept.add(row.id)
                kept_devices.add(row.device_id)
            device_ids -= kept_devices
    if device_ids:
        cp = models.ControlpathID.__table__
        session.execute(sa.delete(cp).where(cp.c.device_id.in_(device_ids)))
        d = models.Device.__table__
        session.execute(sa.delete(d).where(d.c.id.in_(device_ids)))
    return kept, kept_devices


_PARENT_TABLES = {'device': 'devices', 'deployable': 'deployables',
                  'controlpath': 'controlpath_ids'}
_PARENT_OF = {table: parent for parent, table in _PARENT_TABLES.items()}
_PARENT_COLUMNS = {'device': 'device_id', 'deployable': 'deployable_id',
                   'controlpath': 'cpid_id'}


def _resolve_ids(session, ids, parent, rows):
    """Fill ``ids[parent]`` with {uuid: id} for the parents ``rows`` name."""
    known = ids.setdefault(parent, {})
    wanted = {r[parent + '_uuid'] for r in rows} - set(known)
    if wanted:
        t = TABLES[_PARENT_TABLES[parent]].__table__
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
def host_providers(context, hostname):
    """What a host's provider tree is made from: its deployables (with
    their device's status) and their attributes, in two queries.

    Returns [{'id', 'uuid', 'name', 'num_accelerators', 'rp_uuid', 'gone',
    'programming_until', 'health', 'health_reason', 'health_updated_at'
    (the deployable's own), 'card_programming_until' (its card's mark:
    that of any deployable of its device, ``deployables.card_marks``),
    'card_held' (whether a deployable of its card is kept gone under an
    attach handle in use, ``deployables.card_holds``: the card is then
    offered through none of its deployables), 'device_status',
    'device_uuid', 'device_health', 'attributes': {key: value}}]."""
    s = _sql.connection(context)
    deployables = _sql.rows(s.execute(_HOST_DEPLOYABLES,
                                      {'hostname': hostname}))
    attributes = {}
    if deployables:
        for row in s.execute(_ATTRIBUTES_OF,
                             {'ids': [r['id'] for r in deployables]}):
            attributes.setdefault(row.deployable_id, {})[row.key] = row.value
    for row in deployables:
        row['attributes'] = attributes.get(row['id'], {})
    return deployables


_D = models.Device.__table__
_DEP = models.Deployable.__table__
_A = models.Attribute.__table__
# A card's programming mark reserves every provider of the card: one join
# on the few marked rows, grouped by card.
_MARKS = deployable_db.card_marks()
# So does a deployable of it kept gone under an attach handle in use
# (the same join, on the few gone rows).
_HOLDS = deployable_db.card_holds()
# Built once (every change of a host's inventory or health reads these).
_HOST_DEPLOYABLES = (
    sa.select(_DEP.c.id, _DEP.c.uuid, _DEP.c.name, _DEP.c.num_accelerators,
              _DEP.c.rp_uuid, _DEP.c.gone, _DEP.c.programming_until,
              _DEP.c.health,
              _DEP.c.health_reason, _DEP.c.health_updated_at,
              _MARKS.c.programming_until.label('card_programming_until'),
              _HOLDS.c.card.isnot(None).label('card_held'),
              _D.c.status.label('device_status'),
              _D.c.uuid.label('device_uuid'),
              _D.c.health.label('device_health'))
    .join(_D, _D.c.id == _DEP.c.device_id)
    .outerjoin(_MARKS, _MARKS.c.card == deployable_db.card_key(_DEP.c))
    .outerjoin(_HOLDS, _HOLDS.c.card == deployable_db.card_key(_DEP.c))
    .where(_D.c.hostname == sa.bindparam('hostname')).order_by(_DEP.c.id))
_ATTRIBUTES_OF = sa.select(_A.c.deployable_id, _A.c.key, _A.c.value).where(
    _A.c.deployable_id.in_(sa.bindparam('ids', expanding=True)))


@reader
def bound_holders(context, handle_ids):
    """(attach_handle_id, arq uuid, instance_uuid) of the Bound ARQs
    holding these attach handles, in handle order (their unique index
    on attach_handle_id): one query, asked only when a report changes
    what a held card runs (``inventory_apply``)."""
    arq = models.ExtARQ.__table__
    return _sql.connection(context).execute(
        sa.select(arq.c.attach_handle_id, arq.c.uuid, arq.c.instance_uuid)
        .where(arq.c.attach_handle_id.in_(list(handle_ids)),
               arq.c.state == states.BOUND)
        .order_by(arq.c.attach_handle_id)).all()


@reader
def gone(context, hostname=None):
    """The rows of vanished hardware, of every host (or of ``hostname``),
    in one query (few are: ``deployables_gone_idx`` and
    ``devices_health_idx`` find them): the deployables kept as gone and
    the devices that are 'lost' (a device is only when it vanished; a
    device still reported may have no deployable left), as
    [{'kind': 'deployable' or 'device', 'hostname', 'uuid', 'rp_uuid'
    (None for a device), 'device_uuid' (a device's: its own),
    'health', 'health_reason', 'health_code', 'health_updated_at'}]."""
    if hostname is None:
        return _sql.rows(_sql.connection(context).execute(
            _gone_statement(False)))
    return _sql.rows(_sql.connection(context).execute(
        _gone_statement(True), {'hostname': hostname}))


@_sql.built_once
def _gone_statement(by_host):
    """``gone``'s query, of every host or (``by_host``) of one: both
    kinds of rows in one UNION ALL, each part through its index."""
    deployables = (
        sa.select(sa.literal_column("'deployable'").label('kind'),
                  _D.c.hostname, _DEP.c.uuid, _DEP.c.rp_uuid,
                  _D.c.uuid.label('device_uuid'), _DEP.c.health,
                  _DEP.c.health_reason, _DEP.c.health_code,
                  _DEP.c.health_updated_at)
        .join(_D, _D.c.id == _DEP.c.device_id)
        .where(_DEP.c.gone == sa.true()))
    devices = (
        sa.select(sa.literal_column("'device'").label('kind'),
                  _D.c.hostname, _D.c.uuid,
                  sa.cast(sa.null(), _DEP.c.rp_uuid.type).label('rp_uuid'),
                  _D.c.uuid.label('device_uuid'), _D.c.health,
                  _D.c.health_reason, _D.c.health_code,
                  _D.c.health_updated_at)
        .where(_D.c.health == states.LOST))
    if by_host:
        deployables = deployables.where(
            _D.c.hostname == sa.bindparam('hostname'))
        devices = devices.where(_D.c.hostname == sa.bindparam('hostname'))
    return sa.union_all(deployables, devices)


@writer
def delete_gone(context, deployable_uuids, device_uuids=()):
    """Delete these deployables if still gone, then those of these
    devices that are still 'lost' and have no deployable left (never a
    device still reported: it is not lost, and may have none); returns
    the uuids deleted.  One an attach handle in use still holds is kept
    with its device (``_delete_with_children``), for a later run."""
    s = _sql.connection(context)
    dep = models.Deployable.__table__
    d = models.Device.__table__
    rows = s.execute(sa.select(dep.c.id, dep.c.uuid).where(
        dep.c.uuid.in_(list(deployable_uuids)), dep.c.gone.is_(True))).all()
    devices = s.execute(sa.select(d.c.id, d.c.uuid).where(
        d.c.uuid.in_(list(device_uuids)), d.c.health == states.LOST)).all() \
        if device_uuids else []
    ids = {r.id for r in rows}
    device_ids = {r.id for r in devices}
    if device_ids:
        device_ids -= set(s.scalars(sa.select(dep.c.device_id).where(
            dep.c.device_id.in_(device_ids), dep.c.id.not_in(ids))))
    if not ids and not device_ids:
        return []
    kept, kept_devices = _delete_with_children(s, ids, device_ids)
    return [r.uuid for r in rows if r.id not in kept] + [
        r.uuid for r in devices
        if r.id in device_ids and r.id not in kept_devices]
