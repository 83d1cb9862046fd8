"""Deployables, one at a time: what the API reads (with their device's
health), the targets of a bind (cyborg.conductor.arq_binding) and of FPGA
programming (cyborg.conductor.programming), and what programming records.
A host's deployables as a whole are read and written by its reports
(``inventory``)."""

import collections
import datetime
import uuid as uuidlib

import sqlalchemy as sa

from cyborg.common import states
from cyborg.db import models
from cyborg.db.api import _sql
from cyborg.db.api import reader, writer


@reader
def get(context, uuid=None, id=None):
    """One deployable by uuid or integer id, or None."""
    return _sql.one(context, models.Deployable, uuid=uuid, id=id)


_DEPLOYABLES = models.Deployable.__table__
_DEVICES = models.Device.__table__

# A sort key's NULL (updated_at of a row never updated): no row value
# comparison with it holds, and each database puts it elsewhere in the
# order; pages sort it as this, the earliest time, on every database.
_NO_TIME = datetime.datetime(1970, 1, 1)

# Bind parameter name of the sort key a page resumes after (the id and
# the size are _sql's).
_AFTER_KEY = 'cyborg_after_key'


def _with_device_health():
    """Deployables (Rows of their columns) with their device's health
    (``device_health``, ``_reason``, ``_updated_at``): one join."""
    d, dev = _DEPLOYABLES, _DEVICES
    return (sa.select(d, dev.c.health.label('device_health'),
                      dev.c.health_reason.label('device_health_reason'),
                      dev.c.health_updated_at.label(
                          'device_health_updated_at'))
            .join(dev, dev.c.id == d.c.device_id))


@_sql.built_once
def _one_statement(columns):
    # The API's reads of one deployable, by uuid or id (``columns``).
    return _with_device_health().where(*_sql.equal_to(_DEPLOYABLES, columns))


def _sort_column(sort_key):
    """What a page sorts by for ``sort_key``, one of the object's
    SORT_KEYS (the API checks it, so the shapes are few): the column, the
    times with their NULL as ``_NO_TIME``."""
    column = _DEPLOYABLES.c[sort_key]
    if not column.nullable:
        return column
    assert isinstance(column.type, sa.DateTime), sort_key
    return sa.func.coalesce(column, sa.literal(_NO_TIME, column.type))


@_sql.built_once
def _page_statement(sort_key, descending, named, after, limited):
    d = _DEPLOYABLES
    column = _sort_column(sort_key)
    order = sa.desc if descending else sa.asc
    query = _with_device_health().order_by(order(column), order(d.c.id))
    if named:
        query = query.where(d.c.name == sa.bindparam('name'))
    if after:
        key = sa.tuple_(column, d.c.id)
        last = sa.tuple_(sa.bindparam(_AFTER_KEY, type_=column.type),
                         sa.bindparam(_sql.AFTER_ID, type_=d.c.id.type))
        query = query.where(key < last if descending else key > last)
    if limited:
        query = query.limit(sa.bindparam(_sql.LIMIT))
    return query


@_sql.built_once
def _marker_statement(sort_key):
    # Where a page resumes: the marker's sort key and id.
    d = _DEPLOYABLES
    return sa.select(_sort_column(sort_key).label('key'), d.c.id).where(
        d.c.uuid == sa.bindparam('marker'))


@reader
def get_with_device(context, uuid=None, id=None):
    """One deployable row of ``_with_device_health`` by uuid or integer
    id, or None."""
    given = _sql.not_none({'uuid': uuid, 'id': id})
    if not given or not _sql.matchable(*given.values()):
        return None
    return _sql.connection(context).execute(
        _one_statement(tuple(given)), given).first()


@reader
def get_page(context, name=None, limit=None, marker=None, sort_key='id',
             sort_dir='asc'):
    """A page of ``_with_device_health`` rows, ordered by ``sort_key``
    then id.

    ``marker`` is the uuid of the last deployable of the previous page.
    """
    if not _sql.matchable(name, marker):
        return None if marker is not None else []
    connection = _sql.connection(context)
    given = {}
    if name is not None:
        given['name'] = name
    if marker is not None:
        last = connection.execute(_marker_statement(sort_key),
                                  {'marker': marker}).first()
        if last is None:
            return None
        given[_AFTER_KEY], given[_sql.AFTER_ID] = last.key, last.id
    if limit is not None:
        given[_sql.LIMIT] = limit
    statement = _page_statement(sort_key, sort_dir == 'desc',
                                name is not None, marker is not None,
                                limit is not None)
    return connection.execute(statement, given).all()


# Built once, like the reads above.
_ATTRIBUTE_LISTS = (
    sa.select(models.Attribute.deployable_id, models.Attribute.key,
              models.Attribute.value)
    .where(models.Attribute.deployable_id.in_(
        sa.bindparam('deployable_ids', expanding=True)))
    .order_by(models.Attribute.id))


@reader
def attribute_lists(context, deployable_ids):
    """{deployable id: [(key, value), ...]} for these deployables."""
    found = {}
    for row in _sql.connection(context).execute(
            _ATTRIBUTE_LISTS, {'deployable_ids': list(deployable_ids)}):
        found.setdefault(row.deployable_id, []).append((row.key, row.value))
    return found


@reader
def bind_targets(context, rp_uuids):
    """{rp_uuid: row} for the deployables providing ``rp_uuids``, each
    row carrying the deployable (and its health), its device's host,
    status and health, and the name of that host's compute node provider
    once a sync found it."""
    return {row.rp_uuid: row for row in _sql.connection(context).execute(
        _BIND_TARGETS, {'rp_uuids': list(rp_uuids)})}


@reader
def providing(context, rp_uuids):
    """Those of ``rp_uuids`` a deployable (of any host) provides."""
    d = models.Deployable
    if not rp_uuids:
        return set()
    return set(_sql.connection(context).scalars(
        sa.select(d.rp_uuid).where(d.rp_uuid.in_(list(rp_uuids)))))


def _bind_targets():
    d, dev, h = models.Deployable, models.Device, models.Host
    return (sa.select(d.id.label('deployable_id'),
                      d.uuid.label('deployable_uuid'), d.rp_uuid, d.gone,
                      d.driver_name, d.bitstream_id, d.device_id,
                      d.health, d.health_reason,
                      dev.hostname, dev.status,
                      dev.health.label('device_health'),
                      dev.health_reason.label('device_health_reason'),
                      h.compute_node_name)
            .join(dev, dev.id == d.device_id)
            .outerjoin(h, h.hostname == dev.hostname)
            .where(d.rp_uuid.in_(sa.bindparam('rp_uuids', expanding=True))))


# Built once (a bind's hottest read): see arqs._filtered.
_BIND_TARGETS = _bind_targets()


def card_key(deployables):
    """What makes deployables one card, of ``deployables`` (the model, an
    alias of it, or a table's columns, ``table.c``): their device.  A
    card with VFs (an Intel DFL card: its PF and VFs, each a deployable
    of one device) is programmed whole, through its PF, whichever of its
    deployables asks, and a programming mark on any of them is the
    card's.  The one definition of a card: every reading of one
    (``_card_rows``, ``card_programming``, ``card_providers``,
    ``card_marks``, ``card_holds``, ``attach_handles``' take and held
    count, and ``arqs.holding_programmed_cards``) goes through it."""
    return deployables.device_id


def card_marks():
    """A grouped subquery: ``card`` (``card_key``) and ``programming_until``
    (the latest mark of its deployables) of each card a programming
    marks, for a read of deployables to join on its own ``card_key``
    (Placement's rows, ``inventory.host_providers``: every provider of
    the card is reserved whole while any of its deployables is marked).
    It reads the few marked rows (``deployables_programming_until_idx``),
    not the card's."""
    d = _DEPLOYABLES
    return (sa.select(card_key(d.c).label('card'),
                      sa.func.max(d.c.programming_until)
                      .label('programming_until'))
            .where(d.c.programming_until.isnot(None))
            .group_by(card_key(d.c)).subquery('card_marks'))


_HANDLES = models.AttachHandle.__table__


def held_gone(deployables, handles=_HANDLES):
    """The condition that a deployable of ``deployables`` (a table's
    columns, ``table.c``) is kept gone (its hardware vanished) while an
    attach handle of it is in use: an instance still runs on what it
    was.  Its card (``card_key``) is then offered no more, through any
    of its deployables (``card_holds``, ``attach_handles.take``): the
    hardware reported anew in its place (a GPU whose vGPUs or VFs are
    not back yet after a reboot or a driver reload, reported whole; an
    FPGA's PF, its VFs not back) is still what the instance uses."""
    return sa.and_(deployables.gone == sa.true(), sa.exists().where(
        handles.c.deployable_id == deployables.id,
        handles.c.in_use == sa.true()))


def card_holds():
    """A grouped subquery: ``card`` (``card_key``) of each card one of
    whose deployables is kept gone under an attach handle in use
    (``held_gone``), for a read of deployables to join on its own
    ``card_key`` (Placement's rows, ``inventory.host_providers``: every
    provider of the card is reserved whole until that handle is
    released).  It reads the few gone rows (``deployables_gone_idx``),
    not the card's."""
    d = _DEPLOYABLES
    return (sa.select(card_key(d.c).label('card'))
            .where(held_gone(d.c))
            .group_by(card_key(d.c)).subquery('card_holds'))


def _card_rows(context, deployable_id, columns, lock):
    """The rows (``columns``) of every deployable of the deployable's card
    (its device: a card with VFs is programmed whole, through its PF,
    whichever VF asks), each of them locked (``lock``: 'share' or
    'update').  All of them, whatever their mark: PostgreSQL locks only
    the rows a locking read returns, and one that a concurrent
    programming's uncommitted mark will change, read without it by this
    statement's snapshot, would be passed over rather than waited for.
    Locked, each is read as last committed, after any transaction still
    writing it has ended (on MariaDB as on PostgreSQL)."""
    d = models.Deployable
    card = context.session.scalar(
        sa.select(card_key(d)).where(d.id == deployable_id))
    if card is None:
        return []
    return context.session.execute(
        sa.select(*columns).where(card_key(d) == card).order_by(d.id)
        .with_for_update(read=lock == 'share')).all()


@writer
def being_programmed(context, deployable_id):
    """Whether a programming marks the deployable's card (the deployable
    or another of its device's), read with a share lock: the latest mark
    committed, even in a transaction that read the row before it
    (MariaDB's REPEATABLE READ would show that older read)."""
    d = models.Deployable
    return any(row.programming_until is not None for row in _card_rows(
        context, deployable_id, (d.programming_until,), 'share'))


# What a bind that programs a deployable reads of its card in the
# bind's own transaction (``card_for_bind``).
CardForBind = collections.namedtuple('CardForBind',
                                     'marked bitstream_id deployable_ids')


@writer
def card_for_bind(context, deployable_id):
    """What a bind that programs the deployable must know of its card,
    read in the bind's transaction with a share lock on each of the
    card's deployables (``_card_rows``): as last committed, after any
    programming's claim still uncommitted has ended, even where the
    transaction's snapshot is older (MariaDB's REPEATABLE READ reads a
    plain SELECT as of the transaction's first read, and missed a mark
    committed since).  ``marked``: as ``card_programming`` gives it
    (None where no programming marks the card); ``bitstream_id``: the
    image the deployable runs; ``deployable_ids``: the card's
    deployables.  None when the deployable is gone."""
    d = models.Deployable
    rows = _card_rows(context, deployable_id,
                      (d.id, d.uuid, d.programming_until, d.bitstream_id),
                      'share')
    if not rows:
        return None
    marked = next(((row.uuid, row.programming_until) for row in rows
                   if row.programming_until is not None), None)
    own = next((row.bitstream_id for row in rows
                if row.id == deployable_id), None)
    return CardForBind(marked, own, tuple(row.id for row in rows))


@reader
def card_programming(context, deployable_id):
    """``(uuid, programming_until)`` of the deployable of the deployable's
    card (itself or another of its device's) that a programming marks, or
    None."""
    d, card = models.Deployable, sa.orm.aliased(models.Deployable)
    return _sql.connection(context).execute(
        sa.select(card.uuid, card.programming_until)
        .join(d, card_key(d) == card_key(card))
        .where(d.id == deployable_id, card.programming_until.isnot(None))
        .order_by(card.id).limit(1)).first()


@reader
def card_providers(context, deployable_id):
    """The providers (``rp_uuid``) of every deployable of the
    deployable's card (itself and its device's others): what a
    programming mark on it reserves in Placement, and what its sync
    writes."""
    d, card = models.Deployable, sa.orm.aliased(models.Deployable)
    return set(_sql.connection(context).scalars(
        sa.select(card.rp_uuid)
        .join(d, card_key(d) == card_key(card))
        .where(d.id == deployable_id, card.rp_uuid.isnot(None))))


@reader
def count_programming(context):
    """How many deployables a programming marks now."""
    d = models.Deployable
    return _sql.connection(context).scalar(
        sa.select(sa.func.count()).select_from(d)
        .where(d.programming_until.isnot(None)))


@reader
def count_by_health(context):
    """{health state: number of deployables} by their own health (a
    partition's fault, apart from its device's), for the states that
    have any (one GROUP BY over a join).  A deployable 'lost' with its
    device (a card pulled, its partitions with it) is left out: its
    device counts in cyborg_conductor_devices, and an alert on both
    would say one loss twice; one lost alone (a MIG instance gone under
    an allocation, its GPU still here) counts."""
    d, dev = models.Deployable, models.Device
    lost_alone = sa.or_(d.health != states.LOST, dev.health != states.LOST)
    return dict(_sql.connection(context).execute(
        sa.select(d.health, sa.func.count())
        .join(dev, dev.id == d.device_id)
        .where(lost_alone).group_by(d.health)).all())


@reader
def program_target(context, deployable_uuid):
    """The deployable with its device's host, status and control path."""
    d, dev, c = models.Deployable, models.Device, models.ControlpathID
    return _sql.connection(context).execute(
        sa.select(d.id.label('deployable_id'),
                  d.uuid.label('deployable_uuid'), d.rp_uuid, d.gone,
                  d.driver_name, d.bitstream_id, d.device_id, d.name,
                  d.programming_until,
                  dev.hostname, dev.status, dev.type.label('device_type'),
                  c.cpid_type, c.cpid_info)
        .join(dev, dev.id == d.device_id)
        .join(c, c.device_id == dev.id)
        .where(d.uuid == deployable_uuid)).first()


@reader
def program_target_by_id(context, deployable_id):
    """``program_target`` of the deployable with this integer id."""
    d = models.Deployable
    uuid = _sql.connection(context).scalar(
        sa.select(d.uuid).where(d.id == deployable_id))
    return None if uuid is None else program_target(context, uuid)


@writer
def set_bitstream(context, deployable_id, bitstream_id):
    d = models.Deployable
    context.session.execute(
        sa.update(d).where(d.id == deployable_id)
        .values(bitstream_id=bitstream_id, updated_at=models._now())
        .execution_options(synchronize_session=False))


@writer
def set_programming_until(context, deployable_id, until, was=None):
    """Mark the deployable as being programmed until ``until`` (None:
    clear the mark).  With ``was``, only if the mark is still that one (a
    later programming's is left alone); returns whether it was set."""
    d = models.Deployable
    query = sa.update(d).where(d.id == deployable_id)
    if was is not None:
        query = query.where(d.programming_until == was)
    return context.session.execute(
        query.values(programming_until=until)
        .execution_options(synchronize_session=False)).rowcount == 1


@writer
def claim_programming(context, deployable_id, until):
    """Mark the deployable as being programmed until ``until`` unless a
    programming marks its card already (the deployable or another of its
    device's; this conductor's or another's, live or left behind);
    returns whether it is now ours.  The card's deployables are locked
    first (``_card_rows``): two claims on one card, through two of its
    VFs, run one after the other, and the second finds the first's mark.
    A bind's take reads the same rows (``attach_handles.take``).  A
    caller that also writes the host's row locks it first
    (``programming._claimed``), as reports and health writes do: the
    host's row, then its deployables'."""
    d = models.Deployable
    rows = _card_rows(context, deployable_id,
                      (d.id, d.programming_until), 'update')
    if any(row.programming_until is not None for row in rows):
        return False
    return context.session.execute(
        sa.update(d).where(d.id == deployable_id,
                           d.programming_until.is_(None))
        .values(programming_until=until)
        .execution_options(synchronize_session=False)).rowcount == 1


@reader
def overdue_programmings(context, now, limit=100):
    """``[(deployable id, programming_until)]`` of programmings that
    should have ended by ``now`` (``deployables_programming_until_idx``
    finds the few there are)."""
    d = models.Deployable
    return [tuple(row) for row in _sql.connection(context).execute(
        sa.select(d.id, d.programming_until)
        .where(d.programming_until <= now)
        .order_by(d.programming_until).limit(limit))]


@reader
def function_trait(context, deployable_id, key, lock=False):
    """The FPGA function trait kept as the deployable's attribute ``key``
    (``set_function_trait``), or None; with ``lock``, read with a share
    lock (as last committed: a bind's transaction, see
    ``card_for_bind``)."""
    at = models.Attribute
    query = sa.select(at.value).where(at.deployable_id == deployable_id,
                                      at.key == key)
    if lock:
        query = query.with_for_update(read=True)
    return _sql.connection(context).scalar(query)


@writer
def set_function_trait(context, deployable_id, key, trait):
    """Keep (or with ``trait`` None drop) the deployable's FPGA function
    trait as attribute ``key``; its uuid is not derived from the host, so
    reports leave it alone and the Placement sync advertises it."""
    at = models.Attribute
    context.session.execute(
        sa.delete(at).where(at.deployable_id == deployable_id, at.key == key)
        .execution_options(synchronize_session=False))
    if trait:
        context.session.execute(sa.insert(at).values(
            uuid=str(uuidlib.uuid4()), deployable_id=deployable_id, key=key,
            value=trait, created_at=models._now()))
