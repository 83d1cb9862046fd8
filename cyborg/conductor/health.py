"""Agents' health reports and the health timers: the conductor's side.

``handle_report`` (``ConductorAPI.report_health``) and the periodic
``run_timers`` run the pure state machine (``health_machine``) over one
host's health records:

1. Read the host's device and deployable records (two queries) and apply
   the readings and the due timers.  Nothing changed (the usual periodic
   snapshot of a well host): done, no write, no Placement call.
2. Otherwise, in ONE writer transaction: lock the host row (serialising
   with the host's inventory reports and other conductors), read again,
   apply again, write the changed rows with guarded UPDATEs (WHERE the
   state is still the one read; a lost race is planned again), and collect
   the notifications.
3. After commit: send the notifications, ask the agent to re-probe the
   devices that entered 'probing', and sync Placement for the providers
   whose schedulability changed (reserved = total and the unhealthy trait
   while out).  A failed sync leaves the host unsynced for the next report
   or the reconcile, which compute the same providers from the database.

A device-level reading drives the device's record, a deployable-level one
that deployable's.  A deployable is scheduled by its EFFECTIVE health, the
worse of its own and its device's.  A device-level good reading (a probe
verdict included) also counts for the device's deployables that have no
fault of their own in the report, so a partition taken out on its own is
re-admitted by its device's probe; a device's fault verdict fails the
re-probe of its deployables probed with it that have no verdict of their
own in the report, at once (``health_machine.device_verdict``).

A reading applied once is not applied again.  An agent numbers the
readings it queues (``seq``, under the ``sender`` id of its health
monitor) and re-sends them until a send is answered; a send that timed
out (the conductor slow or away, RabbitMQ keeping the message) may still
be delivered, and the same transient fault then counted twice, a
transition and its notification made twice.  So the database keeps, per
host and sender, the highest number applied (``health_senders``), read
and moved on in the writing transaction of step 2, after the host's row
lock, and the readings numbered up to it are left out of a report.  A
late delivery and its re-send served by two conductors (or by one
restarted in between) are thus serialised on the host's row, and the
second leaves out what the first applied.  A numbered report always
takes step 2 (its number is recorded even when nothing else changes).
A host keeps the ``SENDERS_KEPT`` senders moved on last.  Readings
without a number (an older agent's, a full report's re-statements) are
applied as they come.
"""

import dataclasses
import time

from oslo_log import log as logging

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import notify
from cyborg.common import states
from cyborg.conductor import health_machine as machine
from cyborg.conductor import placement_sync
from cyborg.db import api as db_api
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import clock as clock_db
from cyborg.db.api import health as health_db
from cyborg.db.api import hosts as host_db
from cyborg.objects import health as health_objects

LOG = logging.getLogger(__name__)

# Attempts at writing changes that race another conductor (SQLite, which
# has no row lock for the host).
MAX_ATTEMPTS = 5
# Senders (agent health monitors: one per agent start) whose highest
# applied reading number a host keeps (``health_senders``); a late
# delivery is of the last one or two.
SENDERS_KEPT = 4
_SENDER_MAX_LENGTH = 64


class _Raced(Exception):
    """A guarded health UPDATE found the row already moved on."""


# -- entry points -------------------------------------------------------------

def handle_report(conf, context, hostname, report):
    """Apply a host's health readings (format: ``objects.health``).

    Returns ``{'accepted': <readings about known devices>}``; raises
    ``Invalid`` for a malformed report (nothing written).  Readings of
    devices the conductor does not know (not reported yet, or removed)
    are skipped, and so are those applied already (``health_senders``:
    a send that timed out, delivered beside its re-send, by whichever
    conductor).
    """
    started = time.monotonic()
    try:
        numbered = _parse(report)
        sender = report.get('sender')
        if not _good_sender(sender) or all(
                seq is None for _, seq in numbered):
            outcome = _apply(conf, context, hostname,
                             [reading for reading, _ in numbered])
        else:
            outcome = _apply(conf, context, hostname, None,
                             numbered=(sender, numbered))
        return {'accepted': outcome.accepted}
    finally:
        metrics.CONDUCTOR_HEALTH_REPORT_SECONDS.observe(
            time.monotonic() - started)


def _good_sender(sender):
    """Whether ``sender`` is an id the database can keep numbers under
    (an agent's is 32 hex digits); the readings of a report with another
    are applied as if unnumbered."""
    return (isinstance(sender, str) and
            0 < len(sender) <= _SENDER_MAX_LENGTH and sender.isascii()
            and sender.isprintable() and sender == sender.strip())


def _unseen(numbered, done):
    """``(readings, highest number, repeated)``: the readings of
    ``numbered`` (``[(reading, seq or None)]``) numbered above ``done``
    or not numbered, in order, the highest number among them (None:
    none numbered), and how many were left out."""
    readings, top, repeated = [], None, 0
    for reading, seq in numbered:
        if seq is not None and seq <= done:
            repeated += 1
            continue
        readings.append(reading)
        if seq is not None:
            top = seq if top is None else max(top, seq)
    return readings, top, repeated


def apply_readings(conf, context, hostname, readings):
    """Readings the conductor makes itself (an FPGA programming the agent
    did not finish in time), applied as an agent's report would be."""
    _apply(conf, context, hostname, readings)


def vouch(conf, context, hostname, device_uuid):
    """An admin enabled the device: its unhealthy records (its own and its
    deployables') are re-probed now (``health_machine.vouched``)."""
    _apply(conf, context, hostname, [], vouched=frozenset([device_uuid]))


def run_timers(conf, context):
    """Periodic job (``periodics.JOBS``): the timed steps now due (suspect
    expiry, end of a hold-down, probe timeout), host by host.  Returns how
    many records changed."""
    changed = 0
    for hostname in health_db.due_hosts(context, clock_db.utcnow()):
        try:
            # Each host at its own time: the hosts before it may have
            # taken long (a Placement sync each), and a step stamped
            # earlier would cut short the probe timeout it starts.
            changed += len(_apply(conf, context, hostname, [],
                                  clock_db.utcnow()).changes)
        except Exception:
            LOG.exception('Health timers of host %s failed; they run again '
                          'at the next tick', hostname)
    return changed


def parse_report(report):
    """The readings of a health report, or Invalid with the reason."""
    return [reading for reading, _ in _parse(report)]


def _seq(values):
    """A reading's number (``seq``), None when it has none (or not a
    positive integer: not trusted to leave anything out)."""
    seq = values.get('seq')
    if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0:
        return seq
    return None


def _restates(reading, seq):
    """Whether ``reading``, of a full report, re-states a condition (a
    pending row remap, an error register not yet cleared) rather than
    tells something new: not a probe verdict (asked for, answered once),
    nor an event (``Reading.event``: one more XID, new AER errors) that
    the agent numbered (``seq``): one it queued as news and is sending
    for the first time.  The first report of an agent that has just
    started is a full one, and carries the events it queued while the
    conductor could not be reached yet: each is an occurrence, counted
    as a change report's would be.  An event without a number is the
    agent's last check re-stated (sent before, in a change report), or
    an older agent's, which numbers nothing."""
    if reading.source == 'probe':
        return False
    return not (reading.event is True and seq is not None)


def _parse(report):
    """``[(reading, seq or None)]`` of a health report, or Invalid."""
    if not isinstance(report, dict) or not isinstance(
            report.get('readings'), list):
        raise exception.Invalid(
            reason='a health report is an object with a readings list')
    readings = []
    full = bool(report.get('full'))
    unknown = set()
    for values in report['readings']:
        try:
            severity = values.get('severity')
        except AttributeError as exc:
            raise exception.Invalid(reason=f'bad health reading: {exc}')
        if isinstance(severity, str) and severity not in states.SEVERITIES:
            # A newer agent's word: skip that reading, keep the others.
            unknown.add(severity)
            continue
        try:
            reading = health_objects.Reading.from_dict(
                dict(values, restated=False))
        except (TypeError, ValueError, AttributeError) as exc:
            raise exception.Invalid(reason=f'bad health reading: {exc}')
        if not isinstance(reading.device, str) or not (
                reading.deployable is None or
                isinstance(reading.deployable, str)):
            raise exception.Invalid(
                reason=f'bad health reading for {reading.device!r}')
        seq = _seq(values)
        reading.restated = full and _restates(reading, seq)
        readings.append((reading, seq))
    if unknown:
        LOG.warning('Health report: skipped the readings of unknown '
                    'severity %s (an agent newer than this conductor?); '
                    'the others are applied.', ', '.join(sorted(unknown)))
    return readings


# -- evaluation (no writes) -------------------------------------------------

@dataclasses.dataclass
class Change:
    """One record's move, as the notifications describe it."""

    kind: str                  # 'device' or 'deployable'
    row: dict                  # the record's row as read
    device: dict               # its device's row (itself for a device)
    old: machine.Record
    new: machine.Record


@dataclasses.dataclass
class _Evaluation:
    accepted: int = 0
    changes: list = dataclasses.field(default_factory=list)
    # Deployable uuid -> (effective health before, after).
    effective: dict = dataclasses.field(default_factory=dict)
    touched_providers: set = dataclasses.field(default_factory=set)
    probe_keys: list = dataclasses.field(default_factory=list)
    deployables: list = dataclasses.field(default_factory=list)
    outbox: object = None
    digest: str = None
    was_synced: bool = False
    # The host's sync_serial as the writing transaction left it.
    serial: int = None
    # Numbered readings left out: applied already.
    repeated: int = 0


def device_key(device_row):
    """The agent's key of a device row (``DriverDevice.key()``)."""
    return f"{device_row['cpid_type']}:{device_row['cpid_info']}"


def evaluate(settings, hostname, devices, deployables, readings, now,
             vouched=frozenset()):
    """What ``readings`` and the timers do to a host's records (rows as
    ``health_db.records`` returns them), the records of the devices whose
    uuids are in ``vouched`` (and their deployables') vouched for first;
    writes nothing."""
    by_key = {device_key(d): d for d in devices}
    by_name = {d['name']: d for d in deployables}
    own, accepted = _sort_readings(hostname, by_key, by_name, readings)
    result = _Evaluation(accepted=accepted, deployables=deployables)
    new_device = {}
    for device in devices:
        old = machine.Record.from_row(device)
        new = machine.step(_start(old, device, vouched, now, settings),
                           own.get(('device', device['id']), ()), now,
                           settings)
        new_device[device['id']] = new
        _note(result, 'device', device, device, old, new)
    devices_by_id = {d['id']: d for d in devices}
    for dep in deployables:
        device = devices_by_id[dep['device_id']]
        dep_readings = _deployable_readings(
            own.get(('deployable', dep['id']), []),
            own.get(('device', device['id']), ()))
        old = machine.Record.from_row(dep)
        new = machine.step(_start(old, device, vouched, now, settings),
                           dep_readings, now, settings)
        _note(result, 'deployable', dep, device, old, new)
        before = machine.effective(old.health, device['health'])
        after = machine.effective(new.health,
                                  new_device[device['id']].health)
        result.effective[dep['uuid']] = (before, after)
        if ((before in states.OUT_OF_SCHEDULE) !=
                (after in states.OUT_OF_SCHEDULE)):
            result.touched_providers.add(dep['rp_uuid'])
    return result


def _start(record, device, vouched, now, settings):
    """The record the readings apply to: vouched for if its device is."""
    if device['uuid'] in vouched:
        return machine.vouched(record, now, settings)
    return record


def _sort_readings(hostname, by_key, by_name, readings):
    """({('device'|'deployable', row id): [readings]}, accepted count)."""
    own = {}
    accepted = 0
    for reading in readings:
        device = by_key.get(reading.device)
        if device is None:
            LOG.debug('Health reading of unknown device %s of host %s '
                      'skipped', reading.device, hostname)
            continue
        if reading.deployable is None:
            target = ('device', device['id'])
        else:
            dep = by_name.get(reading.deployable)
            if dep is None or dep['device_id'] != device['id']:
                LOG.debug('Health reading of unknown deployable %s of %s '
                          'skipped', reading.deployable, reading.device)
                continue
            target = ('deployable', dep['id'])
        own.setdefault(target, []).append(reading)
        accepted += 1
    return own, accepted


def _deployable_readings(own, device_readings):
    """A deployable's readings: its own, then its device's good ones
    unless it has a fault of its own (a partition's fault outlives its
    device reading well), and its device's re-probe fault verdicts
    unless it has a verdict of its own (``health_machine.device_verdict``:
    they fail the re-probe of a deployable probed with its device, and
    change nothing else)."""
    faulty = any(not r.harmless for r in own)
    verdict = any(r.source == 'probe' for r in own)
    added = []
    for reading in device_readings:
        if reading.severity == states.OK:
            if not faulty:
                added.append(reading)
        elif (reading.source == 'probe' and not reading.harmless and
              not verdict):
            added.append(machine.device_verdict(reading))
    return own + added


def _note(result, kind, row, device, old, new):
    if new == old:
        return
    result.changes.append(Change(kind, row, device, old, new))
    if machine.needs_probe(old, new):
        key = device_key(device)
        if key not in result.probe_keys:
            result.probe_keys.append(key)


# -- applying -----------------------------------------------------------------

def _apply(conf, context, hostname, readings, now=None, vouched=frozenset(),
           numbered=None):
    """Apply ``readings`` and the timers.  ``numbered``, instead of
    ``readings``: ``(sender, [(reading, seq or None)])``, a report's
    readings of which those the host's ``sender`` had applied already
    are left out, in the writing transaction, which records the highest
    number applied."""
    now = now or clock_db.utcnow()
    settings = machine.Settings.from_conf(conf)
    if numbered is None:
        # Optimistic first look without a lock: most reports change
        # nothing.
        with db_api.reader.using(context):
            devices, deployables = health_db.records(context, hostname)
        result = evaluate(settings, hostname, devices, deployables,
                          readings, now, vouched)
        if not result.changes:
            return result
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            # Its own transaction, retried when it loses a lock conflict
            # (and on SQLite holding the write lock from its first read).
            result = db_api.write_retrying(context, _write, conf, context,
                                           hostname, readings, now, settings,
                                           vouched, numbered)
            break
        except _Raced:
            if attempt == MAX_ATTEMPTS:
                raise
            LOG.info('Health of host %s changed under us; evaluating '
                     'again.', hostname)
    if result.repeated:
        LOG.info('Health report of %s: %d reading(s) it sent before and '
                 'applied already (a send that timed out, delivered late) '
                 'left out', hostname, result.repeated)
    _after_commit(conf, context, hostname, result)
    return result


def _write(conf, context, hostname, readings, now, settings, vouched,
           numbered=None):
    if not host_db.lock(context, hostname):
        return _Evaluation()
    repeated = 0
    if numbered is not None:
        sender, numbered_readings = numbered
        row_id, done = health_db.applied(context, hostname, sender)
        readings, top, repeated = _unseen(numbered_readings, done)
    devices, deployables = health_db.records(context, hostname)
    result = evaluate(settings, hostname, devices, deployables, readings,
                      now, vouched)
    result.repeated = repeated
    for kind, table in (('device', 'devices'),
                        ('deployable', 'deployables')):
        rows = [dict(c.new.columns(since=c.old), uuid=c.row['uuid'],
                     old_health=c.old.health, old_due_at=c.old.due_at)
                for c in result.changes if c.kind == kind]
        if rows and health_db.write(context, table, rows) != len(rows):
            raise _Raced()
    if numbered is not None and top is not None:
        health_db.advance(context, hostname, sender, row_id, top,
                          SENDERS_KEPT)
    if result.touched_providers:
        host = host_db.get(context, hostname)
        result.digest = host['report_digest']
        result.was_synced = bool(host['placement_synced'])
        host_db.update(context, hostname, placement_synced=False)
        result.serial = host_db.sync_serial(context, hostname)
    result.outbox = _notifications(conf, context, hostname, result)
    return result


def log_changes(hostname, changes):
    """One INFO line and one transition counted per health ``Change``
    that moved the state, once committed (whoever moved it: readings,
    timers, or the inventory when hardware is lost or comes back)."""
    for change in changes:
        if change.old.health != change.new.health:
            metrics.CONDUCTOR_HEALTH_TRANSITIONS.labels(
                change.kind, change.old.health, change.new.health).inc()
            LOG.info('Health of %s %s on %s: %s -> %s (%s)', change.kind,
                     change.row.get('name') or change.row['uuid'], hostname,
                     change.old.health, change.new.health,
                     change.new.reason or 'no fault')


def _after_commit(conf, context, hostname, result):
    log_changes(hostname, result.changes)
    if result.outbox is not None:
        result.outbox.send()
    if result.probe_keys:
        _ask_probe(conf, context, hostname, result.probe_keys)
    if result.touched_providers:
        placement_sync.sync_after_report(
            conf, context, hostname,
            placement_sync.Touched(result.touched_providers),
            result.digest, trust_memory=result.was_synced,
            serial=result.serial)


def _ask_probe(conf, context, hostname, device_keys):
    """Cast the re-probe; if it is lost the probe timeout takes the
    device back to unhealthy, and the hold-down starts over."""
    try:
        agent_rpcapi.AgentAPI(conf).probe_health(context, hostname,
                                                 device_keys)
    except Exception as exc:
        LOG.warning('Could not ask the agent on %s to re-probe %s: %s',
                    hostname, ', '.join(device_keys), exc)


# -- notifications ------------------------------------------------------------

def _notifications(conf, context, hostname, result):
    """An Outbox of DEVICE_HEALTH_CHANGE for every state change (None
    when notifications are off: no payload is built then)."""
    moved = [c for c in result.changes if c.old.health != c.new.health]
    if not moved or not notify.enabled(conf):
        return None
    outbox = notify.Outbox(conf, context)
    add_notifications(outbox, context, hostname, moved, result.deployables,
                      result.effective)
    return outbox


def add_notifications(outbox, context, hostname, changes, deployables,
                      effective):
    """Add a DEVICE_HEALTH_CHANGE per ``Change`` to ``outbox``, with the
    deployables it affects (among ``deployables``, rows of the host), their
    effective health after it (``effective``: {deployable uuid: (before,
    after)}) and the ARQs bound to them: one shape whoever moved the
    health (readings, timers, or hardware lost and back)."""
    affected = {id(c): _affected(c, deployables) for c in changes}
    arqs = _bound_arqs(context, [d['id'] for deps in affected.values()
                                 for d in deps])
    for change in changes:
        outbox.add(notify.DEVICE_HEALTH_CHANGE,
                   _payload(hostname, change, affected[id(change)], arqs,
                            effective),
                   _priority(change.new.health))


def _affected(change, deployables):
    if change.kind == 'deployable':
        return [change.row]
    return [d for d in deployables if d['device_id'] == change.row['id']]


def _bound_arqs(context, deployable_ids):
    found = {}
    if deployable_ids:
        for arq in arq_db.holding(context, set(deployable_ids)):
            found.setdefault(arq.deployable_id, []).append(
                {'uuid': arq.uuid, 'state': arq.state,
                 'instance_uuid': arq.instance_uuid,
                 'project_id': arq.project_id})
    return found


def _payload(hostname, change, affected, arqs, effective):
    device = change.device
    bound = [arq for dep in affected for arq in arqs.get(dep['id'], ())]
    payload = {
        'host': hostname, 'device_uuid': device['uuid'],
        'device_key': device_key(device), 'device_type': device['type'],
        'deployable_uuid': None, 'deployable_name': None,
        'old_health': change.old.health, 'health': change.new.health,
        'reason': change.new.reason,
        'deployables': [
            {'uuid': d['uuid'], 'name': d['name'], 'rp_uuid': d['rp_uuid'],
             'health': effective.get(d['uuid'], (None, None))[1]}
            for d in affected],
        'arqs': bound,
        'instance_uuids': sorted({a['instance_uuid'] for a in bound
                                  if a['instance_uuid']}),
        'project_ids': sorted({a['project_id'] for a in bound
                               if a['project_id']}),
    }
    if change.kind == 'deployable':
        payload.update(deployable_uuid=change.row['uuid'],
                       deployable_name=change.row['name'])
    return payload


def _priority(health):
    if health in (states.UNHEALTHY, states.LOST):
        return notify.ERROR
    if health == states.HEALTHY:
        return notify.INFO
    return notify.WARN
