"""A clock every cyborg host shares: the database server's.

The API tells the conductor until when it waits for each call
(``RequestContext.answer_by``), and the conductor drops a call it comes to
later.  Hosts' clocks differ, so both tell that time by the database
server's clock, which every API and conductor host reaches: a
``ReferenceClock`` is this host's clock less its skew, measured at first
use, again every ``REMEASURE_INTERVAL`` seconds, and as soon as the host's
clock is seen to step (NTP setting it) by more than ``STEP_TOLERANCE``
against the monotonic clock.  A host whose clock is off, even by more than
the API's wait, then neither drops the calls it should apply nor applies
those it should drop.

The measurement itself is the caller's (``cyborg.objects.clock``: one
statement to the database); this module knows no database.
"""

import datetime
import threading
import time

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

# How often a process measures its clock against the reference again
# (the host's clock drifts, or is slewed, slowly).  After a measurement
# that failed (the database away), sooner.
REMEASURE_INTERVAL = 600.0
REMEASURE_AFTER_FAILURE = 30.0
# Seconds the host's clock may move against the monotonic clock before
# that is taken for a step (NTP setting it) and measured again at once;
# a slew moves it at most 0.5 ms a second, 0.3 s in REMEASURE_INTERVAL.
STEP_TOLERANCE = 1.0

# This host's clock, seconds since the epoch (tests move it).
host_clock = time.time


class ReferenceClock:
    """The reference's time: this host's clock less its last measured
    ``skew`` (0 until measured, and where ``measure`` finds no clock to
    compare with).  ``measure(context, passing)`` returns how many
    seconds this host's clock is ahead of the reference, or None;
    ``passing`` is True for a measurement ``now()`` makes in passing,
    which must not wait (for a database that is not reached yet, say): it
    raises instead, and the last skew does until the next try."""

    def __init__(self, measure):
        self._measure_skew = measure
        self._lock = threading.Lock()
        self.skew = 0.0
        self._tried_at = None   # time.monotonic() of the last measurement
        self._failed = False
        # The host's clock less the monotonic one at the last measurement.
        self._offset = None

    def now(self):
        if self._due():
            self._measure_unless_measuring()
        return host_clock() - self.skew

    def utcnow(self):
        """``now()`` as the database columns hold times: a naive UTC
        datetime."""
        return datetime.datetime.fromtimestamp(
            self.now(), datetime.timezone.utc).replace(tzinfo=None)

    def measure(self, context=None):
        """Measure now; returns the skew (None: no clock to compare
        with).  Raises what the measurement raised."""
        with self._lock:
            return self._measure(context)

    def forget(self):
        """Back to no measurement: the next ``now()`` measures (tests)."""
        with self._lock:
            self.skew, self._tried_at, self._failed = 0.0, None, False
            self._offset = None

    def _due(self):
        if self._tried_at is None:
            return True
        monotonic = time.monotonic()
        if (self._offset is not None and abs(
                host_clock() - monotonic - self._offset) > STEP_TOLERANCE):
            return True     # the host's clock stepped
        wait = REMEASURE_AFTER_FAILURE if self._failed else REMEASURE_INTERVAL
        return monotonic - self._tried_at >= wait

    def _measure_unless_measuring(self):
        # Another thread measuring: the last skew does meanwhile.
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._measure(passing=True)
        except Exception as e:
            LOG.debug('Could not compare this host\'s clock with the '
                      'reference (%s); using the last skew, %.3f s', e,
                      self.skew)
            self._tried_at, self._failed = time.monotonic(), True
            self._offset = None     # a step is no reason to retry sooner
        finally:
            self._lock.release()

    def _measure(self, context=None, passing=False):
        measured = self._measure_skew(context, passing)
        self.skew = measured or 0.0
        self._tried_at, self._failed = time.monotonic(), False
        self._offset = host_clock() - self._tried_at
        return measured
