"""The health columns of a host's devices and deployables.

Owned by the conductor's health state machine (cyborg.conductor.health).
A host's health records are read in two queries; changes are guarded
UPDATEs (WHERE the state is still the one read), so two conductors never
both apply a step.  The caller serialises with the host's reports by
locking its row first (``hosts.lock``).
"""

import sqlalchemy as sa

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer

_TABLES = {'devices': models.Device.__table__,
           'deployables': models.Deployable.__table__}

_HEALTH_COLUMNS = ('health', 'health_reason', 'health_updated_at',
                   'health_faults', 'health_flaps', 'health_due_at',
                   'health_readmitted_at')


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
