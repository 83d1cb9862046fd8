"""The health columns of a host's devices and deployables, and the
health readings applied per agent health monitor.

Owned by the conductor's health state machine (cyborg.conductor.health).
A host's health records are read in two queries; changes are guarded
UPDATEs (WHERE the state is still the one read), so two conductors never
both apply a step.  The caller serialises with the host's reports by
locking its row first (``hosts.lock``).

``health_senders`` holds, per host and agent health monitor (its
``sender`` id), the highest reading number applied: read
(``applied``) and moved on (``advance``) in the transaction that applies
a numbered report, after the host's row lock, so that two conductors
applying the same report one after the other leave out, the second,
what the first applied.  ``applied`` locks the sender's row by its id
(a record lock only): a locking read of a missing row would take a gap
lock on MariaDB and MySQL, and two hosts' first reports of new senders
could then deadlock on their inserts (as ``hosts.lock_or_create`` says);
a new sender's row is inserted by ``advance``, and moved on by its id.
Whether a sender has a row is read without a lock, under the host's row
lock, which every writer of the host's senders holds.
"""

import sqlalchemy as sa

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import clock as clock_db
from cyborg.db.api import reader, writer

_TABLES = {'devices': models.Device.__table__,
           'deployables': models.Deployable.__table__}

_SENDERS = models.HealthSender.__table__
_SENDER_BY_ID = _SENDERS.c.id == sa.bindparam('b_id')
# Built once, with bind parameters: numbered reports come with every
# change an agent sees.
_SENDER_ID = sa.select(_SENDERS.c.id).where(
    _SENDERS.c.hostname == sa.bindparam('b_hostname'),
    _SENDERS.c.sender == sa.bindparam('b_sender'))
_SENDER_SEQ = (sa.select(_SENDERS.c.seq).where(_SENDER_BY_ID)
               .with_for_update())
_ADVANCE = sa.update(_SENDERS).where(_SENDER_BY_ID).values(
    seq=sa.bindparam('v_seq'), updated_at=sa.bindparam('v_now'))
_NEW_SENDER = sa.insert(_SENDERS)
_SENDERS_BY_AGE = (sa.select(_SENDERS.c.id)
                   .where(_SENDERS.c.hostname == sa.bindparam('b_hostname'))
                   .order_by(_SENDERS.c.updated_at.desc(),
                             _SENDERS.c.id.desc()))

_HEALTH_COLUMNS = ('health', 'health_reason', 'health_code',
                   'health_updated_at', 'health_faults', 'health_flaps',
                   'health_due_at', 'health_readmitted_at')


def _health_columns(table):
    return [table.c[name] for name in _HEALTH_COLUMNS]


@reader
def records(context, hostname):
    """(devices, deployables) of a host as row dicts with their health
    columns; devices also carry status, type, vendor, model and their
    control path (cpid_type, cpid_info), deployables name, device_id,
    rp_uuid and gone.  Two queries whatever the number of devices."""
    d, c = models.Device.__table__, models.ControlpathID.__table__
    dep = models.Deployable.__table__
    devices = _sql.rows(_sql.connection(context).execute(
        sa.select(d.c.id, d.c.uuid, d.c.status, d.c.type, d.c.vendor,
                  d.c.model, c.c.cpid_type, c.c.cpid_info,
                  *_health_columns(d))
        .outerjoin(c, c.c.device_id == d.c.id)
        .where(d.c.hostname == hostname).order_by(d.c.id)))
    deployables = _sql.rows(_sql.connection(context).execute(
        sa.select(dep.c.id, dep.c.uuid, dep.c.name, dep.c.device_id,
                  dep.c.rp_uuid, dep.c.gone, *_health_columns(dep))
        .where(dep.c.device_id.in_([row['id'] for row in devices]))
        .order_by(dep.c.id)))
    return devices, deployables


@writer
def write(context, table_name, rows):
    """Write health changes: ``rows`` are {'uuid', 'old_health',
    'old_due_at', <changed health columns>} for table 'devices' or
    'deployables'.  Each row is updated only while its health and due
    time are still the old ones; returns how many rows were updated."""
    table = _TABLES[table_name]
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
def due_hosts(context, now, limit=100):
    """Hosts with a device or deployable whose timed health step (suspect
    expiry, end of hold-down, probe timeout) is due at ``now``."""
    return list(_sql.connection(context).scalars(
        _DUE_HOSTS, {'now': now, 'limit': limit}))


def _due_hosts():
    d, dep = models.Device.__table__, models.Deployable.__table__
    now = sa.bindparam('now')
    devices = (sa.select(d.c.hostname)
               .where(d.c.health.in_(states.TIMED), d.c.health_due_at <= now))
    deployables = (sa.select(d.c.hostname)
                   .join(dep, dep.c.device_id == d.c.id)
                   .where(dep.c.health.in_(states.TIMED),
                          dep.c.health_due_at <= now))
    union = sa.union(devices, deployables).subquery()
    return (sa.select(union.c.hostname).order_by(union.c.hostname)
            .limit(sa.bindparam('limit', type_=sa.Integer)))


# Built once: every conductor asks every second.
_DUE_HOSTS = _due_hosts()


@writer
def applied(context, hostname, sender):
    """(the id of the host's ``sender`` row or None when it has none yet,
    the highest reading number of it applied or 0), its row locked until
    the transaction ends.  Call it holding the host's row lock
    (``hosts.lock``), as every writer of the host's senders does."""
    connection = _sql.connection(context)
    found = connection.execute(
        _SENDER_ID, {'b_hostname': hostname, 'b_sender': sender}).scalar()
    if found is None:
        return None, 0
    # A locking read: the last committed number, whatever snapshot the
    # transaction reads the rest in.
    seq = connection.execute(_SENDER_SEQ, {'b_id': found}).scalar()
    return (None, 0) if seq is None else (found, seq)


@writer
def advance(context, hostname, sender, row_id, seq, kept):
    """Record ``seq`` as the highest reading number of the host's
    ``sender`` applied, in the transaction that applied them: on its row
    ``row_id`` as ``applied`` found it, inserted when None.  The host
    keeps the ``kept`` senders moved on last; the others' rows are
    deleted."""
    connection = _sql.connection(context)
    now = clock_db.utcnow()
    if row_id is None:
        connection.execute(_NEW_SENDER, {
            'hostname': hostname, 'sender': sender, 'seq': seq,
            'created_at': now, 'updated_at': now})
    else:
        connection.execute(_ADVANCE, {'b_id': row_id, 'v_seq': seq,
                                      'v_now': now})
    ids = connection.execute(_SENDERS_BY_AGE,
                             {'b_hostname': hostname}).scalars().all()
    if len(ids) > kept:
        connection.execute(sa.delete(_SENDERS).where(
            _SENDERS.c.id.in_(ids[kept:])))


@writer
def forget_senders(context, hostname):
    """Delete the host's ``health_senders`` rows (a retired host
    forgotten); how many there were."""
    return _sql.connection(context).execute(
        sa.delete(_SENDERS).where(_SENDERS.c.hostname == hostname)).rowcount
