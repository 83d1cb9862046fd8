"""Step 1 of report handling: stored host state + report -> plan.

A pure function (no database, no Placement, no clock): given the rows the
database holds for the devices a report concerns and the report's devices,
``make_plan`` returns the rows to add, update and delete, table by table,
plus which Placement providers changed or went away.

Row identity: every row the conductor makes for a report has a uuid derived
from the host and the hardware (``inventory.row_uuid``), so two conductors
planning the same report produce the same rows and collide on unique keys
instead of duplicating.  Attributes and attach handles whose uuid is NOT
derived that way were made by someone else (an operator's ``POST
/attributes``) and are never deleted by a report.

Truth rule: a deployable whose provider holds allocations in Placement
(``held_providers``), or one of whose attach handles is in use, is not
deleted when its hardware disappears; it is marked ``gone`` (its provider
keeps ``reserved = total``) and removed once they are released.  Its
health becomes 'lost' in the same update, and so does its device's when
the whole device vanished (the device row stays while one of its
deployables does); when the hardware comes back it is 'unhealthy' until
the health state machine's hold-down and re-probe re-admit it
(``health_machine``).  Hardware that vanishes
while not healthy (its own health or its device's) is kept the same way,
allocated or not, so that it does not come back as new and healthy; so
is a device that vanishes in a status other than the one a new device
starts in (an operator's ``maintaining``, or ``enabled`` where new devices
start ``maintaining``), with its deployables, so that it comes back in
that status.  Such a device is kept even when it has no deployable (a
GPU in MIG mode without MIG instances).  Gone rows are removed
(``placement_sync.drop_released_gone`` and the reconcile) once no
allocation holds them and ``health_machine.remembered`` no longer keeps
them; a device row only once it is itself 'lost' (it vanished: a device
still reported may have no deployable left) and has none left.

Lifecycle: a device the report adds starts in the status the caller
passes (``[conductor]new_device_status``); a device already known keeps
its status (it is the operator's, never the report's), also across a
vanishing as above, and one that comes back keeps its uuid, derived from
the host and its address.
"""

import collections
import dataclasses
import functools
import json
import re

from cyborg.common import exception
from cyborg.common import states
from cyborg.conductor import health_machine
from cyborg.db import models
from cyborg.objects import inventory

TABLES = ('devices', 'controlpath_ids', 'deployables', 'attributes',
          'attach_handles')


# -- row identity -----------------------------------------------------------

def device_uuid(hostname, device_key):
    return inventory.row_uuid(hostname, device_key)


def controlpath_uuid(hostname, device_key):
    return inventory.row_uuid(hostname, device_key, 'controlpath_id')


def deployable_uuid(hostname, deployable_name):
    return inventory.row_uuid(hostname, 'deployable', deployable_name)


def attribute_uuid(hostname, deployable_name, key):
    return inventory.row_uuid(hostname, 'attribute', deployable_name, key)


def attach_handle_uuid(hostname, deployable_name, handle_key):
    return inventory.row_uuid(hostname, 'attach_handle', deployable_name,
                              handle_key)


def to_json(value):
    """Board info and attach info as stored: JSON text (strings as is)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


# -- the plan ---------------------------------------------------------------

@dataclasses.dataclass
class Plan:
    """Rows to write, by table.  ``add`` rows name their parents by uuid
    (``device_uuid``, ``controlpath_uuid``, ``deployable_uuid``);
    ``update`` rows are ``{'uuid': u, <changed columns>}``."""

    add: dict = dataclasses.field(
        default_factory=lambda: {t: [] for t in TABLES})
    update: dict = dataclasses.field(
        default_factory=lambda: {t: [] for t in TABLES})
    delete: dict = dataclasses.field(
        default_factory=lambda: {t: [] for t in TABLES})
    # Providers whose inventory or traits may have changed.
    touched_providers: set = dataclasses.field(default_factory=set)
    # Providers whose deployable is deleted: to delete from Placement.
    removed_providers: set = dataclasses.field(default_factory=set)
    # Providers the plan would delete; held ones must be kept instead.
    removal_candidates: set = dataclasses.field(default_factory=set)
    # Handles no longer reported but kept while an ARQ holds them: a later
    # full report drops each once it is free.
    kept_handles: int = 0
    # {device key: reason} of the devices a full report skipped whose
    # stored rows fail the same checks (``stored_problem``): planned as
    # vanished hardware rather than kept.
    unkept: dict = dataclasses.field(default_factory=dict)

    @property
    def empty(self):
        return not any(rows for part in (self.add, self.update, self.delete)
                       for rows in part.values())

    def statement_count(self):
        return sum(len(rows) for part in (self.add, self.update, self.delete)
                   for rows in part.values())


class _Stored:
    """The stored rows, indexed the way planning walks them."""

    def __init__(self, rows):
        self.devices = {d['uuid']: d for d in rows.get('devices', ())}
        self.deployables = _group(rows.get('deployables', ()), 'device_id')
        self.attributes = _group(rows.get('attributes', ()), 'deployable_id')
        self.handles = _group(rows.get('attach_handles', ()),
                              'deployable_id')


def _group(rows, key):
    grouped = {}
    for row in rows:
        grouped.setdefault(row[key], []).append(row)
    return grouped


def make_plan(hostname, stored_rows, devices, removed_keys=(), full=False,
              held_providers=frozenset(), new_device_status=states.ENABLED,
              now=None, kept_keys=frozenset(), remove_unreported=True,
              health_settings=None):
    """The changes that make the stored rows match the report.

    ``stored_rows``: {table: [row dicts]} for the devices concerned (all of
    the host's for a full report); ``devices``: the reported
    ``DriverDevice`` objects; ``removed_keys``: device keys a delta says
    are gone; ``full``: stored devices not reported are gone too;
    ``held_providers``: provider uuids with allocations in Placement
    (those of deployables with an attach handle in use are held too);
    ``new_device_status``: the status of added devices; ``now``: the time
    health changes (lost, came back) are stamped with; ``kept_keys``:
    keys of devices the report has but this conductor skipped, never
    gone, unless a full report finds their stored rows failing the
    report's checks too (``stored_problem``: stored before those
    checks), which go as vanished hardware; ``remove_unreported`` False:
    a full report removes nothing else (one of its devices could not be
    identified); ``health_settings``: the ``health_machine.Settings`` the
    hold-down of hardware that came back is computed with (the defaults
    when None).
    """
    came_back = functools.partial(
        health_machine.came_back,
        settings=health_settings or health_machine.Settings())
    stored = _Stored(stored_rows)
    held_providers = frozenset(held_providers) | _taken(stored_rows)
    plan = Plan()
    if full:
        plan.unkept = _unkept(hostname, stored, kept_keys)
    reported = set()
    for device in devices:
        uuid = device_uuid(hostname, device.key())
        reported.add(uuid)
        row = stored.devices.get(uuid)
        if row is None:
            _add_device(plan, hostname, device, new_device_status)
        else:
            _change_device(plan, hostname, stored, row, device,
                           held_providers, now, came_back)
    reported.update(device_uuid(hostname, key) for key in kept_keys
                    if key not in plan.unkept)
    if full:
        gone = [u for u in stored.devices if u not in reported] \
            if remove_unreported else \
            [device_uuid(hostname, key) for key in sorted(plan.unkept)]
    else:
        gone = [device_uuid(hostname, key) for key in removed_keys
                if device_uuid(hostname, key) not in reported]
    for uuid in gone:
        row = stored.devices.get(uuid)
        if row is not None:
            _remove_device(plan, stored, row, held_providers, now,
                           new_device_status)
    return plan


def _taken(stored_rows):
    """The providers of the stored deployables an attach handle in use
    holds: held, whatever Placement answered.  An ARQ binds after its
    instance's allocation is made, and can take a handle after Placement
    was asked, or after the report read the handle free (it then plans
    again: ``inventory.write``); deleted, the deployable would take the
    ARQ's handle with it."""
    taken = {row['deployable_id']
             for row in stored_rows.get('attach_handles', ())
             if row.get('in_use')}
    if not taken:
        return frozenset()
    return frozenset(row.get('rp_uuid') or _rp_uuid(row['name'])
                     for row in stored_rows.get('deployables', ())
                     if row['id'] in taken)


def _unkept(hostname, stored, kept_keys):
    """{key: reason} of the skipped devices (``kept_keys``) whose stored
    rows fail the checks of a report's device.  Such rows were stored
    before those checks: kept, they would be offered to the scheduler
    and fail each bind given them, each period, as the device is
    reported again.  A device whose stored rows pass is kept as stored
    (a driver reporting a bad value for a while loses nothing)."""
    unkept = {}
    for key in sorted(kept_keys):
        row = stored.devices.get(device_uuid(hostname, key))
        if row is None:
            continue
        problem = stored_problem(stored, row, key)
        if problem:
            unkept[key] = problem
    return unkept


def stored_problem(stored, row, key):
    """Why the stored rows of the device ``row`` (whose key is ``key``)
    fail what a report's device is checked for (its control path id, its
    handles' attach_info), or None.  Handles already ``gone`` (never
    taken again) are not looked at."""
    cpid_type, _sep, cpid_info = key.partition(':')
    problem = _cpid_problem(cpid_type, cpid_info)
    if problem:
        return problem
    for deployable in stored.deployables.get(row['id'], ()):
        for handle in stored.handles.get(deployable['id'], ()):
            if handle.get('gone') or \
                    handle['attach_type'] not in ATTACH_INFO_TEXT:
                continue
            try:
                info = json.loads(handle['attach_info'] or '{}')
            except ValueError:
                info = handle['attach_info']
            attach = inventory.AttachHandle(handle['attach_type'], info)
            problem = (_object_problem('attach_info', info)
                       or _attach_info_problem(attach))
            if problem:
                return f'stored handle {handle["uuid"]}: {problem}'
    return None


# -- devices ----------------------------------------------------------------

def _device_columns(hostname, device):
    return {'type': device.type, 'vendor': device.vendor,
            'model': device.model,
            'std_board_info': to_json(device.std_board_info),
            'vendor_board_info': to_json(device.vendor_board_info),
            'hostname': hostname}


def _add_device(plan, hostname, device, status):
    key = device.key()
    uuid = device_uuid(hostname, key)
    plan.add['devices'].append(
        dict(_device_columns(hostname, device), uuid=uuid, status=status))
    plan.add['controlpath_ids'].append({
        'uuid': controlpath_uuid(hostname, key), 'device_uuid': uuid,
        'cpid_type': device.controlpath_id.cpid_type,
        'cpid_info': device.controlpath_id.cpid_info})
    for deployable in device.deployables:
        _add_deployable(plan, hostname, key, uuid, deployable)


def _change_device(plan, hostname, stored, row, device, held, now,
                   came_back):
    """``came_back``: the move of lost hardware reported again
    (``health_machine.came_back`` with its settings)."""
    changed = {k: v for k, v in _device_columns(hostname, device).items()
               if row.get(k) != v}
    if row.get('health') == states.LOST:
        changed.update(_health_change(row, came_back, now))
    if changed:
        plan.update['devices'].append(dict(changed, uuid=row['uuid']))
    key = device.key()
    existing = {d['name']: d for d in stored.deployables.get(row['id'], ())}
    for deployable in device.deployables:
        old = existing.pop(deployable.name, None)
        if old is None:
            _add_deployable(plan, hostname, key, row['uuid'], deployable)
        else:
            _change_deployable(plan, hostname, key, stored, old,
                               deployable, now, came_back)
    for old in existing.values():
        # The device is still here: the deployable's own health decides.
        _remove_deployable(plan, old, held, now)


def _remove_device(plan, stored, row, held, now, new_device_status):
    """Delete the vanished device, or keep it as lost: while one of its
    deployables is kept, or when it was not healthy, or was in a status
    a new device would not get (``_kept_status``), deployables or not."""
    device = health_machine.Record.from_row(row)
    status = _kept_status(row, new_device_status)
    kept = [_remove_deployable(plan, d, held, now, device, status)
            for d in stored.deployables.get(row['id'], ())]
    kept = [record for record in kept if record is not None]
    if (not kept and status is None
            and health_machine.healthy_until_it_vanished(device)):
        plan.delete['devices'].append(row['uuid'])
    elif row.get('health') != states.LOST:
        # Lost with the worst health of what it held.
        plan.update['devices'].append(dict(
            _health_change(row, _vanished(health_machine.worst(
                device, *kept), status), now), uuid=row['uuid']))


def _kept_status(row, new_device_status):
    """The status of a vanished device row to keep across its absence:
    one an operator gave it, not the one it would get were it new when it
    comes back (``maintaining`` for maintenance where new devices start
    enabled, ``enabled`` where they wait for an admin); else None."""
    status = row.get('status')
    return status if status and status != new_device_status else None


# -- deployables --------------------------------------------------------------

def _rp_uuid(deployable_name):
    return inventory.provider_uuid(deployable_name)


def _add_deployable(plan, hostname, device_key, dev_uuid, deployable):
    uuid = deployable_uuid(hostname, deployable.name)
    rp = _rp_uuid(deployable.name)
    plan.add['deployables'].append({
        'uuid': uuid, 'device_uuid': dev_uuid, 'name': deployable.name,
        'num_accelerators': deployable.num_accelerators,
        'driver_name': deployable.driver_name,
        'bitstream_id': deployable.bitstream_id, 'rp_uuid': rp,
        'gone': False})
    for key, value in sorted(deployable.attributes.items()):
        plan.add['attributes'].append({
            'uuid': attribute_uuid(hostname, deployable.name, key),
            'deployable_uuid': uuid, 'key': key, 'value': str(value)})
    for handle in deployable.attach_handles:
        plan.add['attach_handles'].append(
            _handle_row(hostname, device_key, deployable.name, uuid, handle))
    plan.touched_providers.add(rp)


def _handle_row(hostname, device_key, deployable_name, dep_uuid, handle):
    return {'uuid': attach_handle_uuid(hostname, deployable_name,
                                       handle.key()),
            'deployable_uuid': dep_uuid,
            'controlpath_uuid': controlpath_uuid(hostname, device_key),
            'attach_type': handle.attach_type,
            'attach_info': to_json(handle.attach_info), 'in_use': False}


def _change_deployable(plan, hostname, device_key, stored, row,
                       deployable, now, came_back):
    rp = _rp_uuid(deployable.name)
    wanted = {'num_accelerators': deployable.num_accelerators,
              'driver_name': deployable.driver_name,
              'bitstream_id': deployable.bitstream_id,
              'rp_uuid': rp, 'gone': False}
    changed = {k: v for k, v in wanted.items() if row.get(k) != v}
    if row.get('gone'):
        changed.update(_health_change(row, came_back, now))
    if changed:
        plan.update['deployables'].append(dict(changed, uuid=row['uuid']))
    attrs_changed = _change_attributes(
        plan, hostname, deployable, row,
        stored.attributes.get(row['id'], ()))
    _change_handles(plan, hostname, device_key, deployable, row,
                    stored.handles.get(row['id'], ()))
    if changed or attrs_changed:
        plan.touched_providers.add(rp)


def _remove_deployable(plan, row, held, now, device=None, status=None):
    """Delete the deployable, or keep it as gone: while allocations hold
    it, or when it, or its vanished ``device`` (a Record), was not
    healthy, or when that device's ``status`` is kept (``_kept_status``).
    Returns the record that decided its health when kept (its own or its
    device's, the worse), None when deleted."""
    rp = row.get('rp_uuid') or _rp_uuid(row['name'])
    plan.removal_candidates.add(rp)
    worst = health_machine.worst(health_machine.Record.from_row(row),
                                 *([device] if device is not None else []))
    if (rp in held or status is not None
            or not health_machine.healthy_until_it_vanished(worst)):
        if not row.get('gone'):
            plan.update['deployables'].append(dict(
                _health_change(row, _vanished(worst, status), now),
                uuid=row['uuid'], gone=True))
            plan.touched_providers.add(rp)
        return worst
    plan.delete['deployables'].append(row['uuid'])
    plan.removed_providers.add(rp)
    return None


def _vanished(worst, status=None):
    """The move of a row whose hardware vanished (``health_machine
    .vanished``), ``worst`` the record deciding its health, ``status``
    its device's status when kept."""
    return functools.partial(health_machine.vanished, worst=worst,
                             status=status)


def _health_change(row, move, now):
    """The health columns ``move`` (lost, came_back) changes on ``row``."""
    old = health_machine.Record.from_row(row)
    return move(old, now).columns(since=old)


def _change_attributes(plan, hostname, deployable, dep_row, rows):
    by_key = {r['key']: r for r in rows}
    changed = False
    for key, value in sorted(deployable.attributes.items()):
        old = by_key.pop(key, None)
        if old is None:
            plan.add['attributes'].append({
                'uuid': attribute_uuid(hostname, deployable.name, key),
                'deployable_uuid': dep_row['uuid'], 'key': key,
                'value': str(value)})
            changed = True
        elif old['value'] != str(value):
            plan.update['attributes'].append({'uuid': old['uuid'],
                                              'value': str(value)})
            changed = True
    for key, old in by_key.items():
        if old['uuid'] == attribute_uuid(hostname, deployable.name, key):
            plan.delete['attributes'].append(old['uuid'])
            changed = True
    return changed


def _change_handles(plan, hostname, device_key, deployable, dep_row, rows):
    """Add new handles, drop vanished free ones.  A vanished handle still
    in use stays until its ARQ lets go (a later full report drops it:
    ``plan.kept_handles`` counts them), marked ``gone`` meanwhile: no bind
    takes it once it is free (its function may be no more).

    Such a handle still occupies its slot: a reported handle of the same
    slot under another name (``_slot``: an agent that numbers a GPU's
    vGPU handles otherwise, as one does after its upgrade) is not added
    while it stays, or a bind would get a free handle on a function whose
    vGPU an instance holds; it is added by the full report after the
    kept one goes."""
    existing = {r['uuid']: r for r in rows}
    reported = {attach_handle_uuid(hostname, deployable.name, handle.key()):
                handle for handle in deployable.attach_handles}
    occupied = collections.Counter(
        _slot(old['attach_type'], json.loads(old['attach_info'] or '{}'))
        for uuid, old in existing.items()
        if uuid not in reported and old.get('in_use'))
    for uuid, handle in reported.items():
        old = existing.pop(uuid, None)
        if old is not None:
            if old.get('gone'):
                # Reported again: takeable once free.
                plan.update['attach_handles'].append(
                    {'uuid': uuid, 'gone': False})
            continue
        slot = _slot(handle.attach_type, handle.attach_info)
        if occupied[slot]:
            occupied[slot] -= 1
            continue
        plan.add['attach_handles'].append(_handle_row(
            hostname, device_key, deployable.name, dep_row['uuid'], handle))
    for uuid, old in existing.items():
        if not old.get('in_use'):
            plan.delete['attach_handles'].append(uuid)
        else:
            plan.kept_handles += 1
            if not old.get('gone'):
                # Never taken again once its ARQ lets it go.
                plan.update['attach_handles'].append(
                    {'uuid': uuid, 'gone': True})


def _slot(attach_type, attach_info):
    """What a handle attaches, whatever the agent names it by: its attach
    type and info without the vGPU handle's number (``vgpu_mark``)."""
    if not isinstance(attach_info, dict):
        return attach_type, str(attach_info)
    return attach_type, to_json({key: value for key, value
                                 in attach_info.items()
                                 if key != inventory.VGPU_MARK})


# -- report validation --------------------------------------------------------

@dataclasses.dataclass
class Report:
    """A report as this conductor understands it.

    ``skipped``: {device key (or ``'#<index>'`` when it has none):
    reason} of the devices it cannot store (a type or attach type this
    version does not know, a bad value): they are left out and their
    stored rows kept as they are, never deleted, unless they fail the
    same checks (``make_plan``, full reports).  ``unknown_fields``:
    fields of a newer report format, dropped; the rest is stored.
    ``complete``: nothing was skipped or dropped.
    """

    devices: list
    removed: list
    skipped: dict = dataclasses.field(default_factory=dict)
    unknown_fields: set = dataclasses.field(default_factory=set)

    @property
    def complete(self):
        return not self.skipped and not self.unknown_fields

    @property
    def kept_keys(self):
        """Keys of the skipped devices: not gone, whatever a full report
        says."""
        return frozenset(self.skipped)

    @property
    def unidentified(self):
        """Whether a skipped device had no key: a full report then cannot
        say which stored device it is, so it removes none."""
        return any(key.startswith('#') for key in self.skipped)

    def problems(self):
        """One line naming what was left out."""
        parts = ['device %s (%s)' % item
                 for item in sorted(self.skipped.items())]
        if self.unknown_fields:
            parts.append('unknown field(s) %s' %
                         ', '.join(sorted(self.unknown_fields)))
        return '; '.join(parts)


def parse_report(report):
    """A ``Report``, or Invalid with the reason when the report as a whole
    is malformed (nothing written).  A device this version cannot store
    skips that device only: an agent newer than its conductor must never
    stop its host's inventory (doc/source/upgrade.rst)."""
    problem = _report_problem(report)
    if problem:
        raise exception.Invalid(reason=problem)
    parsed = Report([], [])
    keys, names = set(), set()
    for index, values in enumerate(report['devices']):
        device = _parse_device(parsed, index, values)
        if device is None:
            continue
        if device.key() in keys:
            raise exception.Invalid(
                reason=f'device {device.key()} reported twice')
        keys.add(device.key())
        for deployable in device.deployables:
            # Its Placement provider's name, and its row's identity.
            if deployable.name in names:
                raise exception.Invalid(
                    reason=f'deployable {deployable.name} reported twice')
            names.add(deployable.name)
        parsed.devices.append(device)
    if not report['full']:
        parsed.removed = list(report['removed'])
    return parsed


def check_hostname(hostname):
    """Invalid unless ``hostname``, the name a host reports under (the
    call's own argument, beside its report), is one the host's and its
    devices' rows hold alike on every database."""
    problem = _name_problem('host name', hostname, _HOSTNAME_LENGTH)
    if problem:
        raise exception.Invalid(reason=problem)


# The longest host name, and digest, a host's row holds (the digests
# agents and conductors make are sha256 in hex).
_HOSTNAME_LENGTH = models.Host.__table__.c.hostname.type.length
_DIGEST_LENGTH = models.Host.__table__.c.report_digest.type.length
# The longest compute node provider name a host's row holds.
_NODE_NAME_LENGTH = models.Host.__table__.c.compute_node_name.type.length


def _report_problem(report):
    """Why ``report`` is malformed as a whole, or None: a field of the
    report itself missing or of another type.  Checked before anything is
    read or written: such a value failed the transaction (a digest too
    long for its column), was stored as no agent meant it (a digest that
    is a number, a ``full`` of ``"no"`` taken for true, which removes
    every device it does not list), or failed after the commit (a
    provider name that is not a string, looked up in Placement)."""
    if not isinstance(report, dict):
        return 'an inventory report is an object'
    for key in ('digest', 'full', 'devices', 'removed'):
        if key not in report:
            return f'report lacks {key!r}'
    for key in ('devices', 'removed'):
        if not isinstance(report[key], list):
            return (f'devices and removed are lists: {key} is '
                    f'{shown(report[key])}')
    if not isinstance(report['full'], bool):
        return f'report full {shown(report["full"])}: not true or false'
    problem = (
        _text_problem('report digest', report['digest'], _DIGEST_LENGTH,
                      shortest=1)
        or _text_problem('report base_digest', report.get('base_digest'),
                         _DIGEST_LENGTH, optional=True, shortest=1)
        or _name_problem('report resource_provider_name',
                         report.get('resource_provider_name'),
                         _NODE_NAME_LENGTH, optional=True))
    if problem:
        return problem
    for key in report['removed']:
        problem = _text_problem('removed device key', key, shortest=1)
        if problem:
            return problem
    return None


def _parse_device(parsed, index, values):
    """The device of one report entry, or None when it is skipped (then
    recorded in ``parsed.skipped``, under ``'#<index>'`` when its control
    path id cannot say which stored device it is)."""
    unknown = set()
    try:
        device = inventory.DriverDevice.from_dict(values, unknown)
        key = device.key()
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        parsed.skipped['#%d' % index] = f'unreadable: {exc!r}'
        return None
    problem = _identity_problem(device)
    if problem:
        parsed.skipped['#%d' % index] = problem
        return None
    problem = _check_device(device)
    if problem:
        parsed.skipped[key] = problem
        return None
    parsed.unknown_fields |= unknown
    return device


# The largest number a 32-bit Integer column holds, and the largest
# inventory total Placement accepts.
_MAX_INTEGER = 2 ** 31 - 1


def _identity_problem(device):
    """Why ``device``'s control path id cannot identify it among the
    stored devices, or None."""
    cpid = device.controlpath_id
    if cpid.cpid_type not in models.CPID_TYPES:
        return f'unknown control path type {shown(cpid.cpid_type)}'
    return _text_problem('control path id', cpid.cpid_info,
                         models.NAME.length, shortest=1)


# What a control path id holds, by its type: (its shape, in words).  The
# agent's calls for the device (programming it, its health) and its
# handles name the function by it.  One of another shape still names a
# device (its key): skipped under that key.
CPID_SHAPES = {'PCI': (inventory.PCI_ADDRESS,
                       'a PCI address dddd:bb:dd.f')}


def _cpid_problem(cpid_type, cpid_info):
    """Why a control path id (its type known, its text good) is not of
    its type's shape (``CPID_SHAPES``), or None."""
    shape, words = CPID_SHAPES.get(cpid_type, (None, None))
    if shape is not None and not shape.fullmatch(cpid_info):
        return f'control path id {shown(cpid_info)}: not {words}'
    return None


def _check_device(device):
    """Why this conductor cannot store ``device``, or None: a device or
    attach type it does not know (a newer agent's), or a value its rows
    or Placement would refuse (missing, of another type, too long, a
    resource class or trait Placement does not accept), or a bind could
    not use (an attach handle without what binds read of it).  Stored,
    such a value would fail the whole report's transaction, or every
    later sync of the host, each period, or each bind given it; refused
    here, it leaves out that device alone (doc/source/upgrade.rst)."""
    if device.type not in models.DEVICE_TYPES:
        return f'unknown device type {shown(device.type)}'
    problem = (_cpid_problem(device.controlpath_id.cpid_type,
                             device.controlpath_id.cpid_info)
               or _text_problem('vendor', device.vendor, models.NAME.length)
               or _text_problem('model', device.model, models.NAME.length)
               or _json_problem('std_board_info', device.std_board_info)
               or _json_problem('vendor_board_info',
                                device.vendor_board_info))
    if problem:
        return problem
    for deployable in device.deployables:
        problem = _deployable_problem(deployable)
        if problem:
            return problem
    return None


def _deployable_problem(deployable):
    """Why one of a device's deployables cannot be stored, or None."""
    name = deployable.name
    # It names the deployable's provider in Placement too.
    problem = _name_problem('deployable name', name,
                            inventory.PROVIDER_NAME_LENGTH)
    if problem:
        return problem
    for handle in deployable.attach_handles:
        # A deployable without the handles it reports would be offered
        # to the scheduler and fail every bind: skip the device.
        if handle.attach_type not in models.ATTACH_TYPES:
            return f'unknown attach type {shown(handle.attach_type)}'
    problem = _own_problem(deployable)
    return f'deployable {name}: {problem}' if problem else None


def _own_problem(deployable):
    """Why a deployable with a good name cannot be stored, or None."""
    num = deployable.num_accelerators
    if isinstance(num, bool) or not isinstance(num, int) or \
            not 0 <= num <= _MAX_INTEGER:
        return (f'num_accelerators {shown(num)}: not a whole number from '
                f'0 to {_MAX_INTEGER}')
    problem = (
        _text_problem('driver_name', deployable.driver_name,
                      models.NAME.length, optional=True)
        or _text_problem('bitstream_id', deployable.bitstream_id,
                         models.UUID.length, optional=True)
        or _object_problem('attributes', deployable.attributes))
    if problem:
        return problem
    for key, value in deployable.attributes.items():
        problem = (_text_problem('attribute key', key, models.NAME.length,
                                 shortest=1)
                   # Placement would refuse it, and with it every later
                   # sync of the host (the API checks what an admin sets
                   # the same way).
                   or inventory.attribute_problem(key, value)
                   or _text_problem(f'attribute {key}', value))
        if problem:
            return problem
    for handle in deployable.attach_handles:
        problem = (_json_problem('attach_info', handle.attach_info)
                   or _attach_info_problem(handle))
        if problem:
            return problem
    return None


# Its parts in an attach handle's attach_info (``inventory.pci_address``).
_PCI_FIELDS = ('domain', 'bus', 'device', 'function')
# What a bind reads of an attach handle's attach_info, by attach type.
# Every type names a PCI function (``_PCI_FIELDS``): the one Nova passes
# through to the instance (PCI; TEST_PCI, the fake driver's, read as
# PCI by the exports), or the GPU the agent makes an mdev on (MDEV);
# besides, the text fields named here (an mdev's type).  A handle
# without them would be offered to the scheduler and fail each bind
# given it, long after the report that brought it.
ATTACH_INFO_TEXT = {'PCI': (), 'TEST_PCI': (), 'MDEV': ('asked_type',)}
# What a bind hands on of an attach handle's attach_info when it is
# there, by attach type: {field: the most characters it holds}.  A PCI
# function's Neutron physical network (a NIC's VF: Nova matches it
# against the network of the port the ARQ serves); the number of one of
# a function's vGPU slots, which names an mdev handle.  Each is a string
# of 1 to that many characters, and only on those types: a ``vgpu_mark``
# on a PCI handle would make several free handles of one function, each
# passed through whole, and a ``physical_network`` on an mdev's is not
# read by Nova.
ATTACH_INFO_OPTIONAL = {
    'PCI': {inventory.PHYSICAL_NETWORK: inventory.PHYSICAL_NETWORK_LENGTH},
    'TEST_PCI': {
        inventory.PHYSICAL_NETWORK: inventory.PHYSICAL_NETWORK_LENGTH},
    'MDEV': {inventory.VGPU_MARK: models.NAME.length}}
_OPTIONAL_FIELDS = sorted({field for fields in ATTACH_INFO_OPTIONAL.values()
                           for field in fields})


def _attach_info_problem(handle):
    """Why ``handle``'s attach_info (an object) lacks what a bind reads
    of it for its attach type (``ATTACH_INFO_TEXT``), or holds a field a
    bind hands on that is not of its shape (``ATTACH_INFO_OPTIONAL``), or
    None."""
    info = handle.attach_info
    what = f'{handle.attach_type} attach_info'
    missing = [field for field in _PCI_FIELDS if field not in info]
    if missing:
        return (f'{what} {shown(info)}: no PCI address (it lacks '
                f'{", ".join(missing)})')
    parts = [info[field] for field in _PCI_FIELDS]
    if not all(isinstance(part, str) for part in parts) or \
            not inventory.PCI_ADDRESS.fullmatch(inventory.pci_address(info)):
        return (f'{what} address {shown(dict(zip(_PCI_FIELDS, parts)))}: '
                f'not a PCI address dddd:bb:dd.f')
    for field in ATTACH_INFO_TEXT[handle.attach_type]:
        problem = _text_problem(f'{what} {field}', info.get(field),
                                shortest=1)
        if problem:
            return problem
    optional = ATTACH_INFO_OPTIONAL[handle.attach_type]
    for field in _OPTIONAL_FIELDS:
        if field not in info:
            continue
        if field not in optional:
            return (f'{what} {field} {shown(info[field])}: not a field of '
                    f'{handle.attach_type} handles')
        problem = _text_problem(f'{what} {field}', info[field],
                                optional[field], shortest=1)
        if problem:
            return problem
    return None


def _text_problem(what, value, length=None, optional=False, shortest=0):
    """Why ``value`` is not text its column holds alike on every
    database, or None: a string of ``shortest`` to ``length`` characters
    (a VARCHAR's), or, when ``length`` is None, of at most the bytes a
    TEXT column holds on MariaDB (``models.TEXT_BYTES``: PostgreSQL
    and SQLite would take more); without NUL (PostgreSQL refuses it,
    MariaDB stores it) nor a lone surrogate (no database driver encodes
    one).  None itself is allowed when ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        return f'{what} {shown(value)}: not a string'
    if '\x00' in value:
        return f'{what} {shown(value)}: holds a NUL character'
    size = _utf8_size(value)
    if size is None:
        return (f'{what} {shown(value)}: not valid Unicode (a lone '
                f'surrogate)')
    if len(value) < shortest:
        return f'{what} {shown(value)}: shorter than {shortest} character(s)'
    if length is not None and len(value) > length:
        return f'{what} {shown(value)}: longer than {length} characters'
    if length is None and size > models.TEXT_BYTES:
        return (f'{what} {shown(value)}: longer than '
                f'{models.TEXT_BYTES} bytes in UTF-8')
    return None


# What no name holds: the control characters (C0, DEL and C1: a newline,
# a carriage return, a tab, an escape...) and the Unicode line and
# paragraph separators.  Each ends a line, or moves the cursor, in what
# shows or exports a name: a host or deployable name holding a newline
# added a line of its own to GET /v2/exports/gres.conf (a real gres line,
# to every Slurm node reading the file), and to the log lines naming it.
_CONTROL = re.compile(r'[\x00-\x1f\x7f-\x9f\u2028\u2029]')


def _name_problem(what, value, length, optional=False):
    """Why ``value`` is not a name (a host's, a compute node's, a
    deployable's) its column holds, or None: ``_text_problem``'s reasons,
    for a string of 1 to ``length`` characters, and any control
    character (``_CONTROL``)."""
    problem = _text_problem(what, value, length, optional=optional,
                            shortest=1)
    if problem or value is None:
        return problem
    found = _CONTROL.search(value)
    if found:
        return (f'{what} {shown(value)}: holds a control character or '
                f'line separator ({shown(found.group())})')
    return None


def _object_problem(what, value):
    """Why ``value`` is not an object, or None."""
    if not isinstance(value, dict):
        return f'{what} {shown(value)}: not an object'
    return None


def _json_problem(what, value):
    """Why ``value``, stored as JSON text in a TEXT column, is not an
    object that column holds on every database, or None."""
    problem = _object_problem(what, value)
    if problem:
        return problem
    try:
        text = to_json(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return f'{what} {shown(value)}: not JSON ({exc})'
    # JSON text escapes NUL and surrogates: only its size matters.
    if _utf8_size(text) > models.TEXT_BYTES:
        return (f'{what} {shown(value)}: longer than '
                f'{models.TEXT_BYTES} bytes as JSON')
    return None


def _utf8_size(text):
    """The bytes of ``text`` in UTF-8, None when it has none (a lone
    surrogate, which JSON's \\ud800 escape can carry)."""
    try:
        return len(text.encode('utf-8'))
    except UnicodeEncodeError:
        return None


def shown(value):
    """``value`` as a log line shows it: a long one cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + '...'
