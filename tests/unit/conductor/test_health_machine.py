"""health_machine: the pure health state machine, every transition."""

import dataclasses
import datetime

import pytest

from cyborg.common import states
from cyborg.conductor import health_machine as m
from cyborg.objects.health import PROBE_NOT_YET
from cyborg.objects.health import Reading

T0 = datetime.datetime(2025, 1, 1, 12, 0, 0)
S = m.Settings(suspect_threshold=3, suspect_window=300, hold_down=60,
               max_hold_down=600, flap_window=3600, probe_timeout=30)
DEV = 'PCI:0000:3b:00.0'


def at(seconds):
    return T0 + datetime.timedelta(seconds=seconds)


def reading(severity, reason='', source='nvml', code=None):
    return Reading(device=DEV, severity=severity, reason=reason,
                   source=source, code=code)


OK = reading(states.OK)
PROBE_OK = reading(states.OK, source='probe')
PROBE_BAD = reading(states.FATAL, 'still broken', source='probe')
APP = reading(states.APPLICATION, 'XID 13')
TRANSIENT = reading(states.TRANSIENT, 'XID 63')
FATAL = reading(states.FATAL, 'XID 79: fallen off the bus')
GONE = reading(states.GONE, 'driver unbound', source='pci')


def rec(health=states.HEALTHY, **values):
    return m.Record(health=health, **values)


def unhealthy_since(seconds=0):
    return m.apply_reading(rec(), FATAL, at(seconds), S)


# -- harmless readings ------------------------------------------------------

def test_ok_keeps_healthy_and_suspect_as_they_are():
    assert m.apply_reading(rec(), OK, T0, S) == rec()
    suspect = rec(states.SUSPECT, faults=1, due_at=at(300), reason='x')
    assert m.apply_reading(suspect, OK, at(10), S) == suspect


@pytest.mark.parametrize('health', states.HEALTH_STATES)
def test_application_reading_never_changes_anything(health):
    record = rec(health, due_at=at(5), faults=2, reason='r')
    assert m.apply_reading(record, APP, at(1), S) == record
    assert m.apply_reading(record, reading(states.APPLICATION,
                                           source='probe'), at(1),
                           S) == record


def test_first_good_reading_starts_the_hold_down_once():
    out = unhealthy_since(0)
    assert out.due_at is None
    held = m.apply_reading(out, OK, at(10), S)
    assert held.health == states.UNHEALTHY and held.due_at == at(70)
    # Later good readings do not push it further.
    assert m.apply_reading(held, OK, at(20), S) == held


def test_non_probe_good_reading_does_not_readmit_a_probing_device():
    probing = rec(states.PROBING, due_at=at(30), reason='x')
    assert m.apply_reading(probing, OK, at(1), S) == probing


def test_probe_verdict_ok_readmits_and_clears_everything():
    probing = rec(states.PROBING, due_at=at(30), reason='x', faults=3)
    back = m.apply_reading(probing, PROBE_OK, at(5), S)
    assert back == rec(states.HEALTHY, updated_at=at(5), flaps=1,
                       readmitted_at=at(5))


def test_probe_verdict_fault_sends_it_back_out():
    probing = rec(states.PROBING, due_at=at(30), reason='x')
    out = m.apply_reading(probing, PROBE_BAD, at(5), S)
    assert out.health == states.UNHEALTHY
    assert out.reason == 'still broken' and out.updated_at == at(5)
    # Its next re-probe is scheduled: no good reading needed.
    assert (out.failed_probes, out.due_at) == (1, at(65))


# -- transient faults -------------------------------------------------------

def test_transient_makes_healthy_suspect_then_unhealthy_at_threshold():
    one = m.apply_reading(rec(), TRANSIENT, at(0), S)
    assert (one.health, one.faults, one.due_at) == (states.SUSPECT, 1,
                                                    at(300))
    assert one.reason == 'XID 63' and one.updated_at == at(0)
    two = m.apply_reading(one, TRANSIENT, at(100), S)
    assert (two.health, two.faults, two.due_at) == (states.SUSPECT, 2,
                                                    at(400))
    assert two.updated_at == at(0)      # same state: not a change of it
    three = m.apply_reading(two, TRANSIENT, at(200), S)
    # Out: what it counts now is its failed re-probes (none yet).
    assert (three.health, three.faults, three.due_at) == (
        states.UNHEALTHY, 0, None)
    assert '3 transient faults' in three.reason


def test_the_reason_says_how_faults_were_counted():
    """Faults are counted while the record stays suspect, each within
    suspect_window of the one before: faults at 0, 290 and 580 s take
    it out, and the reason must not say all three fell within 300 s."""
    record = rec()
    for seconds in (0, 290, 580):
        record = m.step(record, [TRANSIENT], at(seconds), S)
    assert record.health == states.UNHEALTHY
    assert record.reason == (
        '3 transient faults within 300 s of the last fault or held '
        'condition before each; last: XID 63')


def test_a_window_that_ran_out_before_the_timers_ran_is_over():
    """The timers run between reports: a fault that comes after the
    suspect window ran out, before the timer made the record healthy,
    starts a new count, not the third of the old one."""
    two = m.apply_reading(m.apply_reading(rec(), TRANSIENT, at(0), S),
                          TRANSIENT, at(100), S)
    assert (two.health, two.faults, two.due_at) == (states.SUSPECT, 2,
                                                    at(400))
    again = m.apply_reading(two, TRANSIENT, at(401), S)
    assert (again.health, again.faults, again.due_at) == (
        states.SUSPECT, 1, at(701))
    # Suspect again from now: max_suspect_time counts from here.
    assert again.updated_at == at(401)
    # Within the window, the count goes on as before.
    assert m.apply_reading(two, TRANSIENT, at(399), S).health == \
        states.UNHEALTHY


def test_threshold_of_one_takes_a_healthy_device_out_at_once():
    out = m.apply_reading(rec(), TRANSIENT, T0,
                          dataclasses.replace(S, suspect_threshold=1))
    assert out.health == states.UNHEALTHY


def test_transient_while_unhealthy_restarts_the_hold_down():
    held = m.apply_reading(unhealthy_since(0), OK, at(10), S)
    assert held.due_at is not None
    again = m.apply_reading(held, TRANSIENT, at(20), S)
    assert again.health == states.UNHEALTHY and again.due_at is None
    assert m.apply_reading(again, OK, at(30), S).due_at == at(90)


def test_transient_while_probing_is_a_failed_re_probe():
    probing = rec(states.PROBING, due_at=at(30))
    out = m.apply_reading(probing, TRANSIENT, at(1), S)
    assert (out.health, out.failed_probes, out.due_at) == (
        states.UNHEALTHY, 1, at(61))


@pytest.mark.parametrize('health', [states.HEALTHY, states.SUSPECT])
def test_a_probe_s_not_yet_is_no_fault_of_what_was_not_probed(health):
    """A re-probe answers "not yet" (transient) for every deployable of
    a card being programmed, the healthy ones too: that answers a
    question nobody asked of them, and is no fault of theirs (a healthy
    one used to become suspect)."""
    before = rec(health, faults=1 if health == states.SUSPECT else 0,
                 due_at=at(300) if health == states.SUSPECT else None)
    not_yet = reading(states.TRANSIENT, 'being programmed (for 5 s)',
                      source='probe', code=PROBE_NOT_YET)
    assert m.apply_reading(before, not_yet, at(1), S) == before
    # A fault a probe finds is one, whoever asked: a transient one too
    # (the probe's check took the event; no later check sees it again).
    assert m.apply_reading(before, PROBE_BAD, at(1), S).health == \
        states.UNHEALTHY
    found = m.apply_reading(before, reading(
        states.TRANSIENT, 'AER non-fatal', source='probe',
        code='aer:nonfatal'), at(1), S)
    assert (found.health, found.faults) == (states.SUSPECT,
                                            before.faults + 1)


# -- fatal and gone ---------------------------------------------------------

@pytest.mark.parametrize('health', [states.HEALTHY, states.SUSPECT,
                                    states.PROBING, states.UNHEALTHY])
def test_fatal_takes_any_state_out(health):
    out = m.apply_reading(rec(health, due_at=at(9)), FATAL, at(1), S)
    assert out.health == states.UNHEALTHY
    assert out.reason == 'XID 79: fallen off the bus'
    # A failed re-probe schedules the next; otherwise a good reading
    # starts the hold-down.
    assert out.due_at == (at(61) if health == states.PROBING else None)


def test_gone_says_the_device_vanished():
    out = m.apply_reading(rec(), GONE, T0, S)
    assert out.health == states.UNHEALTHY
    assert out.reason == ('the device vanished or its driver was unbound: '
                          'driver unbound')


@pytest.mark.parametrize('health', [states.SUSPECT, states.PROBING,
                                    states.UNHEALTHY])
def test_gone_keeps_why_a_failing_device_was_out(health):
    # The card that failed and then dropped off the bus is remembered as
    # failing (``vanished``), not as one whose only fault was vanishing.
    out = m.apply_reading(rec(health, reason='XID 79', due_at=at(9)), GONE,
                          at(1), S)
    assert (out.health, out.reason, out.due_at) == (
        states.UNHEALTHY, 'XID 79; then the device vanished or its driver '
        'was unbound: driver unbound',
        at(61) if health == states.PROBING else None)
    assert not m.healthy_until_it_vanished(out)
    # Said again (the agent's full report restates it): said once (and
    # the re-probe a failed one scheduled waits for a good reading).
    again = m.apply_reading(out, GONE, at(2), S)
    assert again == dataclasses.replace(out, due_at=None)


def test_vanishing_alone_is_not_failing():
    # The health watcher saw the hardware go before the inventory report
    # said so: the device was healthy until then, and vanishes as healthy.
    gone = m.apply_reading(rec(), GONE, T0, S)
    assert m.healthy_until_it_vanished(gone)
    assert m.vanished(gone, at(1)).reason == m.LOST_REASON
    assert not m.remembered(m.vanished(gone, at(1)), at(2), S)
    failed = m.apply_reading(rec(), FATAL, T0, S)
    assert not m.healthy_until_it_vanished(failed)
    assert m.remembered(m.vanished(failed, at(1)), at(2), S)


def test_repeated_fatal_changes_nothing():
    out = unhealthy_since(0)
    assert m.apply_reading(out, FATAL, at(5), S) == out


# -- timers -------------------------------------------------------------------

def test_suspect_expires_to_healthy():
    suspect = m.apply_reading(rec(), TRANSIENT, T0, S)
    assert m.apply_timers(suspect, at(299), S) == suspect
    healthy = m.apply_timers(suspect, at(300), S)
    assert healthy == rec(states.HEALTHY, updated_at=at(300))


def test_end_of_hold_down_probes():
    held = m.apply_reading(unhealthy_since(0), OK, at(10), S)
    assert m.apply_timers(held, at(69), S) == held
    probing = m.apply_timers(held, at(70), S)
    assert probing.health == states.PROBING and probing.due_at == at(100)
    assert m.needs_probe(held, probing)
    assert not m.needs_probe(probing, probing)


def test_unhealthy_without_good_reading_is_never_probed():
    out = unhealthy_since(0)
    assert m.apply_timers(out, at(10 ** 6), S) == out


def test_probe_timeout_sends_it_back_out_and_schedules_the_next():
    probing = rec(states.PROBING, due_at=at(30))
    out = m.apply_timers(probing, at(30), S)
    assert out.health == states.UNHEALTHY
    assert out.reason == 'no re-probe verdict within 30 s'
    # No good reading needed (an agent with health watching off sends
    # none): re-probed again after the hold-down.
    assert (out.failed_probes, out.due_at) == (1, at(90))
    assert m.apply_timers(out, at(89), S) == out
    assert m.needs_probe(out, m.apply_timers(out, at(90), S))


def test_step_applies_readings_then_timers():
    suspect = m.apply_reading(rec(), TRANSIENT, T0, S)
    assert m.step(suspect, [OK], at(301), S).health == states.HEALTHY
    # A zero hold-down probes at the first good reading.
    zero = dataclasses.replace(S, hold_down=0)
    probing = m.step(unhealthy_since(0), [OK], at(5), zero)
    assert probing.health == states.PROBING


# -- flapping -----------------------------------------------------------------

def _outage(record, start, settings=S):
    """Fail at ``start``, read well, wait out the hold-down, pass the
    probe; returns (record, hold-down seconds it got)."""
    out = m.apply_reading(record, FATAL, at(start), settings)
    held = m.apply_reading(out, OK, at(start + 1), settings)
    hold = (held.due_at - at(start + 1)).total_seconds()
    probing = m.apply_timers(held, held.due_at, settings)
    assert probing.health == states.PROBING
    back = m.apply_reading(probing, PROBE_OK, probing.due_at, settings)
    assert back.health == states.HEALTHY
    return back, hold


def test_flapping_device_stays_out_longer_each_time_up_to_the_cap():
    record, holds, start = rec(), [], 0
    for _ in range(6):
        record, hold = _outage(record, start)
        holds.append(hold)
        start = (record.readmitted_at - T0).total_seconds() + 10
    assert holds == [60, 120, 240, 480, 600, 600]
    assert record.flaps == 6


def test_readmission_after_the_flap_window_counts_from_one_again():
    record, _ = _outage(rec(), 0)
    record, _ = _outage(record, 100)
    assert record.flaps == 2
    late = (record.readmitted_at - T0).total_seconds() + 3601
    record, hold = _outage(record, late)
    assert hold == 60 and record.flaps == 1


# -- failed re-probes ---------------------------------------------------------

TIMED_OUT = 'no verdict'
PROBE_NOT_YET_READING = reading(states.TRANSIENT, 'being programmed',
                                source='probe', code=PROBE_NOT_YET)


def _fail_probe(record, how, settings=S):
    """``record`` (unhealthy, its re-probe due) re-probed at its due time
    and failing it ``how`` (a reading, or ``TIMED_OUT``); returns (the
    record, its next re-probe in seconds from the failure)."""
    probing = m.apply_timers(record, record.due_at, settings)
    assert probing.health == states.PROBING
    if how == TIMED_OUT:
        failed_at = probing.due_at
        out = m.apply_timers(probing, failed_at, settings)
    else:
        failed_at = probing.updated_at + datetime.timedelta(seconds=1)
        out = m.apply_reading(probing, how, failed_at, settings)
    assert out.health == states.UNHEALTHY
    return out, (out.due_at - failed_at).total_seconds()


@pytest.mark.parametrize('how', [TIMED_OUT, PROBE_BAD, FATAL, TRANSIENT,
                                 GONE, PROBE_NOT_YET_READING])
def test_failed_re_probes_are_re_probed_less_often_up_to_the_cap(how):
    """Broken for good: each failed re-probe schedules the next by
    itself, after the hold-down, doubled for each further one failed in
    a row (60, 120, 240, ... at most max_hold_down): few moves between
    unhealthy and probing, hence few log lines and notifications."""
    record = m.apply_reading(unhealthy_since(0), OK, at(1), S)
    waits = []
    for _ in range(7):
        record, wait = _fail_probe(record, how)
        waits.append(wait)
    assert waits == [60, 120, 240, 480, 600, 600, 600]
    assert record.failed_probes == 7 and record.flaps == 0


def test_a_device_out_for_a_passing_outage_comes_back_soon():
    """The agent restarted, or the broker blipped, as the re-probe was
    asked: no verdict.  Nothing else is sent (health watching off), yet
    it is re-probed after one hold-down, and re-admitted as usual."""
    record = m.apply_reading(unhealthy_since(0), OK, at(1), S)
    record, wait = _fail_probe(record, TIMED_OUT)
    assert wait == 60
    record, wait = _fail_probe(record, TIMED_OUT)
    assert wait == 120
    probing = m.step(record, [], record.due_at, S)
    back = m.step(probing, [PROBE_OK], record.due_at, S)
    assert (back.health, back.faults, back.flaps, back.due_at) == (
        states.HEALTHY, 0, 1, None)
    # Next time it is out, its count starts again: its one flap doubles
    # the wait, its past failed re-probes do not.
    out = m.apply_reading(back, FATAL, at(1000), S)
    assert out.failed_probes == 0
    assert _fail_probe(m.apply_reading(out, OK, at(1001), S),
                       PROBE_BAD)[1] == 120


def test_flaps_and_failed_re_probes_both_lengthen_the_wait():
    # Re-admitted twice within the flap window: 4 hold-downs; each
    # failed re-probe after the first doubles that.
    record = rec(states.UNHEALTHY, reason='x', flaps=2,
                 readmitted_at=at(0), due_at=at(10))
    waits = []
    for _ in range(3):
        record, wait = _fail_probe(record, PROBE_BAD,
                                   dataclasses.replace(S,
                                                       max_hold_down=9999))
        waits.append(wait)
    assert waits == [240, 480, 960]


def test_a_fault_reading_after_a_failed_re_probe_waits_for_a_good_one():
    """Where the agent watches health, a fault it reads while the device
    is out stops the hold-down until it reads well, as before; the
    hold-down that reading starts counts the failed re-probes too."""
    record = m.apply_reading(unhealthy_since(0), OK, at(1), S)
    for _ in range(3):
        record, _wait = _fail_probe(record, PROBE_BAD)
    failed_at = record.updated_at
    for fault in (TRANSIENT, FATAL):
        bad = m.apply_reading(record, fault, failed_at, S)
        assert (bad.health, bad.due_at, bad.failed_probes) == (
            states.UNHEALTHY, None, 3)
        assert m.apply_timers(bad, at(10 ** 6), S) == bad
        good = m.apply_reading(bad, OK, at(10 ** 6), S)
        assert good.due_at == at(10 ** 6 + 240)


def test_a_good_reading_does_not_bring_the_next_re_probe_nearer():
    record = m.apply_reading(unhealthy_since(0), OK, at(1), S)
    record, _wait = _fail_probe(record, PROBE_BAD)
    record, _wait = _fail_probe(record, PROBE_BAD)
    assert m.apply_reading(record, OK, record.updated_at, S) == record


def test_a_late_probe_verdict_keeps_the_next_re_probe():
    """A probe's verdict that comes after its timeout (or a partition's
    fault sent beside its device's verdict) tells why it is out, but is
    no reading of a host that watches health: no good reading may ever
    follow, so the re-probe scheduled stays."""
    record = m.apply_reading(unhealthy_since(0), OK, at(1), S)
    record, _wait = _fail_probe(record, TIMED_OUT)
    late = m.apply_reading(record, PROBE_BAD, record.updated_at, S)
    assert (late.health, late.reason, late.due_at, late.failed_probes) == (
        states.UNHEALTHY, 'still broken', record.due_at, 1)
    assert m.apply_reading(record, PROBE_NOT_YET_READING, record.updated_at,
                           S) == record
    # A probe's fault on a record whose hold-down waits for a good
    # reading does not start it either.
    stopped = unhealthy_since(0)
    assert m.apply_reading(stopped, PROBE_BAD, at(1), S).due_at is None


def test_why_a_record_is_out_is_read_back_from_its_code():
    """The facts read back from a record are read from its code, not
    from its reason (text for people, which may say anything)."""
    timed_out = m.apply_timers(
        rec(states.PROBING, due_at=at(30), code=m.FAULT_CODE), at(30), S)
    assert timed_out.reason == m.no_verdict_reason(S)
    assert timed_out.code == m.NO_VERDICT_CODE
    assert m.out_for_no_verdict(timed_out)
    # The same reason, another code: the code decides.
    assert not m.out_for_no_verdict(dataclasses.replace(
        timed_out, code=m.PROBE_FAILED_CODE))
    assert m.out_for_no_verdict(dataclasses.replace(
        timed_out, reason='still broken'))
    gone = m.apply_reading(rec(), GONE, at(1), S)
    assert gone.code == m.GONE_CODE and m.healthy_until_it_vanished(gone)
    assert not m.healthy_until_it_vanished(dataclasses.replace(
        gone, code=m.FAULT_CODE))
    assert m.vanished(rec(), at(1), worst=gone).code == m.LOST_CODE
    assert m.vanished(rec(), at(1), worst=gone,
                      status='maintaining').code == m.LOST_IN_STATUS_CODE
    failing = m.vanished(rec(), at(1), worst=unhealthy_since(0))
    assert failing.code == m.LOST_UNHEALTHY_CODE
    assert m.remembered(failing, at(2), S)
    assert not m.remembered(dataclasses.replace(
        failing, code=m.LOST_CODE), at(2), S)


# A previous release's records: no code; their reasons as it wrote them.
LEGACY = [
    (rec(states.UNHEALTHY, reason=f'{m.GONE_REASON}: driver unbound'),
     m.GONE_CODE),
    (rec(states.UNHEALTHY, reason=f'{m.NO_VERDICT} 30 s'),
     m.CONDUCTOR_NO_VERDICT_CODE),
    (rec(states.PROBING, reason=m.CAME_BACK_REASON), m.CAME_BACK_CODE),
    (rec(states.LOST, reason=m.LOST_REASON), m.LOST_CODE),
    (rec(states.LOST, reason=f'{m.VANISHED_UNHEALTHY} (unhealthy: x)'),
     m.LOST_UNHEALTHY_CODE),
    (rec(states.LOST, reason=f'{m.VANISHED_IN_STATUS} maintaining'),
     m.LOST_IN_STATUS_CODE),
    # A reason that says nothing read back, or one in a health it is not
    # written in.
    (rec(states.UNHEALTHY, reason='XID 79'), None),
    (rec(states.UNHEALTHY, reason=None), None),
    (rec(states.UNHEALTHY, reason=f'x; then {m.GONE_REASON}'), None),
    (rec(states.LOST, reason=m.CAME_BACK_REASON), None),
    (rec(states.SUSPECT, reason=m.GONE_REASON), None),
    (rec(), None),
]


@pytest.mark.parametrize('record,code', LEGACY)
def test_a_record_without_a_code_is_read_by_its_reason(record, code):
    """A conductor of the previous release (a rolling upgrade) writes no
    code: its records are read by how their reasons begin, as that
    release read them."""
    assert m.code_of(record) == code
    # A code that is not one of its health's was left there by a
    # conductor of the previous release that moved the record since:
    # read by its reason the same way.
    for stale in (m.FAULT_CODE, m.LOST_CODE, m.SUSPECT_CODE):
        if stale not in m.CODES[record.health]:
            assert m.code_of(dataclasses.replace(record,
                                                 code=stale)) == code


def test_facts_are_read_from_a_previous_release_s_records():
    gone = rec(states.UNHEALTHY, reason=f'{m.GONE_REASON}: driver unbound')
    assert m.healthy_until_it_vanished(gone)
    # Moved since by the previous release (no longer out for that alone),
    # the code this release wrote before left there.
    assert not m.healthy_until_it_vanished(
        rec(states.UNHEALTHY, reason='XID 79', code=m.SUSPECT_CODE))
    assert m.healthy_until_it_vanished(
        dataclasses.replace(gone, code=m.LOST_CODE))
    failing = rec(states.LOST, reason=f'{m.VANISHED_UNHEALTHY} (x)',
                  updated_at=at(0))
    assert m.remembered(failing, at(1), S)
    assert m.remembered(dataclasses.replace(failing, code=m.FAULT_CODE),
                        at(1), S)
    assert not m.remembered(rec(states.LOST, reason=m.LOST_REASON,
                                updated_at=at(0)), at(1), S)
    # Its re-probe timed out: a late good verdict re-admits it.
    timed_out = rec(states.UNHEALTHY, reason=f'{m.NO_VERDICT} 30 s',
                    faults=1, due_at=at(60), updated_at=at(30))
    assert m.out_for_no_verdict(timed_out)
    assert m.apply_reading(timed_out, PROBE_OK, at(31),
                           S).health == states.HEALTHY
    # Who took it out is not said: re-probed as the previous release
    # did, a probe_timeout after a failed re-probe with a zero hold-down.
    zero = dataclasses.replace(S, hold_down=0)
    for record in (timed_out, rec(states.UNHEALTHY, reason='XID 79')):
        assert m.taken_out_by_conductor(record)
        probing = m.vouched(record, at(100), zero)
        failed = m.apply_reading(probing, PROBE_BAD, at(101), zero)
        assert failed.code == m.CONDUCTOR_PROBE_FAILED_CODE
        assert failed.due_at == at(131)


def test_the_late_good_verdict_of_a_timed_out_re_probe_re_admits():
    """An agent away for a while (stopped, its host rebooting, the broker
    cut) answers the re-probes waiting in its queue when it is back, each
    after its timeout, which doubled the next wait: their good verdicts
    re-admit the device then, rather than leave it out for as long as the
    outage built up.  Not after a fault reading meanwhile, nor after a
    re-probe that failed with a verdict of its own."""
    record = m.apply_reading(unhealthy_since(0), OK, at(1), S)
    for _ in range(5):
        record, _wait = _fail_probe(record, TIMED_OUT)
    assert (record.due_at - record.updated_at).total_seconds() == 600
    back = m.apply_reading(record, PROBE_OK, record.updated_at, S)
    assert (back.health, back.failed_probes, back.due_at, back.flaps) == (
        states.HEALTHY, 0, None, 1)
    # A fault read meanwhile stops the re-probe: a verdict of before it
    # re-admits nothing (a good reading, it starts the hold-down again).
    for fault in (TRANSIENT, FATAL):
        bad = m.apply_reading(record, fault, record.updated_at, S)
        assert m.apply_reading(bad, PROBE_OK, record.updated_at, S) == \
            m.apply_reading(bad, OK, record.updated_at, S)
        assert m.apply_reading(bad, PROBE_OK, record.updated_at,
                               S).health == states.UNHEALTHY
    # A re-probe whose verdict was a fault: a good one later is no late
    # verdict of it; the next re-probe decides.
    refused, _wait = _fail_probe(record, PROBE_BAD)
    assert m.apply_reading(refused, PROBE_OK, refused.updated_at,
                           S) == refused
    # Out for a fault, the hold-down not run yet: a probe's good word
    # does not cut it short.
    held = m.apply_reading(unhealthy_since(0), OK, at(1), S)
    assert m.apply_reading(held, PROBE_OK, at(2), S) == held


ZEROS = [dataclasses.replace(S, hold_down=0),
         dataclasses.replace(S, max_hold_down=0)]


def _failures(probing, settings):
    """``probing`` failing its re-probe at at(30) in each way."""
    return (m.apply_timers(probing, at(30), settings),
            m.apply_reading(probing, PROBE_BAD, at(30), settings),
            m.apply_reading(probing, PROBE_NOT_YET_READING, at(30),
                            settings),
            m.apply_reading(probing, TRANSIENT, at(30), settings),
            m.apply_reading(probing, m.device_verdict(PROBE_BAD), at(30),
                            settings))


@pytest.mark.parametrize('settings', ZEROS)
@pytest.mark.parametrize('code', [m.PROGRAM_UNFINISHED, m.CAME_BACK_CODE,
                                  m.CONDUCTOR_PROBE_FAILED_CODE,
                                  m.CONDUCTOR_NO_VERDICT_CODE])
def test_zero_hold_down_what_the_conductor_took_out_waits_probe_timeout(
        settings, code):
    """No good reading need come for a record the conductor took out
    itself (an agent with health watching off sends none): the next
    re-probe is scheduled, however the last one failed; not at once,
    which would re-probe at every tick."""
    probing = rec(states.PROBING, due_at=at(30), reason='x', code=code)
    for failed in _failures(probing, settings) + (
            m.apply_reading(probing, UNFINISHED, at(30), settings),):
        assert (failed.health, failed.due_at, failed.failed_probes) == (
            states.UNHEALTHY, at(60), 1)
        assert m.taken_out_by_conductor(failed)
        assert m.apply_timers(failed, at(59), settings) == failed
        again = m.apply_timers(failed, at(60), settings)
        assert m.needs_probe(failed, again)
        # ...and after each one failed in a row, no longer.
        out = m.apply_timers(again, again.due_at, settings)
        assert (out.failed_probes, out.due_at) == (2, at(120))
        assert out.code == m.CONDUCTOR_NO_VERDICT_CODE
    # A good reading meanwhile brings it no nearer; a fault the agent
    # reads stops it until a good one, which re-probes at once.
    assert m.apply_reading(failed, OK, at(31), settings) == failed
    bad = m.apply_reading(failed, FATAL, at(31), settings)
    assert bad.due_at is None and bad.code == m.FAULT_CODE
    assert m.step(bad, [OK], at(32), settings).health == states.PROBING


@pytest.mark.parametrize('settings', ZEROS)
@pytest.mark.parametrize('take_out', [FATAL, GONE, PROBE_BAD, TRANSIENT])
def test_zero_hold_down_what_a_reading_took_out_waits_a_good_reading(
        settings, take_out):
    """Taken out by an agent's reading (its agent watches health): after
    a failed re-probe, as after the reading that took it out, the next
    good reading re-probes it, at once; no timer does meanwhile."""
    out = m.step(rec(), [take_out] * S.suspect_threshold, at(0), settings)
    assert out.health == states.UNHEALTHY and out.due_at is None
    assert not m.taken_out_by_conductor(out)
    probing = m.step(out, [OK], at(1), settings)
    assert m.needs_probe(out, probing)
    probing = dataclasses.replace(probing, due_at=at(30))
    for failed in _failures(probing, settings):
        assert (failed.health, failed.due_at, failed.failed_probes) == (
            states.UNHEALTHY, None, 1)
        assert not m.taken_out_by_conductor(failed)
        assert m.apply_timers(failed, at(10 ** 6), settings) == failed
        again = m.step(failed, [OK], at(31), settings)
        assert m.needs_probe(failed, again)
        # ...each time it fails.
        out = m.apply_timers(again, at(31 + S.probe_timeout), settings)
        assert (out.failed_probes, out.due_at) == (2, None)
        assert out.code == m.NO_VERDICT_CODE
        assert m.needs_probe(out, m.step(out, [OK], at(100), settings))


def test_a_zero_hold_down_re_probes_what_came_back_on_a_host_not_watching():
    # Lost hardware that came back (the conductor's own take-out, too):
    # re-probed at once, and again after a failed re-probe.
    zero = dataclasses.replace(S, hold_down=0)
    back = m.came_back(m.lost(rec(), at(0)), at(10), zero)
    probing = m.step(back, [], at(10), zero)
    assert m.needs_probe(back, probing)
    out = m.step(probing, [PROBE_BAD], at(11), zero)
    assert (out.health, out.due_at) == (states.UNHEALTHY, at(41))
    assert m.needs_probe(out, m.step(out, [], at(41), zero))


@pytest.mark.parametrize('take_out', [
    lambda r: m.apply_reading(r, FATAL, at(1), S),
    lambda r: m.apply_reading(r, GONE, at(1), S),
    lambda r: m.step(r, [TRANSIENT] * S.suspect_threshold, at(1), S),
    lambda r: m.came_back(m.lost(r, at(1)), at(2), S),
])
def test_a_record_taken_out_has_failed_no_re_probe_yet(take_out):
    # Whatever it counted while suspect is not taken for failed probes.
    suspect = m.apply_reading(rec(), TRANSIENT, at(0), S)
    suspect = m.apply_reading(suspect, TRANSIENT, at(0), S)
    assert suspect.faults == 2 and suspect.failed_probes == 0
    out = take_out(suspect)
    assert out.health == states.UNHEALTHY and out.failed_probes == 0
    held = out if out.due_at else m.apply_reading(out, OK, at(3), S)
    assert _fail_probe(held, TIMED_OUT)[1] == 60


# -- lost -------------------------------------------------------------------

def test_lost_ignores_readings_and_timers_until_it_comes_back():
    lost = m.lost(rec(states.SUSPECT, faults=1, due_at=at(5)), at(1))
    assert lost == rec(states.LOST, reason=m.LOST_REASON,
                       code=m.LOST_CODE, updated_at=at(1))
    for r in (OK, PROBE_OK, TRANSIENT, FATAL, GONE):
        assert m.apply_reading(lost, r, at(2), S) == lost
    assert m.apply_timers(lost, at(10 ** 6), S) == lost
    back = m.came_back(lost, at(3), S)
    assert back.health == states.UNHEALTHY and back.due_at == at(63)
    assert back.reason == m.CAME_BACK_REASON
    # ...and follows the hold-down and probe like any failed device.
    assert m.apply_timers(back, at(62), S) == back
    probing = m.apply_timers(back, at(63), S)
    assert probing.health == states.PROBING
    assert m.apply_reading(probing, PROBE_OK, at(64), S).health == \
        states.HEALTHY
    assert m.came_back(rec(), at(3), S) == rec()


def test_came_back_starts_the_hold_down_without_a_good_reading():
    # An agent with health watching off sends no reading: the hold-down
    # runs from the return alone, and the re-probe at its end decides.
    back = m.came_back(m.lost(rec(), at(0)), at(10), S)
    assert m.step(back, [], at(69), S) == back
    assert m.needs_probe(back, m.step(back, [], at(70), S))


def test_readings_during_a_came_back_hold_down():
    back = m.came_back(m.lost(rec(), at(0)), at(10), S)
    # A good reading (an agent watching health) neither shortens it nor
    # starts a second one.
    assert m.apply_reading(back, OK, at(20), S) == back
    assert m.apply_reading(back, OK, at(69), S) == back
    # A fault keeps it out; its hold-down starts at the next good reading.
    for fault in (TRANSIENT, FATAL):
        bad = m.apply_reading(back, fault, at(20), S)
        assert bad.health == states.UNHEALTHY and bad.due_at is None
        assert m.apply_timers(bad, at(10 ** 6), S) == bad
        again = m.apply_reading(bad, OK, at(30), S)
        assert again.health == states.UNHEALTHY and again.due_at == at(90)


def test_a_flapping_device_that_came_back_is_held_longer():
    # Lost soon after a re-admission: its flaps double the hold-down.
    readmitted = rec(flaps=2, readmitted_at=at(0))
    back = m.came_back(m.lost(readmitted, at(10)), at(20), S)
    assert back.due_at == at(20 + 240)


UNFINISHED = Reading(device=DEV, deployable='fpga0', severity=states.FATAL,
                     reason='programming did not end', source='program',
                     code='program:unfinished')


@pytest.mark.parametrize('before', [
    rec(), rec(states.SUSPECT, faults=2, due_at=at(300), reason='x')])
def test_an_unfinished_programming_is_re_probed_without_a_good_reading(
        before):
    """The conductor's own reading (an FPGA programming whose outcome is
    unknown) starts the hold-down at once, as a return from lost does: an
    agent with health watching off sends no good reading, yet answers the
    re-probe at its end."""
    out = m.apply_reading(before, UNFINISHED, at(10), S)
    assert (out.health, out.reason, out.due_at, out.failed_probes) == (
        states.UNHEALTHY, 'programming did not end', at(70), 0)
    assert m.step(out, [], at(69), S) == out
    probing = m.step(out, [], at(70), S)
    assert m.needs_probe(out, probing)
    # The agent's "not yet" (still being programmed): re-probed again
    # after the next hold-down, still without any reading.
    again = m.apply_reading(probing, PROBE_NOT_YET_READING, at(71), S)
    assert (again.health, again.due_at) == (states.UNHEALTHY, at(131))
    # A good verdict then re-admits it.
    back = m.apply_reading(m.step(again, [], at(131), S), PROBE_OK, at(132),
                           S)
    assert back.health == states.HEALTHY


def test_readings_during_an_unfinished_programming_s_hold_down():
    out = m.apply_reading(rec(), UNFINISHED, at(10), S)
    # A good reading (an agent watching health) neither shortens it nor
    # starts a second one; nor does the conductor's reading again.
    assert m.apply_reading(out, OK, at(20), S) == out
    assert m.apply_reading(out, UNFINISHED, at(30), S) == out
    # A fault the agent reads meanwhile stops it, as any: the card is
    # still failing where health is watched.
    for fault in (TRANSIENT, FATAL):
        bad = m.apply_reading(out, fault, at(20), S)
        assert bad.health == states.UNHEALTHY and bad.due_at is None
        assert m.apply_timers(bad, at(10 ** 6), S) == bad
        assert m.apply_reading(bad, OK, at(30), S).due_at == at(90)
    # Out already, its hold-down stopped by a fault: the conductor's
    # reading starts it (no reading may follow it).
    stopped = unhealthy_since(0)
    restarted = m.apply_reading(stopped, UNFINISHED, at(5), S)
    assert (restarted.reason, restarted.due_at) == (
        'programming did not end', at(65))
    # Probing: the re-probe fails, and the next one is scheduled.
    probing = rec(states.PROBING, due_at=at(30), reason='x')
    failed = m.apply_reading(probing, UNFINISHED, at(1), S)
    assert (failed.health, failed.failed_probes, failed.due_at) == (
        states.UNHEALTHY, 1, at(61))


# -- a device's verdict, for its deployables ----------------------------------

def test_a_device_s_fault_verdict_fails_the_re_probe_of_its_deployable():
    """A deployable probed with its device gets the device's fault
    verdict (when it has none of its own): its re-probe fails at once,
    as the device's does, rather than wait for its probe timeout."""
    probing = rec(states.PROBING, due_at=at(30), reason='x')
    for verdict, why in ((PROBE_BAD, 'still broken'),
                         (reading(states.TRANSIENT, source='probe'),
                          'transient fault (probe)')):
        out = m.apply_reading(probing, m.device_verdict(verdict), at(1), S)
        assert (out.health, out.reason, out.failed_probes, out.due_at) == (
            states.UNHEALTHY, f"its device's re-probe verdict: {why}", 1,
            at(61))
        # As the device's own record after the same verdict.
        device = m.apply_reading(probing, verdict, at(1), S)
        assert (device.health, device.due_at) == (out.health, out.due_at)


@pytest.mark.parametrize('before', [
    rec(), rec(states.SUSPECT, faults=1, due_at=at(300), reason='x'),
    rec(states.UNHEALTHY, due_at=at(60), faults=1, reason='y'),
    rec(states.UNHEALTHY, reason='y'),
    rec(states.LOST, reason=m.LOST_REASON)])
def test_a_device_s_fault_verdict_is_no_fault_of_a_deployable_not_probed(
        before):
    # The device's fault takes every partition out by itself (effective
    # health); the partition's own record is not the device's.
    for verdict in (PROBE_BAD, reading(states.TRANSIENT, source='probe'),
                    reading(states.GONE, source='probe')):
        assert m.apply_reading(before, m.device_verdict(verdict), at(1),
                               S) == before


def test_hardware_that_vanished_in_an_operators_status_is_remembered():
    # Healthy, nothing allocated, but in a status an operator gave it:
    # kept for max_hold_down, so that it comes back in that status.
    kept = m.vanished(rec(), at(1), status=states.MAINTAINING)
    assert (kept.health, kept.reason, kept.updated_at) == (
        states.LOST, 'the hardware vanished while its device was '
        'maintaining', at(1))
    assert m.remembered(kept, at(1 + S.max_hold_down - 1), S)
    assert not m.remembered(kept, at(1 + S.max_hold_down), S)
    # Out only because it was seen going: as healthy, kept for its status.
    gone = m.apply_reading(rec(), GONE, T0, S)
    assert m.vanished(gone, at(1), status=states.ENABLED).reason == (
        'the hardware vanished while its device was enabled')
    # Failing, it is remembered for that, status or not.
    failed = m.apply_reading(rec(), FATAL, T0, S)
    assert m.vanished(failed, at(1), status=states.MAINTAINING).reason == (
        'the hardware vanished while not healthy (unhealthy: XID 79: '
        'fallen off the bus)')
    # No status to keep: only allocations keep it.
    assert m.vanished(rec(), at(1), status=None).reason == m.LOST_REASON


# -- effective health and the schedule ---------------------------------------

def test_effective_health_is_the_worse_of_own_and_device():
    assert m.effective(states.HEALTHY, states.UNHEALTHY) == states.UNHEALTHY
    assert m.effective(states.LOST, states.SUSPECT) == states.LOST
    assert m.effective(states.SUSPECT, states.HEALTHY) == states.SUSPECT


def test_columns_since_names_only_what_changed():
    old = rec()
    new = m.apply_reading(old, TRANSIENT, T0, S)
    assert new.columns(since=old) == {
        'health': states.SUSPECT, 'health_reason': 'XID 63',
        'health_code': m.SUSPECT_CODE, 'health_updated_at': T0,
        'health_faults': 1, 'health_due_at': at(300)}
    assert m.Record.from_row(dict(new.columns(), uuid='x')) == new


def test_settings_come_from_the_health_options(conf):
    conf.set_override('hold_down', 7, group='health')
    assert m.Settings.from_conf(conf).hold_down == 7


def test_a_restated_transient_condition_is_not_counted_again():
    """A full snapshot re-states a pending condition (e.g. a row remap
    waiting for a reset) at every period: it must not add up to the
    suspect threshold on its own, while new events still do."""
    record = m.apply_reading(rec(), TRANSIENT, at(0), S)
    assert record.health == states.SUSPECT
    restated = dataclasses.replace(TRANSIENT, restated=True)
    for second in range(1, 2 * S.suspect_threshold):
        record = m.apply_reading(record, restated, at(second), S)
    assert (record.health, record.faults) == (states.SUSPECT, 1)
    for second in range(10, 10 + S.suspect_threshold - 1):
        record = m.apply_reading(record, TRANSIENT, at(second), S)
    assert record.health == states.UNHEALTHY


def test_a_condition_that_lasts_keeps_the_device_suspect_throughout():
    """Re-stated every full report, a condition that holds (a GPU in
    hardware slowdown) keeps the device suspect: it does not pass for
    healthy at the end of the window while it still holds, and is
    healthy again a window after the last time it was seen."""
    record = m.apply_reading(rec(), TRANSIENT, at(0), S)
    restated = dataclasses.replace(TRANSIENT, restated=True)
    for second in range(30, 601, 30):
        record = m.step(record, [restated], at(second), S)
        assert (record.health, record.faults, record.updated_at) == (
            states.SUSPECT, 1, at(0)), second
    assert m.apply_timers(record, at(899), S).health == states.SUSPECT
    assert m.apply_timers(record, at(900), S).health == states.HEALTHY


def test_a_device_suspect_for_too_long_is_taken_out():
    record = m.apply_reading(rec(), TRANSIENT, at(0), S)
    restated = dataclasses.replace(TRANSIENT, restated=True,
                                   reason='Hardware slowdown')
    # Re-stated by each full snapshot, within the suspect window.
    for second in (250, 500, 750, 899):
        record = m.step(record, [restated], at(second), S)
        assert record.health == states.SUSPECT
    out = m.step(record, [restated], at(900), S)
    assert (out.health, out.updated_at, out.due_at, out.faults) == (
        states.UNHEALTHY, at(900), None, 0)
    assert out.reason == ('suspect for 900 s, longer than max_suspect_time '
                          '(900 s); last: Hardware slowdown')
    # Out while the condition lasts; back as any failed device once well.
    assert m.step(out, [restated], at(930), S).due_at is None
    held = m.step(out, [OK], at(960), S)
    assert held.due_at == at(1020)
    probing = m.step(held, [], at(1020), S)
    assert m.step(probing, [PROBE_OK], at(1021), S).health == states.HEALTHY


def test_faults_that_keep_coming_below_the_threshold_take_it_out_too():
    settings = dataclasses.replace(S, suspect_threshold=100,
                                   max_suspect_time=600)
    record = rec()
    for second in range(0, 600, 120):
        record = m.step(record, [TRANSIENT], at(second), settings)
        assert record.health == states.SUSPECT
    record = m.step(record, [TRANSIENT], at(600), settings)
    assert record.health == states.UNHEALTHY
    assert record.reason.startswith('suspect for 600 s')


def test_only_a_reading_takes_a_long_suspect_device_out():
    """Time alone is no fault: a device suspect for a long window after
    one fault is healthy again at its end if nothing else was seen."""
    settings = dataclasses.replace(S, suspect_window=3600,
                                   max_suspect_time=600)
    record = m.apply_reading(rec(), TRANSIENT, at(0), settings)
    assert m.apply_timers(record, at(1200), settings) == record
    assert m.step(record, [OK], at(1200), settings) == record
    assert m.apply_timers(record, at(3600), settings).health == \
        states.HEALTHY


def test_max_suspect_time_zero_keeps_a_lasting_condition_suspect():
    settings = dataclasses.replace(S, max_suspect_time=0)
    record = m.apply_reading(rec(), TRANSIENT, at(0), settings)
    restated = dataclasses.replace(TRANSIENT, restated=True)
    for second in range(30, 86400, 3600):
        record = m.step(record, [restated], at(second), settings)
    assert (record.health, record.faults) == (states.SUSPECT, 1)


def test_an_admin_vouching_re_probes_an_unhealthy_record_now():
    flapping = dataclasses.replace(unhealthy_since(0), flaps=5, faults=4,
                                   due_at=at(600), readmitted_at=at(-60))
    probing = m.vouched(flapping, at(10), S)
    assert (probing.health, probing.reason, probing.flaps,
            probing.failed_probes, probing.due_at, probing.updated_at) == (
        states.PROBING, flapping.reason, 0, 0, at(40), at(10))
    # Its failed re-probes forgotten too: failing this one, it is
    # re-probed after the shortest wait.
    assert m.step(probing, [PROBE_BAD], at(11), S).due_at == at(71)
    # Its verdict decides, as after any hold-down.
    assert m.step(probing, [PROBE_OK], at(11), S).health == states.HEALTHY
    assert m.step(probing, [PROBE_BAD], at(11), S).health == states.UNHEALTHY


@pytest.mark.parametrize('health', [states.HEALTHY, states.SUSPECT,
                                    states.PROBING, states.LOST])
def test_vouching_leaves_any_other_health_alone(health):
    record = rec(health, reason='r', due_at=at(5))
    assert m.vouched(record, at(10), S) is record


# -- transient faults a previous release's conductor left ------------------
# While conductors of both releases run (a rolling upgrade), one of the
# previous release (2027.1) takes a record out for suspect_threshold
# transient faults (or a fatal one while suspect) and leaves their count
# in ``faults`` for as long as it is out; it writes no code, and leaves
# the one this release wrote before.

def _previous_release_out(faults, reason, code=None):
    """An unhealthy record as the previous release left it."""
    return rec(states.UNHEALTHY, reason=reason, code=code, faults=faults,
               updated_at=at(0))


PREVIOUS_OUT = [
    # Out for transient faults (its reason, as that release wrote it).
    _previous_release_out(3, '3 transient faults within 300 s; last: x'),
    _previous_release_out(6, '6 transient faults within 300 s; last: x'),
    # Out for a fatal fault while suspect: the suspect count kept.
    _previous_release_out(2, 'XID 79'),
    # This release's code, of the health it wrote it in, left there.
    _previous_release_out(3, 'XID 79', code=m.SUSPECT_CODE),
    # ... or one that fits still (this release took it out, the previous
    # one re-admitted it, then took it out again for transient faults).
    _previous_release_out(3, '3 transient faults within 300 s; last: x',
                          code=m.FAULT_CODE),
]


@pytest.mark.parametrize('record', PREVIOUS_OUT)
def test_transient_faults_a_previous_release_left_are_no_failed_probes(
        record):
    """Read as re-probes failed in a row, the count doubled the first
    hold-down threshold-1 times (240 s instead of 60 at threshold 3, the
    cap at 6), and each re-probe failed after it again."""
    assert record.failed_probes == 0
    held = m.apply_reading(record, OK, at(1), S)
    assert held.due_at == at(61)
    probing = m.apply_timers(held, held.due_at, S)
    assert probing.health == states.PROBING
    assert probing.failed_probes == 0
    record, wait = _fail_probe(held, PROBE_BAD)
    assert (record.failed_probes, wait) == (1, 60)
    record, wait = _fail_probe(record, TIMED_OUT)
    assert (record.failed_probes, wait) == (2, 120)


def test_this_release_s_count_of_failed_probes_stands():
    """Its own count, whatever the code since (a fault reading after a
    failed re-probe), and its own transient-faults reason, are read as
    they are."""
    record = m.apply_reading(unhealthy_since(0), OK, at(1), S)
    for _ in range(2):
        record, _wait = _fail_probe(record, PROBE_BAD)
    record = m.apply_reading(record, FATAL, at(500), S)
    assert (record.code, record.failed_probes) == (m.FAULT_CODE, 2)
    out = rec()
    for second in range(3):
        out = m.apply_reading(out, TRANSIENT, at(second), S)
    assert out.code == m.TRANSIENT_FAULTS_CODE
    assert not m.PREVIOUS_TRANSIENT_FAULTS.match(out.reason)
    out = m.apply_reading(m.vouched(out, at(10), S), PROBE_BAD, at(11), S)
    assert out.failed_probes == 1
