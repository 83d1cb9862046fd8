"""A host's inventory as the exports read it (cyborg.exports): devices
with their deployables, attributes and attach handles, as plain data."""

import dataclasses
import datetime
import json

from cyborg.common import states
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from cyborg.placement import provider_tree


@dataclasses.dataclass
class Handle:
    uuid: str
    attach_type: str
    attach_info: dict
    in_use: bool


@dataclasses.dataclass
class Deployable:
    uuid: str
    name: str
    driver_name: str
    num_accelerators: int
    attributes: dict
    handles: list
    # False when nothing new may land on it (gone, its device in
    # maintenance, unhealthy, being programmed: provider_tree.blocked,
    # the rule Placement reserves it whole by): the exports leave it out.
    schedulable: bool


@dataclasses.dataclass
class Device:
    uuid: str
    type: str
    vendor: str
    model: str
    deployables: list


@dataclasses.dataclass
class HostInventory:
    hostname: str
    devices: list
    # Grows whenever the host's inventory changes: the newest of its
    # rows' timestamps and its host row's, in microseconds since the
    # epoch (``_generation``).
    generation: int = 1


def host_inventories(context, hostname=None):
    """The HostInventory of every host with devices, sorted by name, or
    of ``hostname`` alone (no devices when unknown): the same few
    queries however many hosts there are."""
    names = None if hostname is None else [hostname]
    rows = inventory_db.load_hosts(context, names)
    changes = host_db.changes_and_shared(context, names)
    return [_host_inventory(host, rows[host], *changes.get(host,
                                                            (None, False)))
            for host in (names or sorted(rows))]


def _host_inventory(hostname, rows, host_changed_at, shared=False):
    """``shared``: another host row records the host's compute node
    provider (``hosts.has_sharer``: the same hardware under two names):
    none of its deployables is offered, as Placement reserves them
    all."""
    attributes, handles = {}, {}
    for row in rows['attributes']:
        attributes.setdefault(row['deployable_id'], {})[row['key']] = (
            row['value'])
    for row in sorted(rows['attach_handles'], key=lambda r: r['id']):
        if row.get('gone'):
            continue        # no longer there: not a unit to offer
        handles.setdefault(row['deployable_id'], []).append(Handle(
            uuid=row['uuid'], attach_type=row['attach_type'],
            attach_info=json.loads(row['attach_info'] or '{}'),
            in_use=bool(row['in_use'])))
    deployables = {}
    devices = {row['id']: row for row in rows['devices']}
    # A programming mark on any deployable of a card (its device:
    # deployables.card_key) holds every deployable of it, as Placement
    # reserves each provider of the card whole.
    marks = {row['device_id']: row['programming_until']
             for row in rows['deployables']
             if row['programming_until'] is not None}
    # So does a deployable of it kept gone while a handle of it is in use
    # (deployables.held_gone: an instance still runs on what it was).
    taken = {row['deployable_id'] for row in rows['attach_handles']
             if row['in_use']}
    held = {row['device_id'] for row in rows['deployables']
            if row['gone'] and row['id'] in taken}
    for row in sorted(rows['deployables'], key=lambda r: r['name']):
        device = devices[row['device_id']]
        schedulable = not shared and not provider_tree.blocked(
            device['status'], states.worst(row['health'], device['health']),
            row['gone'] or row['device_id'] in held,
            row['programming_until'] or marks.get(row['device_id']))
        deployables.setdefault(row['device_id'], []).append(Deployable(
            uuid=row['uuid'], name=row['name'],
            driver_name=row['driver_name'] or 'unknown',
            num_accelerators=row['num_accelerators'],
            attributes=attributes.get(row['id'], {}),
            handles=handles.get(row['id'], []), schedulable=schedulable))
    return HostInventory(hostname=hostname, generation=_generation(
        rows, host_changed_at), devices=[
        Device(uuid=row['uuid'], type=row['type'], vendor=row['vendor'],
               model=row['model'], deployables=deployables.get(row['id'],
                                                               []))
        for row in sorted(rows['devices'], key=lambda r: r['uuid'])])


# Naive UTC, as every timestamp column holds.
_EPOCH = datetime.datetime(1970, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)


def _generation(rows, host_changed_at):
    """The newest of the rows' timestamps and ``host_changed_at`` (its
    last report or other change of the host's row), in whole
    microseconds since the epoch (exact integer arithmetic): every
    database keeps the microseconds of a change (MariaDB and MySQL since
    migration 6b2d8f4e1c07, ``models.DATETIME``), so two changes within
    one second give two generations.  A row deleted does not move it,
    unless the deletion moves the host's row: an attribute deleted marks
    its host unsynced, which does; a gone deployable's clean-up does
    not, but its units were not offered any more
    (doc/source/exports.rst)."""
    stamps = [row.get(column) for table in rows.values() for row in table
              for column in ('created_at', 'updated_at')]
    stamps.append(host_changed_at)
    stamps = [s for s in stamps if s is not None]
    if not stamps:
        return 1
    return max(1, (max(stamps).replace(tzinfo=None) - _EPOCH)
               // _MICROSECOND)
