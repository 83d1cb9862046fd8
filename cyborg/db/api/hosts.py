"""The hosts table: one row per agent host, with the digest of the
inventory last written for it and whether Placement matches it.

Owned by the conductor's report handling (cyborg.conductor.inventory_apply
and placement_sync); the health state machine and device status changes
lock a host's row to serialise with its reports and mark it unsynced;
``cyborg-manage host forget`` deletes a retired host's row
(cyborg.conductor.hosts).

Two host rows may record one compute node provider (a host renamed, or
its ``[DEFAULT]host`` changed, before the old name was forgotten; an
``[agent]resource_provider_name`` naming another host's compute node):
both would offer the same hardware, and nothing tells which name is the
live one (the row made first may be the name that found the compute
node last, and the one an instance uses the other).  So while another
row records its compute node (``has_sharer``), no host there offers
anything: every one keeps its providers reserved whole and no bind takes
its handles (cyborg.conductor.placement_sync), until the stale name is
forgotten or the setting corrected.
"""

import sqlalchemy as sa
from oslo_db import exception as db_exc

from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import clock as clock_db
from cyborg.db.api import AskFirst, reader, write_retrying, writer

_HOST = models.Host.__table__
# Built once, with bind parameters: a report runs several of these, and
# building a statement anew (and working out its cache key) costs more CPU
# than running it.
_BY_NAME = _HOST.c.hostname == sa.bindparam('b_hostname')
_TOUCH = sa.update(_HOST).where(
    _BY_NAME, _HOST.c.report_digest == sa.bindparam('b_digest'),
    _HOST.c.placement_synced.is_(True)).values(
        last_report_at=sa.bindparam('v_now'))
_GET = sa.select(_HOST).where(_BY_NAME)
_SERIAL = sa.select(_HOST.c.sync_serial).where(_BY_NAME)
_LOCK = _GET.with_for_update()
_INSERT = sa.insert(_HOST)


def has_sharer(host):
    """Whether another row (another id) records the compute node
    provider of ``host`` (an alias of the hosts table, in the enclosing
    query): the host shares it, and offers nothing.  An equality on
    ``compute_rp_uuid``, read through ``hosts_compute_rp_uuid_idx``; a
    row with none recorded shares nothing (NULL equals nothing)."""
    other = _HOST.alias('sharer')
    return sa.exists().where(
        other.c.compute_rp_uuid == host.c.compute_rp_uuid,
        other.c.id != host.c.id)


@writer
def touch(context, hostname, digest):
    """Record an unchanged report in one UPDATE.  True when the host is
    known with this digest and in sync with Placement."""
    result = _sql.connection(context).execute(_TOUCH, {
        'b_hostname': hostname, 'b_digest': digest,
        'v_now': clock_db.utcnow()})
    return result.rowcount == 1


@writer
def lock(context, hostname):
    """The host's row (dict), locked until the transaction ends
    (serialising a change with the host's reports); None when unknown."""
    row = _sql.connection(context).execute(
        _LOCK, {'b_hostname': hostname}).mappings().first()
    return dict(row) if row is not None else None


class CreateFirst(AskFirst):
    """Raised by ``lock_or_create`` for a host not known yet: its row is
    inserted in a transaction of its own (``ask``), and the caller's
    transaction (``write_retrying``) runs again and locks it."""

    def __init__(self, context, hostname):
        super().__init__()
        self.context, self.hostname = context, hostname

    def ask(self):
        try:
            write_retrying(self.context, create, self.context,
                           self.hostname)
        except db_exc.DBDuplicateEntry:
            pass    # Another conductor made it first.


@writer
def lock_or_create(context, hostname):
    """The host's row (dict), locked until the transaction ends; for a
    host not known yet, ``CreateFirst`` (the caller runs in
    ``write_retrying``): its row is made in a transaction of its own,
    then this one runs again.

    The lock is the transaction's first read: on MariaDB (REPEATABLE
    READ) the first plain read fixes the snapshot every later one reads,
    and one made before the lock waited showed the rows as they were
    before what it waited for (a health write's, an operator's), which
    the report then wrote over.  A missing row is not inserted here: its
    locking read took a gap lock (MariaDB, MySQL), and first reports of
    new hosts, whose names share that gap, would deadlock on their
    inserts; this transaction ends at once instead, holding nothing
    more, and the insert (``create``) reads no lock first."""
    row = lock(context, hostname)
    if row is None:
        raise CreateFirst(context, hostname)
    return row


@writer
def create(context, hostname):
    """Insert the host's row unless it is there: an unlocked read, then
    the insert (see ``lock_or_create``); a racing insert of the same
    host raises DBDuplicateEntry."""
    if get(context, hostname) is not None:
        return
    _sql.connection(context).execute(_INSERT, {
        'hostname': hostname, 'placement_synced': False,
        'created_at': clock_db.utcnow()})


@reader
def get(context, hostname):
    """The host's row (dict), or None."""
    if not _sql.matchable(hostname):
        return None
    row = _sql.connection(context).execute(
        _GET, {'b_hostname': hostname}).mappings().first()
    return dict(row) if row else None


@reader
def list_all(context):
    """[{hostname, compute_rp_uuid, placement_synced, report_digest}]."""
    h = _HOST
    return _sql.rows(_sql.connection(context).execute(
        sa.select(h.c.hostname, h.c.compute_rp_uuid, h.c.placement_synced,
                  h.c.report_digest).order_by(h.c.hostname)))


@reader
def overview(context):
    """Every host as ``cyborg-manage host list`` shows it, by name: [{
    hostname, compute_node_name, created_at, last_report_at,
    placement_synced, devices (how many it has)}], in one query."""
    h, d = _HOST, models.Device.__table__
    devices = (sa.select(d.c.hostname, sa.func.count().label('devices'))
               .group_by(d.c.hostname).subquery())
    return _sql.rows(_sql.connection(context).execute(
        sa.select(h.c.hostname, h.c.compute_node_name, h.c.created_at,
                  h.c.last_report_at, h.c.placement_synced,
                  sa.func.coalesce(devices.c.devices, 0).label('devices'))
        .select_from(h.outerjoin(devices,
                                 devices.c.hostname == h.c.hostname))
        .order_by(h.c.hostname)))


@writer
def delete(context, hostname):
    """Delete the host's row (a retired host forgotten: its devices are
    deleted first, ``inventory.write``); True if there was one."""
    result = _sql.connection(context).execute(
        sa.delete(_HOST).where(_BY_NAME), {'b_hostname': hostname})
    return result.rowcount == 1


@reader
def changes_and_shared(context, hostnames=None):
    """{hostname: (time of its last inventory report or other change of
    its row (or None), whether it shares its compute node with another
    row: ``has_sharer``)} of every host, or of ``hostnames``: one query,
    what the exports read of the hosts table.  A change that leaves no
    row of the host's inventory behind (an attribute deleted) marks the
    host unsynced, which moves its row; so does a sharer coming or going
    (``placement_sync.resync``)."""
    h = _HOST
    query = sa.select(h.c.hostname, has_sharer(h).label('shared'),
                      h.c.last_report_at, h.c.updated_at)
    if hostnames is not None:
        names = [name for name in hostnames if _sql.matchable(name)]
        if not names:
            return {}
        query = query.where(h.c.hostname.in_(names))
    return {hostname: (max((t for t in stamps if t is not None),
                           default=None), bool(shared))
            for hostname, shared, *stamps in
            _sql.connection(context).execute(query).all()}


_SHARING = sa.select(_HOST.c.hostname).where(
    _HOST.c.compute_rp_uuid == sa.bindparam('b_cn'))
_ME = _HOST.alias('me')
_OTHER = _HOST.alias('other')
_SHARERS = (
    sa.select(_OTHER.c.hostname)
    .select_from(_OTHER.join(_ME, _ME.c.compute_rp_uuid ==
                             _OTHER.c.compute_rp_uuid))
    .where(_ME.c.hostname == sa.bindparam('b_hostname'),
           _OTHER.c.id != _ME.c.id))


@reader
def sharing(context, cn_uuid):
    """The names of the host rows recording the compute node provider
    ``cn_uuid``, sorted (in Python: no collation decides): one query,
    through the index.  A sync reads it after listing the tree, to tell
    whether its host still records that provider and who else does."""
    return sorted(_sql.connection(context).scalars(_SHARING,
                                                   {'b_cn': cn_uuid}))


@reader
def sharers(context, hostname):
    """The names of the other host rows recording ``hostname``'s compute
    node provider, sorted; [] when none does (or it records none)."""
    return sorted(_sql.connection(context).scalars(
        _SHARERS, {'b_hostname': hostname}))


@reader
def count_reporting(context, since):
    """(hosts known, of them those whose last inventory report is older
    than ``since`` or missing): one COUNT over the hosts table."""
    h = _HOST
    silent = sa.or_(h.c.last_report_at < since, h.c.last_report_at.is_(None))
    # SUM(CASE), not COUNT(*) FILTER: MariaDB has no FILTER clause.
    known, quiet = _sql.connection(context).execute(sa.select(
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(sa.case((silent, 1), else_=0)),
                         0))).one()
    return known, int(quiet)


@reader
def sync_serial(context, hostname):
    """The host's ``sync_serial`` (None: unknown host): read by a writer
    in the transaction that marked the host unsynced, after that bump,
    for the change's Placement sync to mark it synced with
    (``placement_sync._mark_synced``): a change of another writer
    committed after it moves the serial past it."""
    return _sql.connection(context).execute(
        _SERIAL, {'b_hostname': hostname}).scalar()


# ``update``'s ``node`` when the compute node provider is not compared.
ANY_NODE = object()


@writer
def update(context, hostname, digest=None, serial=None, node=ANY_NODE,
           **values):
    """Set host columns; with ``digest``, only if it is still the stored
    one (a later report wins); with ``serial``, only if the host's
    ``sync_serial`` still is (no change made Placement lag since); with
    ``node``, only if the row still records that compute node provider
    (None: none), so a sync that worked from another never writes over
    the one recorded since (placement_sync).  Setting
    ``placement_synced`` false counts one such change.  True if the row
    was updated."""
    with_node = None if node is ANY_NODE else node is not None
    statement = _update_statement(tuple(sorted(values)), digest is not None,
                                  serial is not None,
                                  values.get('placement_synced') is False,
                                  with_node)
    params = {'b_hostname': hostname}
    if digest is not None:
        params['b_digest'] = digest
    if serial is not None:
        params['b_serial'] = serial
    if with_node:
        params['b_node'] = node
    params.update(('v_' + name, value) for name, value in values.items())
    result = _sql.connection(context).execute(statement, params)
    return result.rowcount == 1


@_sql.built_once
def _update_statement(value_columns, with_digest, with_serial, lagging,
                      with_node=None):
    """``with_node``: None (not compared), True (``b_node``), False (the
    row records none)."""
    conditions = [_BY_NAME]
    if with_digest:
        conditions.append(_HOST.c.report_digest == sa.bindparam('b_digest'))
    if with_serial:
        conditions.append(_HOST.c.sync_serial == sa.bindparam('b_serial'))
    if with_node is not None:
        conditions.append(_sql.equal_or_null(_HOST, 'compute_rp_uuid',
                                             not with_node, 'b_node'))
    values = {name: sa.bindparam('v_' + name) for name in value_columns}
    if lagging:
        values['sync_serial'] = _HOST.c.sync_serial + 1
    return sa.update(_HOST).where(*conditions).values(**values)
