"""The health state machine of one device or deployable: pure functions.

No database, no clock, no configuration object: the caller passes the
stored record, the reading, ``now`` and the ``Settings``.  The conductor
(``cyborg.conductor.health``) loads records, runs these functions and
writes what changed.  The vocabulary is ``cyborg.common.states``.

A record (the ``HealthColumns`` of a device or deployable row) moves so::

    healthy --transient--> suspect --(suspect_threshold faults)--> unhealthy
      (counted while it stays suspect: each fault, or re-statement of its
      condition, within suspect_window of the one before)
    suspect --(its condition re-stated)--> suspect (window restarts)
    suspect --(a transient reading after max_suspect_time)--> unhealthy
    suspect --(suspect_window without fault)--> healthy           (timer)
    any --fatal/gone--> unhealthy
    unhealthy --first good reading--> hold-down starts (due_at)
    healthy/suspect/unhealthy --the conductor's own fault reading (an FPGA
      programming whose outcome is unknown, program:unfinished)-->
      unhealthy, hold-down started (due_at) unless one runs: no good
      reading needed
    unhealthy --a fault reading--> hold-down stopped until the next good
      reading (a probe's verdict, asked for rather than watched, leaves
      it running)
    unhealthy --hold-down over--> probing (+ re-probe request)    (timer)
    probing --probe verdict ok--> healthy (re-admitted; flaps counted)
    probing --probe verdict fault, or any fault--> unhealthy, next
      re-probe scheduled (due_at: ``reprobe_wait``, one more failed
      re-probe; with a zero hold-down, a record an agent's reading took
      out waits for its next good reading instead)
    probing deployable --its device's probe verdict fault (no verdict of
      its own)--> the same (a deployable's record; cyborg.conductor.health)
    probing --no verdict within probe_timeout--> unhealthy, next
      re-probe scheduled, as above                                (timer)
    unhealthy after that --the late verdict ok--> healthy (re-admitted)
    healthy/suspect --a probe's "not yet" (probe:programming)--> unchanged
    hardware vanished while allocated, or while not healthy --> lost
      (out only because a 'gone' reading saw it vanish: as healthy)
    hardware vanished in the status an operator gave it --> lost
    lost --came back--> unhealthy ('came back; re-probing'), hold-down
      started (due_at): no good reading needed
    unhealthy --an admin enables the device--> probing (flaps and failed
      re-probes forgotten)

The hold-down is ``hold_down * 2**(flaps + failed - 1)`` (``failed - 1``
at least 0; at most ``max_hold_down``), where flaps counts re-admissions,
each within ``flap_window`` of the one before, and failed the re-probes
failed in a row since the record was taken out (``Record.failed_probes``;
none on a row a conductor of the previous release moved last, whose
``health_faults`` counts transient faults): a device that keeps failing
soon after coming back, or keeps failing its re-probes, stays out longer
each time.  A failed re-probe schedules the
next one by itself, without waiting for a good reading (an agent with
health watching off sends none, yet answers re-probes): a device out
only because its agent or the broker was away for the probe comes back
after ``hold_down``, one broken for good is re-probed rarely.  A zero
hold-down (re-probe at the first good reading) re-probes a record an
agent's reading took out at its next good reading after a failed
re-probe, as at the first; one the conductor took out itself (an FPGA
programming whose outcome is unknown, hardware that came back) waits
``probe_timeout`` from a failed re-probe to the next (``reprobe_wait``):
no good reading need come (its agent may watch no health), and not at
every tick of the timers.  An application-severity reading (a
workload's fault) never changes anything.

Every move gives a record a code (``Record.code``, the ``health_code``
column) saying why it is in its health, for this module, beside its
reason, for people: one of the ``*_CODE`` constants below, None when
healthy.  The facts read back from a record (``taken_out_by_conductor``,
``out_for_no_verdict``, ``healthy_until_it_vanished``, ``remembered``)
are read from its code, through ``code_of`` alone, which reads how the
reason begins instead for a record a conductor of the previous release
wrote (no code, or one that does not fit its health).
"""

import dataclasses
import datetime
import re

from cyborg.common import states
from cyborg.objects import health as health_objects

# A hold-down doubles per flap; past this many doublings it is capped by
# max_hold_down anyway (and 2**n stays a small integer).
_MAX_DOUBLINGS = 32

CAME_BACK_REASON = 'came back; re-probing'
LOST_REASON = 'the hardware vanished while allocations still hold it'
# How the reason of hardware that vanished while not healthy begins: such a
# record is remembered (``remembered``) after no allocation holds it.
VANISHED_UNHEALTHY = 'the hardware vanished while not healthy'
# How the reason of hardware that vanished while its device was in a
# status an operator gave it (not the one a new device starts in) begins:
# remembered the same way, so that it comes back in that status.
VANISHED_IN_STATUS = 'the hardware vanished while its device was'
# How the reason of a record taken out by a 'gone' reading alone begins.
GONE_REASON = 'the device vanished or its driver was unbound'
# How the reason of a record whose re-probe timed out begins
# (``no_verdict_reason``, ``out_for_no_verdict``).
NO_VERDICT = 'no re-probe verdict within'
# The code of the fatal reading the conductor makes itself for an FPGA
# whose programming's outcome is unknown (cyborg.conductor.programming),
# and of the record it takes out (``CONDUCTOR_CODES``).
PROGRAM_UNFINISHED = 'program:unfinished'
# The code of a device's re-probe fault verdict as its deployables get
# it (``device_verdict``), and how the reason of one failed by it begins.
DEVICE_VERDICT = 'probe:device'
DEVICE_VERDICT_REASON = "its device's re-probe verdict"

# -- codes ----------------------------------------------------------------
# Why a record is in its health (``Record.code``, column ``health_code``;
# None: healthy).  No API shows them; a migration fills them from the
# reasons of rows written before them (``code_of`` reads those too).
#
# Suspect: transient faults counted.
SUSPECT_CODE = 'suspect'
# Out (unhealthy, or probing since), taken out by an agent's reading:
# re-probed after a hold-down that starts at a good reading.  A fault
# reading (fatal; a probe's fault verdict; a 'gone' one of a record
# that was failing already, whose reason it keeps).
FAULT_CODE = 'fault'
# A 'gone' reading alone (``GONE_REASON``).
GONE_CODE = 'gone'
# Too many transient faults, or suspect for too long.
TRANSIENT_FAULTS_CODE = 'transient-faults'
SUSPECT_TOO_LONG_CODE = 'suspect-too-long'
# Its re-probe failed: a fault verdict or a fault meanwhile, or no
# verdict within probe_timeout (``NO_VERDICT``).
PROBE_FAILED_CODE = 'probe:failed'
NO_VERDICT_CODE = 'probe:no-verdict'
# Out, taken out by the conductor itself: re-probed after a hold-down
# that starts then, no good reading needed (``taken_out_by_conductor``).
# An FPGA programming whose outcome is unknown (the code of the
# conductor's reading, ``PROGRAM_UNFINISHED``), lost hardware that came
# back (``CAME_BACK_REASON``), and the failed re-probes of those.
CAME_BACK_CODE = 'came-back'
CONDUCTOR_PROBE_FAILED_CODE = 'conductor:probe-failed'
CONDUCTOR_NO_VERDICT_CODE = 'conductor:no-verdict'
# Lost: ``LOST_REASON``, ``VANISHED_UNHEALTHY``, ``VANISHED_IN_STATUS``.
LOST_CODE = 'lost'
LOST_UNHEALTHY_CODE = 'lost:unhealthy'
LOST_IN_STATUS_CODE = 'lost:in-status'

CONDUCTOR_CODES = frozenset((PROGRAM_UNFINISHED, CAME_BACK_CODE,
                             CONDUCTOR_PROBE_FAILED_CODE,
                             CONDUCTOR_NO_VERDICT_CODE))
NO_VERDICT_CODES = frozenset((NO_VERDICT_CODE, CONDUCTOR_NO_VERDICT_CODE))
_OUT_CODES = CONDUCTOR_CODES | {FAULT_CODE, GONE_CODE, TRANSIENT_FAULTS_CODE,
                                SUSPECT_TOO_LONG_CODE, PROBE_FAILED_CODE,
                                NO_VERDICT_CODE}
# The codes each health has: a record's code that is not one of its
# health's was written before a conductor of the previous release moved
# it (that release writes no code, and leaves the one there).
CODES = {states.HEALTHY: frozenset((None,)),
         states.SUSPECT: frozenset((SUSPECT_CODE,)),
         states.UNHEALTHY: _OUT_CODES, states.PROBING: _OUT_CODES,
         states.LOST: frozenset((LOST_CODE, LOST_UNHEALTHY_CODE,
                                 LOST_IN_STATUS_CODE))}
# The code of a record the previous release wrote, by how its reason
# begins (``code_of``; the migration that added the column filled the
# rows of before it the same way).  Its reasons do not say who took out
# a record whose re-probe timed out: taken as the conductor, whose rule
# (``reprobe_wait``) was the previous release's for all.
REASON_CODES = ((GONE_REASON, GONE_CODE),
                (NO_VERDICT, CONDUCTOR_NO_VERDICT_CODE),
                (CAME_BACK_REASON, CAME_BACK_CODE),
                (LOST_REASON, LOST_CODE),
                (VANISHED_UNHEALTHY, LOST_UNHEALTHY_CODE),
                (VANISHED_IN_STATUS, LOST_IN_STATUS_CODE))
# The reason a conductor of the previous release (2027.1) gives a record
# it takes out for transient faults, leaving their count in
# ``health_faults`` (``Record.failed_probes``); this release's says
# more (``_transient``).
PREVIOUS_TRANSIENT_FAULTS = re.compile(
    r'[0-9]+ transient faults within [0-9]+ s; last: ')


@dataclasses.dataclass(frozen=True)
class Settings:
    """The [health] options the machine needs, in seconds."""

    suspect_threshold: int = 3
    suspect_window: int = 300
    max_suspect_time: int = 900
    hold_down: int = 60
    max_hold_down: int = 86400
    flap_window: int = 3600
    probe_timeout: int = 60

    @classmethod
    def from_conf(cls, conf):
        return cls(**{f.name: conf.health[f.name]
                      for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class Record:
    """The health columns of one row (``models.HealthColumns``).

    ``faults`` counts the transient faults of a suspect record, and the
    re-probes failed in a row of an unhealthy or probing one
    (``failed_probes``); no API shows it.  A record taken out from
    healthy or suspect starts that count at 0.  ``code``: why it is in
    its health, one of ``CODES[health]``; read it through ``code_of``
    (a row the previous release wrote has none, or an out-of-date
    one)."""

    health: str = states.HEALTHY
    reason: str = None
    code: str = None
    updated_at: datetime.datetime = None
    faults: int = 0
    flaps: int = 0
    due_at: datetime.datetime = None
    readmitted_at: datetime.datetime = None

    # Record field -> column name.
    COLUMNS = {'health': 'health', 'reason': 'health_reason',
               'code': 'health_code', 'updated_at': 'health_updated_at',
               'faults': 'health_faults', 'flaps': 'health_flaps',
               'due_at': 'health_due_at',
               'readmitted_at': 'health_readmitted_at'}

    @classmethod
    def from_row(cls, row):
        """The record of a row dict (missing columns: the defaults)."""
        values = {field: row.get(column)
                  for field, column in cls.COLUMNS.items()}
        values['health'] = values['health'] or states.HEALTHY
        values['faults'] = values['faults'] or 0
        values['flaps'] = values['flaps'] or 0
        return cls(**values)

    def columns(self, since=None):
        """Column values of this record; with ``since`` (an older record),
        only the columns that differ from it."""
        return {column: getattr(self, field)
                for field, column in self.COLUMNS.items()
                if since is None or getattr(since, field) !=
                getattr(self, field)}

    @property
    def failed_probes(self):
        """Re-probes failed in a row since the record was taken out (0
        unless unhealthy or probing).

        0 too for a row a conductor of the previous release moved last,
        which counts no failed re-probe, but leaves in ``faults`` the
        transient faults of the suspect record it takes out (for
        ``suspect_threshold`` of them, or a fatal fault), as long as it
        stays out: read as failed re-probes, they would double its
        hold-down that many times less one.  Such a row has no code, or
        one this release wrote before that is not one of its health's
        (this release writes one of its health's at every move, and every
        failed re-probe it counts); or, where that code fits still, the
        reason that release gives a record it takes out for transient
        faults (``PREVIOUS_TRANSIENT_FAULTS``)."""
        if self.health not in (states.UNHEALTHY, states.PROBING):
            return 0
        if (self.code not in CODES[self.health] or
                PREVIOUS_TRANSIENT_FAULTS.match(self.reason or '')):
            return 0
        return self.faults


def _moved(record, now, health, reason, code, **values):
    """``record`` in ``health``, for ``reason`` and ``code``;
    ``updated_at`` changes with the state."""
    if health != record.health:
        values['updated_at'] = now
    return dataclasses.replace(record, health=health, reason=reason,
                               code=code, **values)


def _seconds(value):
    return datetime.timedelta(seconds=value)


def hold_down(record, now, settings):
    """Seconds an unhealthy ``record`` waits for its re-probe (reading
    well, or after a failed re-probe: ``reprobe_wait``): doubled per
    flap, flaps counting only while the last re-admission is within the
    flap window, and per re-probe it failed in a row after the first (the
    first failed one is re-probed after the same wait: most often its
    agent or the broker was away for a moment)."""
    flaps = record.flaps
    if (record.readmitted_at is None or
            now - record.readmitted_at > _seconds(settings.flap_window)):
        flaps = 0
    doublings = flaps + max(record.failed_probes - 1, 0)
    seconds = settings.hold_down * 2 ** min(doublings, _MAX_DOUBLINGS)
    return min(seconds, settings.max_hold_down)


def reprobe_wait(record, now, settings):
    """Seconds from the failed re-probe of ``record`` (unhealthy again)
    to its next: its hold-down; where that is zero (``hold_down`` or
    ``max_hold_down`` 0), None (at its next good reading, as after it
    was taken out) for a record an agent's reading took out, and
    ``probe_timeout`` for one the conductor took out itself
    (``taken_out_by_conductor``).  Such a record, on a host whose agent
    watches no health, gets no good reading to start another hold-down,
    yet its agent answers re-probes.  Not at once: a card that keeps
    answering "not yet" (still being programmed), or a device broken
    for good, would move between unhealthy and probing at every tick of
    the timers."""
    seconds = hold_down(record, now, settings)
    if seconds:
        return seconds
    return settings.probe_timeout if taken_out_by_conductor(record) else None


# -- readings -----------------------------------------------------------------

def apply_reading(record, reading, now, settings):
    """The record after ``reading`` (an ``objects.health.Reading``)."""
    if record.health == states.LOST:
        # Only the inventory (the hardware coming back) ends 'lost'.
        return record
    severity = reading.severity
    if severity == states.APPLICATION:
        return record
    if reading.code == DEVICE_VERDICT:
        # A verdict only for a record probed with its device.
        if record.health != states.PROBING or reading.harmless:
            return record
        return _probe_failed(record, now, settings, reading.reason)
    if severity == states.OK:
        return _good(record, reading, now, settings)
    if severity == states.TRANSIENT:
        return _transient(record, reading, now, settings)
    if severity == states.GONE and record.health != states.HEALTHY:
        return _out(record, reading, now, settings,
                    *_gone_too(record, _fault_reason(reading)))
    if severity == states.GONE:
        return _out(record, reading, now, settings, _fault_reason(reading),
                    GONE_CODE)
    return _out(record, reading, now, settings, _fault_reason(reading))


def _gone_too(record, gone):
    """(reason, code) of a device that was not healthy and is now gone:
    why it was failing first, so that it is remembered as failing
    (``vanished``), then, once, that it went (a fault: code None)."""
    if not record.reason:
        return gone, GONE_CODE
    if gone in record.reason:
        return record.reason, code_of(record)
    return f'{record.reason}; then {gone}', None


def _fault_reason(reading):
    if reading.severity == states.GONE:
        return GONE_REASON + (f': {reading.reason}' if reading.reason
                              else '')
    return reading.reason or f'{reading.severity} fault ({reading.source})'


def _taken_out(record, now, reason, code):
    """Unhealthy from healthy, suspect or lost: no re-probe failed yet;
    the hold-down starts at the next good reading."""
    return _moved(record, now, states.UNHEALTHY, reason, code, faults=0,
                  due_at=None)


def _out(record, reading, now, settings, reason, code=None):
    """Unhealthy after the fault ``reading``, for ``reason`` and
    ``code`` (None: a fault, ``FAULT_CODE``, or the re-probe it fails
    of a probing record)."""
    if _unwatched(reading):
        code = PROGRAM_UNFINISHED
    if record.health == states.PROBING:
        return _probe_failed(record, now, settings, reason, code)
    if _unwatched(reading):
        # No good reading need follow it: an agent with health watching
        # off sends none, yet answers the re-probe.  A hold-down already
        # running goes on (as after a probe's verdict); a fault the
        # agent reads later stops it, as any.
        out = (_taken_out(record, now, reason, code)
               if record.health != states.UNHEALTHY
               else dataclasses.replace(record, reason=reason, code=code))
        return out if out.due_at is not None else _held_down(out, now,
                                                             settings)
    if record.health != states.UNHEALTHY:
        return _taken_out(record, now, reason, code or FAULT_CODE)
    if reading.source == 'probe':
        # A re-probe's verdict (late): its re-probe failed.
        return _still_out(record, reading, reason=reason,
                          code=code or _failed(record))
    return _still_out(record, reading, reason=reason,
                      code=code or FAULT_CODE)


def _unwatched(reading):
    """Whether the fault ``reading`` is the conductor's own, not one of
    an agent's health watching (an FPGA programming whose outcome is
    unknown, ``PROGRAM_UNFINISHED``): the record it takes out is
    re-probed after its hold-down without a good reading, as hardware
    that came back is (``came_back``)."""
    return reading.code == PROGRAM_UNFINISHED


def _held_down(record, now, settings):
    """The unhealthy ``record`` with its hold-down started ``now``."""
    return dataclasses.replace(
        record, due_at=now + _seconds(hold_down(record, now, settings)))


def _still_out(record, reading, **values):
    """An unhealthy record's fault ``reading``: the device is still not
    well, so its hold-down stops until the next good reading (where the
    agent watches health, one will come once it is well), unless the
    reading is a probe's verdict (one that came after its probe timed
    out, or a partition's fault sent beside its device's verdict): a
    verdict comes only when asked, and is no sign that any reading will
    follow, so the re-probe scheduled stays."""
    if reading.source == 'probe':
        return dataclasses.replace(record, **values)
    return dataclasses.replace(record, due_at=None, **values)


def _probe_failed(record, now, settings, reason, code=None):
    """A probing record whose re-probe failed: unhealthy, one more
    re-probe failed in a row, and the next one scheduled after the
    wait that count gives (``reprobe_wait``), readings or not (but at
    the next good reading where that is None).  ``code``: None for a
    failed re-probe (``_failed``)."""
    out = _moved(record, now, states.UNHEALTHY, reason,
                 code or _failed(record), faults=record.failed_probes + 1)
    wait = reprobe_wait(out, now, settings)
    return dataclasses.replace(
        out, due_at=None if wait is None else now + _seconds(wait))


def _failed(record, no_verdict=False):
    """The code of ``record`` once its re-probe failed (``no_verdict``:
    timed out), saying still who took it out."""
    if taken_out_by_conductor(record):
        return (CONDUCTOR_NO_VERDICT_CODE if no_verdict
                else CONDUCTOR_PROBE_FAILED_CODE)
    return NO_VERDICT_CODE if no_verdict else PROBE_FAILED_CODE


def _good(record, reading, now, settings):
    if record.health == states.UNHEALTHY and record.due_at is None:
        # The hold-down counts from the first good reading.
        due = now + _seconds(hold_down(record, now, settings))
        return dataclasses.replace(record, due_at=due)
    if reading.source == 'probe' and (
            record.health == states.PROBING or _late_verdict(record)):
        return _readmitted(record, now, settings)
    return record


def _late_verdict(record):
    """Whether a probe's good verdict for the unhealthy ``record`` is
    that of a re-probe it timed out waiting for: the probe requests of an
    agent that was away (stopped, its host rebooting, the broker cut) wait
    in its queue and are answered when it is back, after their
    ``probe_timeout``.  Each timed out, doubling the next wait: without
    their verdicts a device out only for that would stay out for what
    the outage built up.  Not after a fault reading meanwhile, which
    stops the scheduled re-probe (a watched host's device still
    failing).  Its re-probe timed out is what its code says
    (``out_for_no_verdict``), or, on a row of the previous release, its
    reason: that release counted no failed re-probe
    (``Record.failed_probes``)."""
    return (record.health == states.UNHEALTHY and record.due_at is not None
            and out_for_no_verdict(record))


def no_verdict_reason(settings):
    """The reason of a record whose re-probe timed out."""
    return f'{NO_VERDICT} {settings.probe_timeout} s'


def out_for_no_verdict(record):
    """Whether ``record`` is out because its last re-probe timed out
    (``no_verdict_reason``)."""
    return code_of(record) in NO_VERDICT_CODES


def taken_out_by_conductor(record):
    """Whether the conductor took ``record`` out itself (an FPGA
    programming whose outcome is unknown, hardware that came back), not
    an agent's reading: no good reading need follow (``reprobe_wait``).
    So is one out since the previous release whose reason does not say
    (that release's rule was this one's for all)."""
    code = code_of(record)
    return code in CONDUCTOR_CODES or (
        code is None and record.health in (states.UNHEALTHY,
                                           states.PROBING))


def code_of(record):
    """The code of ``record``: the one place a record's code is read.
    A conductor of the previous release (a rolling upgrade) writes none,
    and leaves the one there as it moves a record: a record with no
    code, or one that is not one of its health's (``CODES``), is read
    by how its reason begins (``REASON_CODES``), None when that says
    nothing.  This fallback can go in the next release, beside which no
    conductor of the previous one runs, once its migration has filled
    the same way the rows still without a code that fits their health
    (doc/source/upgrade.rst)."""
    allowed = CODES.get(record.health, ())
    if record.code in allowed:
        return record.code
    for beginning, code in REASON_CODES:
        if (code in allowed and record.reason
                and record.reason.startswith(beginning)):
            return code
    return None


def _readmitted(record, now, settings):
    recent = (record.readmitted_at is not None and
              now - record.readmitted_at <= _seconds(settings.flap_window))
    return _moved(record, now, states.HEALTHY, None, None, faults=0,
                  due_at=None,
                  flaps=record.flaps + 1 if recent else 1,
                  readmitted_at=now)


def _transient(record, reading, now, settings):
    reason = reading.reason or f'transient fault ({reading.source})'
    if (reading.code == health_objects.PROBE_NOT_YET and
            record.health in (states.HEALTHY, states.SUSPECT)):
        # A re-probe's "not yet" (a card being programmed answers it for
        # the device and each of its deployables) is a verdict only for
        # what is out.  Any other fault a probe finds is one.
        return record
    if record.health == states.SUSPECT:
        # A window that ran out before the timers ran (they run between
        # reports) made the record healthy first: its faults are no
        # longer counted with this one.
        record = apply_timers(record, now, settings)
    suspect_for = _suspect_for(record, now)
    if (settings.max_suspect_time and suspect_for is not None and
            suspect_for >= settings.max_suspect_time):
        # Still failing after all this time: a condition that does not
        # clear (a GPU held in hardware slowdown, a reset that never
        # comes) takes the device out until it reads well.
        return _taken_out(record, now,
                          f'suspect for {suspect_for} s, longer than '
                          f'max_suspect_time ({settings.max_suspect_time} '
                          f's); last: {reason}', SUSPECT_TOO_LONG_CODE)
    if record.health == states.SUSPECT and reading.restated:
        # The condition that made it suspect still holds: not a new
        # fault, but it stays suspect for as long as it lasts (and the
        # window after it), rather than passing for healthy in between.
        return dataclasses.replace(
            record, due_at=now + _seconds(settings.suspect_window))
    if record.health in (states.HEALTHY, states.SUSPECT):
        faults = (record.faults if record.health == states.SUSPECT
                  else 0) + 1
        if faults >= settings.suspect_threshold:
            # Not "within suspect_window" of the first: the record keeps
            # no time of each fault, only that it stayed suspect between
            # them (each fault, or re-statement of a condition that still
            # held, within suspect_window of the one before).
            return _taken_out(record, now,
                              f'{faults} transient faults within '
                              f'{settings.suspect_window} s of the last '
                              f'fault or held condition before each; '
                              f'last: {reason}', TRANSIENT_FAULTS_CODE)
        return _moved(record, now, states.SUSPECT, reason, SUSPECT_CODE,
                      faults=faults,
                      due_at=now + _seconds(settings.suspect_window))
    if record.health == states.PROBING:
        return _probe_failed(record, now, settings, reason)
    # Unhealthy: the device is still not well.
    return _still_out(record, reading)


def _suspect_for(record, now):
    """Whole seconds ``record`` has been suspect without a break, or None
    when it is not suspect."""
    if record.health != states.SUSPECT or record.updated_at is None:
        return None
    return int((now - record.updated_at).total_seconds())


# -- timers -------------------------------------------------------------------

def apply_timers(record, now, settings):
    """The record after the timed steps due at ``now``."""
    if record.due_at is None or now < record.due_at:
        return record
    if record.health == states.SUSPECT:
        return _moved(record, now, states.HEALTHY, None, None, faults=0,
                      due_at=None)
    if record.health == states.UNHEALTHY:
        return _moved(record, now, states.PROBING, record.reason,
                      record.code,
                      due_at=now + _seconds(settings.probe_timeout))
    if record.health == states.PROBING:
        return _probe_failed(record, now, settings,
                             no_verdict_reason(settings),
                             _failed(record, no_verdict=True))
    return record


def step(record, readings, now, settings):
    """The record after ``readings`` (in order), then the timers."""
    for reading in readings:
        record = apply_reading(record, reading, now, settings)
    return apply_timers(record, now, settings)


def device_verdict(verdict):
    """A device's re-probe verdict ``verdict``, a fault, as one of its
    deployables gets it (one that has no verdict of its own in the same
    report: cyborg.conductor.health).  The re-probe asked for the device
    is asked for each of its deployables being probed, and its good
    verdict re-admits them: its fault fails their re-probe at once, with
    a reason naming it, rather than leave each to wait for its probe
    timeout.  It changes nothing of a deployable that is not probing (a
    fault of the device takes every partition out by itself:
    ``effective``)."""
    return dataclasses.replace(
        verdict, code=DEVICE_VERDICT,
        reason=f'{DEVICE_VERDICT_REASON}: {_fault_reason(verdict)}')


def needs_probe(old, new):
    """Whether the move from ``old`` to ``new`` asks for a re-probe."""
    return new.health == states.PROBING and old.health != states.PROBING


# -- the operator ----------------------------------------------------------

def vouched(record, now, settings):
    """An admin enabled the device (repaired, reseated or replaced it): an
    unhealthy record is re-probed now rather than at the end of its
    hold-down, and its history (flaps, failed re-probes) is forgotten.
    Only the probe's verdict re-admits it; any other health is left as it
    is (a lost device has no hardware to probe)."""
    if record.health != states.UNHEALTHY:
        return record
    return _moved(record, now, states.PROBING, record.reason, record.code,
                  flaps=0, faults=0,
                  due_at=now + _seconds(settings.probe_timeout))


# -- inventory events (devices and deployables) ---------------------------

def lost(record, now):
    """The hardware vanished while allocated: out, as 'lost'."""
    return _moved(record, now, states.LOST, LOST_REASON, LOST_CODE,
                  due_at=None, faults=0)


def healthy_until_it_vanished(record):
    """Whether ``record`` was healthy until its hardware vanished: healthy,
    or out only because a 'gone' reading said the hardware went (the
    agent's health check may notice a removal before its inventory report
    says so; a failing device keeps its own reason, ``apply_reading``)."""
    return record.health == states.HEALTHY or (
        record.health == states.UNHEALTHY
        and code_of(record) == GONE_CODE)


def worst(*records):
    """The record whose health was worst when their hardware vanished
    (``states.worst``'s order, a record ``healthy_until_it_vanished``
    counting as healthy; the first of equals)."""
    return max(records, key=lambda r: 0 if healthy_until_it_vanished(r)
               else states.HEALTH_STATES.index(r.health))


def vanished(record, now, worst=None, status=None):
    """The hardware of ``record`` vanished: 'lost'.  ``worst``: the record
    deciding its health (its own, by default; its device's, or a device's
    deployables', when worse).  Not healthy then, the reason says how it
    was, so that the row is kept (``remembered``) and its return is
    re-probed instead of trusted.  Healthy until it vanished
    (``healthy_until_it_vanished``) with a ``status`` to keep (its
    device's, an operator's, not the one a new device starts in), the
    reason says that status, so that the row is kept the same way and the
    device comes back in it; otherwise only allocations holding it keep it
    (``LOST_REASON``)."""
    worst = worst or record
    if worst.health != states.LOST and not healthy_until_it_vanished(worst):
        reason = f'{VANISHED_UNHEALTHY} ({worst.health}' + (
            f': {worst.reason})' if worst.reason else ')')
        code = LOST_UNHEALTHY_CODE
    elif status:
        reason = f'{VANISHED_IN_STATUS} {status}'
        code = LOST_IN_STATUS_CODE
    else:
        return lost(record, now)
    return _moved(record, now, states.LOST, reason, code, due_at=None,
                  faults=0)


def remembered(record, now, settings):
    """Whether the row of hardware that vanished while not healthy, or
    while its device was in a status an operator gave it, is still kept,
    though no allocation holds it: for ``max_hold_down`` (the longest a
    failing device is held out) after it vanished, so that within that
    time it comes back unhealthy, not healthy, and in its status, not in
    a new device's."""
    return (record.health == states.LOST
            and code_of(record) in (LOST_UNHEALTHY_CODE,
                                    LOST_IN_STATUS_CODE)
            and record.updated_at is not None
            and now - record.updated_at < _seconds(settings.max_hold_down))


def came_back(record, now, settings):
    """Lost hardware is back: unhealthy, re-admitted by the hold-down and
    a re-probe like any failed device (it may have been swapped or reset;
    it is not trusted until a probe says it works).  The hold-down starts
    now, not at its first good reading as after a fault: an agent with
    health watching off sends no readings, yet answers the re-probe at
    its end.  Readings during it do what they do to any unhealthy record
    whose hold-down runs: a good one leaves it as it is (neither shorter
    nor started again), a fault stops it until the next good reading."""
    if record.health != states.LOST:
        return record
    return _held_down(_taken_out(record, now, CAME_BACK_REASON,
                                 CAME_BACK_CODE), now, settings)


# -- what the scheduler sees ----------------------------------------------

def effective(own, device):
    """The health a deployable is scheduled by: the worse of its own and
    its device's (a fatal fault on the device takes every partition of it
    out)."""
    return states.worst(own, device)

