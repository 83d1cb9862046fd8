"""Accelerator requests (ARQs).

Reads: every ARQ read, the API's and the conductor's, is built by
``select``, which joins an ARQ to exactly the tables the columns asked for
come from: its device profile (an inner join: every ARQ has one), its
attach handle or remote pool handle, and its deployable (alone, or with
that deployable's device for the health the API shows, as ONE outer
join: only an ARQ that is binding or bound has either).  ``VIEW`` is
what the API shows, ``CHANGE`` what the state machine needs to change
ARQs and announce it.
Reads run as Core statements: plain columns, no ORM entities, so a list
of 1,000 ARQs stays cheap.

Writes are owned by the ARQ state machine (cyborg.conductor.arq_binding):
every state change is a guarded ``UPDATE ... WHERE state IN (...)`` whose
row count the caller checks, never read-then-write.
"""

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import visitors

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import reader, writer

_ARQ = models.ExtARQ.__table__
_PROFILE = models.DeviceProfile.__table__
_HANDLE = models.AttachHandle.__table__
_DEPLOYABLE = models.Deployable.__table__
_DEVICE = models.Device.__table__
_REMOTE = models.RemotePoolHandle.__table__


def _constant(value, type_=None):
    """``value`` written into the statement's text, not bound: these
    reads run on every GET and bind, and each bound constant is a
    parameter built, escaped and sent on every execution (the health
    ranks were 45 of them).  Only for the module's own constants
    (identifiers and small integers), never for what a caller gives.  A
    boolean is refused: it would be written as ``True``, which not every
    database reads as a value."""
    if (isinstance(value, bool)
            or not str(value).replace('_', '').isalnum()):
        raise ValueError(f'not a constant to write into SQL: {value!r}')
    text = str(value) if isinstance(value, int) else f"'{value}'"
    return sa.literal_column(text, type_)


def _health_rank(column):
    """How bad a health column is: its index in HEALTH_STATES (the order
    ``states.worst`` uses), 0 for anything unknown."""
    return sa.case(
        *((_constant(state), _constant(rank))
          for rank, state in enumerate(states.HEALTH_STATES)),
        value=column, else_=_constant(0))


def _worse(column):
    """SQL: the device's ``column`` when its health ranks strictly worse
    than its deployable's, else the deployable's: the effective health of
    the deployable an ARQ is bound to, worked out in SQL (NULL while the
    ARQ holds none)."""
    return sa.case(
        (_health_rank(_DEVICE.c.health) > _health_rank(_DEPLOYABLE.c.health),
         _DEVICE.c[column]),
        else_=_DEPLOYABLE.c[column])


# An ARQ's handle is an attach handle of a host's deployable, or a
# remote pool's fabric handle (type FABRIC): one of the two outer joins
# finds it.  The enum is cast so both branches are strings (PostgreSQL).
_HANDLE_TYPE = sa.case(
    (_REMOTE.c.id.is_not(None), _constant(states.FABRIC, sa.String)),
    else_=sa.cast(_HANDLE.c.attach_type, sa.String))

# What an ARQ is and where it is bound, with its profile's name and its
# attach handle: the columns every reader of whole ARQs gets.
_COMMON = (_ARQ.c.uuid, _ARQ.c.state, _ARQ.c.device_profile_group_id,
           _ARQ.c.project_id, _ARQ.c.hostname, _ARQ.c.device_rp_uuid,
           _ARQ.c.instance_uuid, _ARQ.c.consumer_id, _ARQ.c.consumer_type,
           _ARQ.c.created_at, _ARQ.c.updated_at,
           _PROFILE.c.name.label('device_profile_name'),
           sa.func.coalesce(_HANDLE.c.uuid, _REMOTE.c.uuid)
           .label('attach_handle_uuid'),
           _HANDLE_TYPE.label('attach_handle_type'),
           sa.func.coalesce(_HANDLE.c.attach_info, _REMOTE.c.attach_info)
           .label('attach_handle_info'))

# What the API shows: plus the effective health of the bound deployable.
VIEW = _COMMON + (_worse('health').label('device_health'),
                  _worse('health_reason').label('device_health_reason'))

# What the state machine reads before changing ARQs: plus the handle id a
# guarded update checks (and the remote handle, for a remote pool's ARQ),
# the bind's start and time (until when a release's remote handle may
# still be attached by it: ``remote_pools.landing_until``), the profile's
# groups, the deployable's uuid (for notifications) and its device's host
# (the agent to ask: the ARQ's own ``hostname`` is the compute node's
# name, which may differ).
CHANGE = _COMMON + (_ARQ.c.attach_handle_id, _ARQ.c.remote_handle_id,
                    _ARQ.c.bind_id, _ARQ.c.bind_started_at,
                    _ARQ.c.bind_timeout,
                    _PROFILE.c.profile_json,
                    _DEPLOYABLE.c.uuid.label('deployable_uuid'),
                    _DEVICE.c.hostname.label('device_hostname'))


def _tables(columns):
    return {element.table for column in columns
            for element in visitors.iterate(column)
            if isinstance(element, sa.Column)}


def select(*columns):
    """``SELECT columns FROM`` ARQs joined to just the tables the columns
    come from (see the module's docstring); the caller adds its WHERE,
    ORDER BY, GROUP BY."""
    tables = _tables(columns)
    source = _ARQ
    if _PROFILE in tables:
        source = source.join(_PROFILE,
                             _PROFILE.c.id == _ARQ.c.device_profile_id)
    if _HANDLE in tables:
        source = source.outerjoin(_HANDLE,
                                  _HANDLE.c.id == _ARQ.c.attach_handle_id)
    if _REMOTE in tables:
        source = source.outerjoin(_REMOTE,
                                  _REMOTE.c.id == _ARQ.c.remote_handle_id)
    if _DEVICE in tables:
        source = source.outerjoin(
            _DEPLOYABLE.join(_DEVICE,
                             _DEVICE.c.id == _DEPLOYABLE.c.device_id),
            _DEPLOYABLE.c.id == _ARQ.c.deployable_id)
    elif _DEPLOYABLE in tables:
        source = source.outerjoin(_DEPLOYABLE,
                                  _DEPLOYABLE.c.id == _ARQ.c.deployable_id)
    return sa.select(*columns).select_from(source)


def _execute(context, query, params=None):
    # Core execution: no ORM result processing for plain columns.
    return _sql.connection(context).execute(query, params)


# The conditions the hot reads filter on, as bind parameters.
_FILTERS = {
    'uuid': _ARQ.c.uuid == sa.bindparam('uuid'),
    'uuids': _ARQ.c.uuid.in_(sa.bindparam('uuids', expanding=True)),
    'project_id': _ARQ.c.project_id == sa.bindparam('project_id'),
    'instance_uuid': _ARQ.c.instance_uuid == sa.bindparam('instance_uuid'),
    'states': _ARQ.c.state.in_(sa.bindparam('states', expanding=True)),
    # Paging: the ARQs after the one whose id this is.
    'after_id': _ARQ.c.id > sa.bindparam('after_id'),
}


# The _FILTERS whose value is a list (expanding bind parameters).
_LISTS = ('uuids', 'states')


@_sql.built_once
def _filtered_statement(columns, order, given, limited):
    query = select(*columns).where(*(_FILTERS[name] for name in given))
    if order:
        query = query.order_by(_ARQ.c.id)
    return query.limit(sa.bindparam('limit')) if limited else query


def _filtered(context, columns, order=False, limit=None, **params):
    """Run ``SELECT columns`` of the ARQs matching every param that is not
    None (names from ``_FILTERS``), at most ``limit`` of them, built once
    for each set of params."""
    given = tuple(sorted(name for name, value in params.items()
                         if value is not None))
    values = {name: list(params[name]) if name in _LISTS else params[name]
              for name in given}
    if limit is not None:
        values['limit'] = limit
    return _execute(context, _filtered_statement(
        columns, order, given, limit is not None), values)


# -- reads ------------------------------------------------------------------

@reader
def get(context, uuid, project_id=None):
    """One ARQ as the API shows it (``VIEW``), or None.

    ``project_id`` restricts it to that project's ARQs.
    """
    if not _sql.matchable(uuid, project_id):
        return None
    return _filtered(context, VIEW, uuid=uuid,
                     project_id=project_id).first()


@reader
def get_all(context, project_id=None, instance_uuid=None, uuids=None,
            limit=None, marker=None, states=None):
    """ARQs as the API shows them (``VIEW``) by id, optionally of one
    project, one instance, these uuids, in one of these ``states``.  With
    ``limit`` and ``marker`` (an ARQ's uuid): at most ``limit`` of them
    after that ARQ; None when it names no ARQ (of ``project_id``, when
    given)."""
    if not _sql.matchable(project_id):
        return None if marker is not None else []
    after_id = None
    if marker is not None:
        after_id = _sql.marker_id(
            context, _ARQ.c.id, _ARQ.c.uuid, marker,
            *([_ARQ.c.project_id == project_id] if project_id else []))
        if after_id is None:
            return None
    if not _sql.matchable(instance_uuid, uuids):
        return []
    return _filtered(context, VIEW, order=True, limit=limit, uuids=uuids,
                     project_id=project_id, instance_uuid=instance_uuid,
                     states=states, after_id=after_id).all()


@reader
def get_to_change(context, uuids=(), instance_uuid=None):
    """ARQs by uuid or by instance (both indexed) with what changing them
    needs (``CHANGE``)."""
    if instance_uuid is not None:
        return _filtered(context, CHANGE,
                         instance_uuid=instance_uuid).all()
    return _filtered(context, CHANGE, uuids=uuids).all()


@writer
def lock(context, uuids=(), instance_uuid=None):
    """Lock the ARQ rows by uuid or by instance until the transaction
    ends, waiting for a transaction changing them to end first.  Called
    before a transaction's first read, so that what it reads next is what
    was committed last (MariaDB's REPEATABLE READ would otherwise keep
    reading the snapshot its first read took).  The ARQ table only: the
    joined rows (a profile, a device) stay free for other writers.
    Returns the ids of the rows locked (those that exist, as last
    committed)."""
    if instance_uuid is not None:
        query, params = _LOCK_BY_INSTANCE, {'instance_uuid': instance_uuid}
    else:
        query, params = _LOCK_BY_UUIDS, {'uuids': list(uuids)}
    return _execute(context, query, params).scalars().all()


_LOCK_BY_INSTANCE = sa.select(_ARQ.c.id).where(
    _FILTERS['instance_uuid']).with_for_update()
_LOCK_BY_UUIDS = sa.select(_ARQ.c.id).where(
    _FILTERS['uuids']).with_for_update()


@writer
def handle_state(context, uuid):
    """(state, attach_handle_id, remote_handle_id, instance_uuid) of one
    ARQ as last committed, or None; locked until the transaction ends (a
    plain read could give an older snapshot's row, whose handles a guarded
    write then never matches)."""
    return _execute(context, _HANDLE_STATE, {'uuid': uuid}).first()


_HANDLE_STATE = sa.select(
    _ARQ.c.state, _ARQ.c.attach_handle_id, _ARQ.c.remote_handle_id,
    _ARQ.c.instance_uuid).where(_FILTERS['uuid']).with_for_update()


@reader
def get_to_bind(context, uuids, instance_uuids):
    """What a bind reads, in one statement: (``get_to_change`` rows of
    ``uuids``, rows of the ARQs binding or bound to ``instance_uuids``
    that are not among ``uuids``)."""
    wanted = set(uuids)
    rows = _execute(context, _TO_BIND, {
        'uuids': list(wanted), 'instances': list(instance_uuids)}).all()
    return ([row for row in rows if row.uuid in wanted],
            [row for row in rows if row.uuid not in wanted])


_TO_BIND = select(*CHANGE).where(sa.or_(
    _ARQ.c.uuid.in_(sa.bindparam('uuids', expanding=True)),
    sa.and_(
        _ARQ.c.instance_uuid.in_(sa.bindparam('instances', expanding=True)),
        _ARQ.c.state.in_([_constant(state)
                          for state in states.ARQ_HOLDING]))))


@reader
def holding(context, deployable_ids):
    """ARQs binding or bound to these deployables: rows of deployable_id,
    uuid, state, instance_uuid, project_id."""
    return _execute(context, select(
        _ARQ.c.deployable_id, _ARQ.c.uuid, _ARQ.c.state,
        _ARQ.c.instance_uuid, _ARQ.c.project_id)
        .where(_ARQ.c.deployable_id.in_(list(deployable_ids)),
               _ARQ.c.state.in_(states.ARQ_HOLDING))
        .order_by(_ARQ.c.id)).all()


# A profile that may program an FPGA at bind: a cheap filter on its JSON
# text (``_`` matches itself among any character); what it finds is
# parsed after (``programming.ask_of``).
_MAY_PROGRAM = sa.or_(_PROFILE.c.profile_json.like('%accel:bitstream_id%'),
                      _PROFILE.c.profile_json.like('%accel:function_id%'))


@reader
def holding_programmed_cards(context, hostname=None):
    """Every ARQ holding an attach handle of a card (``deployables
    .card_key``: its device) one of whose Bound ARQs' profile may have
    programmed it (``_MAY_PROGRAM``), of every host or of ``hostname``'s
    devices, by card then ARQ: rows of uuid, state, instance_uuid,
    project_id, attach_handle_id, bind_id, profile_json,
    device_profile_group_id, deployable_id, deployable_uuid, card,
    bitstream_id, gone and device_hostname.  For the FPGAs whose image a
    reboot took (``programming.restore_lost``); two statements' worth of
    work in one, none of it for a host with no such ARQ."""
    asked = _DEPLOYABLE.alias('asked')
    cards = (sa.select(deployable_db.card_key(asked.c))
             .select_from(_ARQ.join(
                 _PROFILE, _PROFILE.c.id == _ARQ.c.device_profile_id)
                 .join(asked, asked.c.id == _ARQ.c.deployable_id))
             .where(_ARQ.c.state == _constant(states.BOUND),
                    _ARQ.c.attach_handle_id.is_not(None), _MAY_PROGRAM))
    query = select(
        _ARQ.c.uuid, _ARQ.c.state, _ARQ.c.instance_uuid, _ARQ.c.project_id,
        _ARQ.c.attach_handle_id, _ARQ.c.bind_id, _PROFILE.c.profile_json,
        _ARQ.c.device_profile_group_id, _ARQ.c.deployable_id,
        _DEPLOYABLE.c.uuid.label('deployable_uuid'),
        deployable_db.card_key(_DEPLOYABLE.c).label('card'),
        _DEPLOYABLE.c.bitstream_id,
        _DEPLOYABLE.c.gone, _DEVICE.c.hostname.label('device_hostname'),
    ).where(_ARQ.c.attach_handle_id.is_not(None),
            _ARQ.c.state.in_([_constant(state)
                              for state in states.ARQ_HOLDING]),
            deployable_db.card_key(_DEPLOYABLE.c).in_(cards))
    if hostname is not None:
        query = query.where(_DEVICE.c.hostname == hostname)
    return _execute(context, query.order_by(
        deployable_db.card_key(_DEPLOYABLE.c), _ARQ.c.id)).all()


class _plus_seconds(sa.sql.functions.FunctionElement):
    """``time`` plus ``seconds`` (an integer column), in the SQL of each
    database: SQLite has no interval type, and MariaDB/MySQL and
    PostgreSQL spell the addition each their own way."""
    type = sa.DateTime()
    name = 'plus_seconds'
    inherit_cache = True


@compiles(_plus_seconds)
def _plus_seconds_mysql(element, compiler, **kw):
    time, seconds = (compiler.process(c, **kw) for c in element.clauses)
    return f'DATE_ADD({time}, INTERVAL {seconds} SECOND)'


@compiles(_plus_seconds, 'postgresql')
def _plus_seconds_postgresql(element, compiler, **kw):
    time, seconds = (compiler.process(c, **kw) for c in element.clauses)
    return f"({time} + {seconds} * INTERVAL '1 second')"


@compiles(_plus_seconds, 'sqlite')
def _plus_seconds_sqlite(element, compiler, **kw):
    # As the column holds times ('YYYY-MM-DD HH:MM:SS.ffffff'), to the
    # millisecond: compared as text with them.
    time, seconds = (compiler.process(c, **kw) for c in element.clauses)
    return (f"strftime('%Y-%m-%d %H:%M:%f', {time}, "
            f"'+' || {seconds} || ' seconds')")


# The deadline of an ARQ's bind: its start plus the [DEFAULT]bind_timeout
# of the conductor that started it (``bind_timeout``, written with
# ``bind_started_at``; NULL, and so no deadline, where a conductor of the
# previous release, which writes neither it nor clears it, started the
# ARQ's every bind).  A value a bind of this release left, which such a
# conductor did not clear when it ended that bind, is still some
# conductor's bind_timeout: the bind it started next is held to it from
# its own start, never failed sooner than that after it.
_DEADLINE = _plus_seconds(_ARQ.c.bind_started_at, _ARQ.c.bind_timeout)


@reader
def stuck(context, now, started_before, limit=100):
    """ARQs in BindStarted whose bind has run out of time: its deadline
    (``_DEADLINE``) is before ``now``, or, for a bind with none (no
    ``bind_timeout``: a conductor of the previous release started it),
    it started before ``started_before``.  Rows of ``uuid``, ``bind_id``
    (the bind each is stuck in, so that what is done to it is done to
    that bind only), ``bind_owner`` and ``bind_timeout``."""
    return _execute(context, select(
        _ARQ.c.uuid, _ARQ.c.bind_id, _ARQ.c.bind_owner, _ARQ.c.bind_timeout)
        .where(_ARQ.c.state == states.BIND_STARTED,
               sa.or_(_DEADLINE < now,
                      sa.and_(_ARQ.c.bind_timeout.is_(None),
                              _ARQ.c.bind_started_at < started_before)))
        .order_by(_ARQ.c.id).limit(limit)).all()


@reader
def initial_before(context, created_before, limit):
    """Uuids, oldest first, of up to ``limit`` ARQs never bound (still
    Initial) created before ``created_before``."""
    return list(_execute(context, select(_ARQ.c.uuid).where(
        _ARQ.c.state == states.INITIAL,
        _ARQ.c.created_at < created_before)
        .order_by(_ARQ.c.id).limit(limit)).scalars())


@reader
def owned_binding(context, owner, started_before, limit=1000):
    """``{uuid: bind_id}`` of ARQs in BindStarted whose bind conductor
    ``owner`` started before ``started_before``."""
    return dict(_execute(context, select(_ARQ.c.uuid, _ARQ.c.bind_id)
                         .where(_ARQ.c.bind_owner == owner,
                                _ARQ.c.state == states.BIND_STARTED,
                                _ARQ.c.bind_started_at < started_before)
                         .order_by(_ARQ.c.id).limit(limit)).all())


@reader
def outcomes(context, uuids):
    """{uuid: (state, instance_uuid)} of the ARQs among ``uuids`` that
    still exist."""
    if not uuids:
        return {}
    rows = _filtered(context, _OUTCOME, uuids=uuids).all()
    return {row.uuid: (row.state, row.instance_uuid) for row in rows}


_OUTCOME = (_ARQ.c.uuid, _ARQ.c.state, _ARQ.c.instance_uuid)


@reader
def count_by_state(context):
    """{state: number of ARQs} for the states that have any (one GROUP BY
    on an indexed column)."""
    return dict(_execute(context, select(_ARQ.c.state, sa.func.count())
                         .group_by(_ARQ.c.state)).all())


# -- writes -----------------------------------------------------------------

@writer
def create_many(context, values):
    """Insert ARQ rows, one dict of column values each."""
    context.session.execute(sa.insert(_ARQ), values)


@writer
def transition(context, uuid, to_state, from_states, values=None,
               where=None):
    """Move one ARQ to ``to_state`` if it is in ``from_states`` (and the
    extra ``where`` column values hold); returns the row count (0 or 1)."""
    values, where = values or {}, where or {}
    statement = _transition_statement(
        tuple(sorted(values)),
        tuple(sorted((k, v is None) for k, v in where.items())))
    params = {'t_uuid': uuid, 't_from': list(from_states), 't_to': to_state,
              't_now': models._now()}
    params.update(('v_' + k, v) for k, v in values.items())
    params.update(('w_' + k, v) for k, v in where.items() if v is not None)
    return _execute(context, statement, params).rowcount


@_sql.built_once
def _transition_statement(value_columns, where_shape):
    conditions = [
        _ARQ.c.uuid == sa.bindparam('t_uuid'),
        _ARQ.c.state.in_(sa.bindparam('t_from', expanding=True))]
    conditions += [_sql.equal_or_null(_ARQ, k, null, 'w_' + k)
                   for k, null in where_shape]
    return sa.update(_ARQ).where(*conditions).values(
        state=sa.bindparam('t_to'), updated_at=sa.bindparam('t_now'),
        **{k: sa.bindparam('v_' + k) for k in value_columns})


@reader
def bind_of(context, uuid):
    """The ARQ's ``bind_id`` (None: in no bind, or gone)."""
    return _execute(context, select(_ARQ.c.bind_id).where(
        _ARQ.c.uuid == uuid)).scalar()


@reader
def handle_holder(context, handle_id):
    """The bind (``bind_id``; '' for one an older release made) of the
    ARQ holding attach handle ``handle_id``, or None when none does (a
    remote pool's handle: ``remote_pools.holder`` of cyborg.db.api)."""
    row = _execute(context, select(_ARQ.c.bind_id).where(
        _ARQ.c.attach_handle_id == handle_id)).first()
    return None if row is None else (row.bind_id or '')


@writer
def set_attach_handle(context, uuid, handle_id, bind_id):
    """Record the handle on an ARQ still in BindStarted with none, for
    the bind ``bind_id``."""
    result = context.session.execute(
        sa.update(_ARQ).where(_ARQ.c.uuid == uuid,
                              _ARQ.c.state == states.BIND_STARTED,
                              _ARQ.c.bind_id == bind_id,
                              _ARQ.c.attach_handle_id.is_(None))
        .values(attach_handle_id=handle_id, updated_at=models._now()))
    return result.rowcount


@writer
def set_remote_handle(context, uuid, handle_id, bind_id):
    """Record a remote pool's handle on an ARQ still in BindStarted with
    none, for the bind ``bind_id``."""
    result = context.session.execute(
        sa.update(_ARQ).where(_ARQ.c.uuid == uuid,
                              _ARQ.c.state == states.BIND_STARTED,
                              _ARQ.c.bind_id == bind_id,
                              _ARQ.c.remote_handle_id.is_(None))
        .values(remote_handle_id=handle_id, updated_at=models._now()))
    return result.rowcount


@writer
def delete_holding(context, uuid, attach_handle_id, remote_handle_id):
    """Delete one ARQ if it still holds exactly these handles (None:
    none); returns the row count (0 or 1)."""
    statement = _delete_statement(attach_handle_id is None,
                                  remote_handle_id is None)
    params = {'uuid': uuid}
    if attach_handle_id is not None:
        params['attach_handle_id'] = attach_handle_id
    if remote_handle_id is not None:
        params['remote_handle_id'] = remote_handle_id
    return _execute(context, statement, params).rowcount


@_sql.built_once
def _delete_statement(no_attach_handle, no_remote_handle):
    return sa.delete(_ARQ).where(
        _ARQ.c.uuid == sa.bindparam('uuid'),
        _sql.equal_or_null(_ARQ, 'attach_handle_id', no_attach_handle,
                           'attach_handle_id'),
        _sql.equal_or_null(_ARQ, 'remote_handle_id', no_remote_handle,
                           'remote_handle_id'))


@writer
def delete_many(context, uuids):
    """Delete ARQ rows (their handles must have been released)."""
    context.session.execute(
        sa.delete(_ARQ).where(_ARQ.c.uuid.in_(list(uuids))))


# -- deletes cut short --------------------------------------------------------
# A delete with something to release outside the database first (an mdev
# to remove, a fabric handle to detach) marks its ARQs Deleting, with its
# conductor (``bind_owner``), when (``bind_started_at``) and how long it
# has (``bind_timeout``, seconds), before those releases; a delete cut
# short after
# them is finished from the mark (``arq_binding.finish_deletes``).

@writer
def mark_deleting(context, uuids, owner, now, seconds):
    """Move the ARQs ``uuids``, locked by the caller's transaction, to
    Deleting for the delete of conductor ``owner`` started ``now``, to
    end within ``seconds``; what they hold (handles, binding) is
    kept."""
    context.session.execute(
        sa.update(_ARQ).where(_ARQ.c.uuid.in_(list(uuids)))
        .values(state=states.DELETING, bind_owner=owner,
                bind_started_at=now, bind_timeout=seconds,
                updated_at=models._now()))


@reader
def deletes_left(context, now=None, owner=None, started_before=None,
                 uuids=None, limit=100):
    """Uuids of ARQs in Deleting whose delete nobody carries on: past its
    deadline at ``now`` (one with none counts as past), or, with
    ``owner``, marked by that conductor before ``started_before`` (its
    previous run's).  ``uuids``: among those only."""
    if owner is not None:
        left = sa.and_(_ARQ.c.bind_owner == owner,
                       _ARQ.c.bind_started_at < started_before)
    else:
        left = sa.or_(_ARQ.c.bind_timeout.is_(None), _DEADLINE < now)
    query = select(_ARQ.c.uuid).where(_ARQ.c.state == states.DELETING, left)
    if uuids is not None:
        query = query.where(_ARQ.c.uuid.in_(list(uuids)))
    return list(_execute(context, query.order_by(_ARQ.c.id)
                         .limit(limit)).scalars())
