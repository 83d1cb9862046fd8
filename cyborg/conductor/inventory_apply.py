"""Handling an agent's inventory report (interface 4): the entry point.

1. An unchanged report (a delta with nothing in it, whose digests equal
   the stored one, for a host in sync with Placement) costs one UPDATE
   and no Placement call.
2. Otherwise, in ONE writer transaction: lock the host row; refuse a delta
   whose ``base_digest`` is not the stored digest (``need_full``, nothing
   written); load the rows the report concerns (five queries); plan
   (``inventory_plan``, pure); write the plan (one executemany per table
   and kind of change); store the new digest.
3. After commit, send the DEVICE_ADD / DEVICE_REMOVE (and, for hardware
   that vanished under an allocation or came back, DEVICE_HEALTH_CHANGE)
   notifications collected in the transaction, then sync Placement
   (``placement_sync``); a failed sync leaves the host marked unsynced for
   the next report or the reconcile.  A full report whose
   ``resource_provider_name`` is not the name of the compute node
   provider the host's row records is synced even when nothing else
   changed: the sync looks the name up (``_names_another_node``).

Several conductors may handle reports of the same host at once: the host
row lock serialises them where the database has row locks, and the
deterministic row uuids make a racing insert fail on a unique key, in
which case the report is planned again from the new state.  Binds do not
lock the host row: one may take an attach handle the report read free
and plans to delete; the delete is guarded on the handle being free, and
the report planned again when it kept one (``inventory.TakenMeanwhile``),
from rows that show it taken.
"""

import dataclasses
import hashlib
import threading
import time

from oslo_db import exception as db_exc
from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import notify
from cyborg.conductor import health, health_machine
from cyborg.conductor import inventory_plan, placement_sync
from cyborg.db import api as db_api
from cyborg.db.api import clock as clock_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db

LOG = logging.getLogger(__name__)

# Attempts at writing a report whose rows another conductor inserted
# first (lost lock conflicts are retried by db_api.write_retrying).
MAX_ATTEMPTS = 5

# A host's stored digest from when an FPGA programming recorded the image
# it loaded on one of the host's cards (cyborg.conductor.programming)
# until the host's next report is stored: no agent's digest (those are
# sha256 in hex), so that report is never taken as unchanged.  The agent
# may have read it before the programming ended (one report is in flight
# at a time): it is stored without its images (``_programmed_images``).
PROGRAMMED_DIGEST = 'programmed since the last report; not a digest'


class _Outcome:
    def __init__(self, digest, need_full=False, plan=None, synced=False,
                 was_synced=False, outbox=None, host=None, changes=(),
                 serial=None, images_lost=()):
        self.digest = digest
        self.need_full = need_full
        self.plan = plan
        self.synced = synced
        # Whether Placement matched the database before this report.
        self.was_synced = was_synced
        # Notifications to send once committed (None: none to send).
        self.outbox = outbox
        # The host's row as locked (what the sync needs of it).
        self.host = host
        # Health moves of hardware lost or back (``health.Change``).
        self.changes = changes
        # The host's sync_serial as this report's transaction left it.
        self.serial = serial
        # The images the report changes under Bound ARQs
        # (``_images_lost``), to warn of once committed.
        self.images_lost = images_lost


def handle_report(conf, context, hostname, report):
    """Store ``report`` for ``hostname`` and sync Placement.

    Returns ``{'digest': <digest now stored>, 'need_full': bool}``; raises
    ``Invalid`` for a malformed report or host name (nothing read or
    written; one WARNING says why, and the agent gets the reason).
    """
    started = time.monotonic()
    kind = 'full' if isinstance(report, dict) and report.get('full') is True \
        else 'delta'
    try:
        parsed = _parse(hostname, report)
        if _looks_unchanged(report) and host_db.touch(
                context, hostname, report['digest']):
            kind = 'unchanged'
            LOG.debug('Report of %s: unchanged', hostname)
            _clean(hostname)
            return {'digest': report['digest'], 'need_full': False}
        if not parsed.complete:
            _warn_skipped(hostname, parsed)
        reply = _handle_changed(conf, context, hostname, report, parsed)
        if parsed.complete and not reply['need_full']:
            _clean(hostname)
        return reply
    finally:
        metrics.CONDUCTOR_REPORT_SECONDS.labels(kind).observe(
            time.monotonic() - started)


def _parse(hostname, report):
    """The ``inventory_plan.Report`` of ``report``; Invalid, logged, when
    the report or the host name is malformed as a whole."""
    try:
        inventory_plan.check_hostname(hostname)
        return inventory_plan.parse_report(report)
    except exception.Invalid as exc:
        # The agent is answered the reason; the dispatcher logs an
        # expected exception at DEBUG only.
        LOG.warning('Report of %s refused, nothing stored: %s',
                    inventory_plan.shown(hostname), exc)
        raise


def _handle_changed(conf, context, hostname, report, parsed):
    digest = report['digest']
    outcome = _write_with_retries(conf, context, hostname, report, parsed)
    health.log_changes(hostname, outcome.changes)
    restore = _warn_images_lost(conf, context, hostname,
                                outcome.images_lost)
    if outcome.outbox is not None:
        outcome.outbox.send()
    if outcome.need_full:
        LOG.info('Report of %s is based on %s, not on the stored %s: asking '
                 'for a full report.', hostname, report.get('base_digest'),
                 outcome.digest)
        return {'digest': outcome.digest, 'need_full': True}
    _log_stored(hostname, report, outcome.plan)
    if not outcome.synced:
        placement_sync.sync_after_report(
            conf, context, hostname, outcome.plan, outcome.digest,
            rp_name=report.get('resource_provider_name'),
            trust_memory=outcome.was_synced, host=outcome.host,
            serial=outcome.serial, follow_name=report['full'])
    if restore is not None:
        restore()
    return {'digest': digest, 'need_full': False}


def _names_another_node(report, host):
    """Whether a full ``report`` names a compute node provider other than
    the one the host's row records (``[agent]resource_provider_name``
    corrected since): its sync looks the name up, and moves the host's
    providers where another provider has it (``placement_sync``).  Not
    a name this process looked up already for that compute node and did
    not follow (``placement_sync.name_settled``: the agent's default
    FQDN, where Nova named the compute node by the short host name, is
    one): the host stays synced, nothing is looked up.  A comparison of
    two strings and one dict lookup, on full reports only: an unchanged
    report is never asked."""
    name = report.get('resource_provider_name')
    return bool(report['full'] and name and host['compute_rp_uuid'] and
                name != host['compute_node_name'] and
                not placement_sync.name_settled(
                    host['hostname'], name, host['compute_rp_uuid']))


def _log_stored(hostname, report, plan):
    """One line per stored report (an unchanged one is DEBUG above)."""
    LOG.info('Report of %s stored (%s): %d device(s) added, %d updated, %d '
             'removed; %d row(s) written', hostname,
             'full' if report['full'] else 'delta',
             len(plan.add['devices']), len(plan.update['devices']),
             len(plan.delete['devices']), plan.statement_count())
    if plan.unkept:
        # Each full report says it again while the device stays as
        # reported (kept as lost while allocations hold it).
        LOG.info('Report of %s: the stored rows of skipped device(s) %s '
                 'fail the same checks (stored before them); taken out as '
                 'vanished hardware', hostname, '; '.join(
                     '%s (%s)' % item for item in sorted(plan.unkept.items())))


def _looks_unchanged(report):
    return (not report['full'] and not report['devices'] and
            not report['removed'] and
            report.get('base_digest') == report['digest'])


class _AskPlacementFirst(db_api.AskFirst):
    """Raised in a report's transaction when the plan would remove
    providers nobody has asked Placement about yet: they are asked about
    with no transaction open (``held`` records whether Placement holds
    allocations against each), and the report planned again."""

    def __init__(self, conf, held, rp_uuids):
        super().__init__()
        self.conf, self.held, self.rp_uuids = conf, held, rp_uuids

    def ask(self):
        found = placement_sync.held_providers(self.conf, self.rp_uuids)
        self.held.update({rp: rp in found for rp in self.rp_uuids})


def _write_with_retries(conf, context, hostname, report, parsed):
    # {provider: whether Placement holds allocations against it}, for the
    # providers of vanished hardware.
    held = {}
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            # One transaction, run again when it loses a lock conflict
            # (and on SQLite holding the write lock from its first read).
            return db_api.write_retrying(context, _write, conf, context,
                                         hostname, report, parsed, held)
        except db_exc.DBDuplicateEntry:
            # Another conductor stored this host's first report (or the
            # same rows) first: plan again against what it stored.
            if attempt == MAX_ATTEMPTS:
                raise
            LOG.info('Report of %s raced another writer; planning again.',
                     hostname)


def _write(conf, context, hostname, report, parsed, held):
    if report['full']:
        host = host_db.lock_or_create(context, hostname)
    else:
        host = host_db.lock(context, hostname)
        if host is None:
            return _Outcome(None, need_full=True)
    stored_digest = host['report_digest']
    if not report['full'] and (stored_digest is None or
                               report.get('base_digest') != stored_digest):
        return _Outcome(stored_digest, need_full=True)
    plan, stored = _plan(conf, context, hostname, report['full'], parsed,
                         held)
    kept_images = (_programmed_images(plan)
                   if stored_digest == PROGRAMMED_DIGEST else 0)
    images_lost = _images_lost(context, plan, stored)
    inventory_db.write(context, plan.add, plan.update, plan.delete)
    changes = _health_changes(plan, stored)
    outbox = _notifications(conf, context, hostname, plan, stored, changes)
    was_synced = bool(host['placement_synced'])
    synced = was_synced and plan.empty and not _names_another_node(
        report, host)
    digest = stored_digest_of(report['digest'], parsed, plan, kept_images)
    host_db.update(context, hostname, report_digest=digest,
                   placement_synced=synced,
                   last_report_at=clock_db.utcnow())
    # Read in this transaction, after its own bump: a change committed
    # after it keeps the host unsynced whatever the sync writes.
    serial = None if synced else host_db.sync_serial(context, hostname)
    return _Outcome(digest, plan=plan, synced=synced, was_synced=was_synced,
                    outbox=outbox, host=host, changes=changes,
                    serial=serial, images_lost=images_lost)


def stored_digest_of(digest, parsed, plan, kept_images=0):
    """The digest to store for a report: its own when all of it was
    stored; else one no agent sends, so that the agent's next report,
    a delta based on the digest it was acknowledged, is answered
    ``need_full`` and a full report follows.  Each period thus re-sends
    what was skipped, and a conductor upgraded meanwhile stores it.  The
    same while the plan kept vanished handles an ARQ holds: each period's
    full report drops those the ARQs have let go (nothing else would: the
    agent's picture does not change when they are freed); and when it
    left out images the report changed (``kept_images``), reported before
    a programming ended: the next report, read after it, says what the
    cards run now."""
    if parsed.complete and not plan.kept_handles and not kept_images:
        return digest
    return hashlib.sha256(b'incomplete\0' + digest.encode()).hexdigest()


def _plan(conf, context, hostname, full, parsed, held):
    devices, removed = parsed.devices, parsed.removed
    if full:
        uuids = None
    else:
        uuids = [inventory_plan.device_uuid(hostname, key) for key in
                 [d.key() for d in devices] + list(removed)]
    stored = inventory_db.load(context, hostname, uuids)
    options = {'new_device_status': conf.conductor.new_device_status,
               'now': clock_db.utcnow(), 'kept_keys': parsed.kept_keys,
               'remove_unreported': not parsed.unidentified,
               'health_settings': health_machine.Settings.from_conf(conf)}
    plan = inventory_plan.make_plan(hostname, stored, devices, removed, full,
                                    **options)
    if plan.removal_candidates:
        # Whether an instance still uses vanished hardware is Placement's
        # to say; asked outside the transaction (the host row stays locked
        # for no HTTP call).  What is deleted is what was asked about: a
        # candidate new since is asked about too.  Allocated after the
        # answer, a provider is reserved whole instead of deleted
        # (placement_sync).
        unasked = sorted(set(plan.removal_candidates) - set(held))
        if unasked:
            raise _AskPlacementFirst(conf, held, unasked)
        allocated = {rp for rp in plan.removal_candidates if held[rp]}
        if allocated:
            plan = inventory_plan.make_plan(hostname, stored, devices,
                                            removed, full, allocated,
                                            **options)
    return plan, stored


def _programmed_images(plan):
    """Leave out of ``plan`` the deployables' images it changes: the
    first report stored after a programming recorded an image on the
    host (its digest ``PROGRAMMED_DIGEST``) may have been read before the
    programming ended (the agent reports a card being programmed as it
    last reported it), and would put the old image back.  The image the
    programming recorded wins; the agent's next report, a full one
    (``stored_digest_of``), read after it, says what the card runs.
    Returns how many images were left out."""
    kept, updates = 0, []
    for row in plan.update['deployables']:
        if 'bitstream_id' in row:
            kept += 1
            row = {k: v for k, v in row.items() if k != 'bitstream_id'}
            if row.keys() == {'uuid'}:
                continue
        updates.append(row)
    plan.update['deployables'] = updates
    return kept


def _images_lost(context, plan, stored):
    """[(deployable row, the image it reports now, [(arq uuid, instance
    uuid)])] of the deployables whose image (``bitstream_id``) the plan
    changes from a known one while Bound ARQs hold handles of their card
    (``deployables.card_key``: their device): an FPGA that came back from
    a reboot or a power loss on its flash default image, the one the
    instances were bound on gone.  Nothing stops them (the card is
    theirs): the image they asked for is programmed again
    (``programming.restorable``), or they are named, for an operator to
    rebuild them or program the image again.  No statement unless such
    a change meets a held handle (then one,
    ``inventory.bound_holders``)."""
    changed = {row['uuid']: row['bitstream_id']
               for row in plan.update['deployables']
               if 'bitstream_id' in row}
    if not changed:
        return []
    held = {}
    deployables = {r['id']: r for r in stored.get('deployables', ())}
    for handle in stored.get('attach_handles', ()):
        if handle.get('in_use'):
            owner = deployables.get(handle['deployable_id'])
            if owner is not None:
                held.setdefault(owner['device_id'], []).append(handle['id'])
    lost = [(row, changed[row['uuid']]) for row in deployables.values()
            if row['uuid'] in changed and row.get('bitstream_id')
            and row['device_id'] in held]
    if not lost:
        return []
    holders = {}
    for holder in inventory_db.bound_holders(context, sorted(
            {h for row, _image in lost for h in held[row['device_id']]})):
        holders[holder.attach_handle_id] = (holder.uuid,
                                            holder.instance_uuid)
    found = []
    for row, image in lost:
        arqs = [holders[h] for h in held[row['device_id']] if h in holders]
        if arqs:
            found.append((row, image, arqs))
    return found


def _warn_images_lost(conf, context, hostname, images_lost):
    """Once the report is committed: the images it took from under
    Bound ARQs that ``programming.restore_lost`` programs again (every
    holder of the card Bound, all asking for one image:
    ``programming.restorable``) are said in an INFO, the others named in
    a WARNING.  Returns
    what starts those programmings in the background once the report's
    Placement sync is done (None: none to start)."""
    if not images_lost:
        return None
    # Imported here: programming imports this module (PROGRAMMED_DIGEST).
    from cyborg.conductor import programming
    try:
        restoring = programming.restorable(conf, context, hostname,
                                           images_lost)
    except Exception as exc:
        # Stored already: the periodic check restores what it can.
        LOG.warning('Report of %s: could not read which images to '
                    'program again: %s', hostname, exception.first_line(exc))
        restoring = set()
    for row, image, arqs in images_lost:
        if row['uuid'] in restoring:
            LOG.info('Report of %s: deployable %s (%s) reports image %s, '
                     'not %s, while ARQ(s) %s, bound with it, hold its '
                     'card: it is programmed again', hostname, row['name'],
                     row['uuid'], image or 'none', row['bitstream_id'],
                     ', '.join(f'{arq} (instance {instance})'
                               for arq, instance in arqs))
            continue
        LOG.warning(
            'Report of %s: deployable %s (%s) reports image %s, not %s, '
            'while ARQ(s) %s hold its card: their instance(s) run on what '
            'the card loaded instead (after a reboot or a power loss, its '
            'flash default image), not the function they were bound with. '
            'Rebuild those instances, or program the image again once '
            'they are stopped.', hostname, row['name'], row['uuid'],
            image or 'none', row['bitstream_id'], ', '.join(
                f'{arq} (instance {instance})' for arq, instance in arqs))
    if not restoring:
        return None
    return lambda: programming.restore_later(conf, hostname)


# Hosts whose skipped parts were logged: {hostname: what}.  Each full
# report of a host with something skipped re-states it (see
# stored_digest_of); one WARNING says it, DEBUG repeats it.  A report
# stored whole (``_clean``) ends it, so does forgetting the host (through
# any conductor: placement_sync.host_memory): the same problem coming
# back later is said at WARNING again.
_WARNED = {}
_WARNED_LOCK = threading.Lock()
placement_sync.host_memory(lambda _client: _WARNED, _WARNED_LOCK)


def _clean(hostname):
    """A report of ``hostname`` was stored whole: a full one, a delta or
    an unchanged one, which the conductor takes only on the digest of
    a report stored whole (``stored_digest_of``).  One dict lookup when
    nothing was skipped before."""
    if hostname in _WARNED:
        with _WARNED_LOCK:
            _WARNED.pop(hostname, None)


def _warn_skipped(hostname, parsed):
    problems = parsed.problems()
    with _WARNED_LOCK:
        first = _WARNED.get(hostname) != problems
        _WARNED[hostname] = problems
    LOG.log(logging.WARNING if first else logging.DEBUG,
            'Report of %s: storing what this conductor understands and '
            'leaving out %s (an agent newer than this conductor, or a '
            'driver reporting a malformed value); the rest of the '
            'inventory is stored.', hostname, problems)


# -- notifications --------------------------------------------------------

def _notifications(conf, context, hostname, plan, stored, changes):
    """An Outbox of the devices the plan adds and deletes and of the
    health ``changes`` (hardware lost or back); None when notifications
    are off (nothing is built then) or there is nothing to say."""
    if not (plan.add['devices'] or plan.delete['devices'] or
            changes) or not notify.enabled(conf):
        return None
    outbox = notify.Outbox(conf, context)
    for row in plan.add['devices']:
        outbox.add(notify.DEVICE_ADD, device_payload(
            hostname, row,
            [c for c in plan.add['controlpath_ids']
             if c['device_uuid'] == row['uuid']],
            [d for d in plan.add['deployables']
             if d['device_uuid'] == row['uuid']]))
    devices = {r['uuid']: r for r in stored.get('devices', ())}
    for uuid in plan.delete['devices']:
        row = devices[uuid]
        outbox.add(notify.DEVICE_REMOVE, device_payload(
            hostname, row, _children(stored, 'controlpath_ids', row),
            _children(stored, 'deployables', row)))
    if changes:
        health.add_notifications(outbox, context, hostname, changes,
                                 stored['deployables'],
                                 _effective(stored, changes))
    return outbox


def _children(stored, table, device_row):
    return [r for r in stored.get(table, ())
            if r['device_id'] == device_row['id']]


def device_payload(hostname, row, cpids, deployables):
    """The payload of a device's ``device.add``/``device.remove``
    notification (also ``cyborg.conductor.hosts``'s, forgetting a host)."""
    cpid = cpids[0] if cpids else {}
    return {'host': hostname, 'device_uuid': row['uuid'],
            'type': row['type'], 'vendor': row['vendor'],
            'model': row['model'], 'status': row.get('status'),
            'cpid_type': cpid.get('cpid_type'),
            'cpid_info': cpid.get('cpid_info'),
            'deployables': [{'uuid': d['uuid'], 'name': d['name'],
                             'rp_uuid': d.get('rp_uuid'),
                             'num_accelerators': d['num_accelerators']}
                            for d in deployables]}


def _health_changes(plan, stored):
    """The health moves of the plan (devices and deployables whose
    hardware vanished under an allocation, lost, or came back, unhealthy
    until re-probed) as ``health.Change``, the shape the health state
    machine's moves have."""
    rows = {(kind, r['uuid']): r for kind, table in _HEALTH_TABLES
            for r in stored.get(table, ())}
    devices = {r['id']: r for r in stored.get('devices', ())}
    cpids = {r['device_id']: r for r in stored.get('controlpath_ids', ())}
    changes = []
    for kind, table in _HEALTH_TABLES:
        for move in plan.update[table]:
            if 'health' not in move:
                continue
            row = rows[kind, move['uuid']]
            device = row if kind == 'device' else devices[row['device_id']]
            cpid = cpids.get(device['id'], {})
            old = health_machine.Record.from_row(row)
            new = dataclasses.replace(old, **{
                field: move[column]
                for field, column in health_machine.Record.COLUMNS.items()
                if column in move})
            changes.append(health.Change(
                kind, row, dict(device, cpid_type=cpid.get('cpid_type'),
                                cpid_info=cpid.get('cpid_info')),
                old, new))
    return changes


# (Change.kind, stored table) of the rows with health columns.
_HEALTH_TABLES = (('device', 'devices'), ('deployable', 'deployables'))


def _effective(stored, changes):
    """{deployable uuid: (effective health before, after)} for the
    deployables the ``changes`` move, themselves or through their
    device."""
    moved = {c.row['uuid']: c.new.health for c in changes}
    devices = {r['id']: r for r in stored.get('devices', ())}
    effective = {}
    for dep in stored.get('deployables', ()):
        device = devices[dep['device_id']]
        if dep['uuid'] in moved or device['uuid'] in moved:
            effective[dep['uuid']] = (
                health_machine.effective(dep.get('health'),
                                         device.get('health')),
                health_machine.effective(
                    moved.get(dep['uuid'], dep.get('health')),
                    moved.get(device['uuid'], device.get('health'))))
    return effective
