"""Every periodic job of the conductor, in one table, and their runner.

A job is ``(name, interval option, 'module:function')``; the option is
named in ``[conductor]`` (``'reconcile_interval'``) or as
``'group.option'`` (``'health.tick_interval'``).  The function is called
as ``function(conf, context)`` with an admin context, every ``interval``
seconds (0 disables the job), each job on its own thread so a slow job
never delays another.  A job that raises is logged and runs again at its
next tick.  Several conductors may run the same jobs at once: each job
must be safe under that (guarded updates, idempotent Placement writes).

The function is named by a string and imported when the job runs, so this
table imports nothing and any module may add its row.
"""

import importlib
import threading
import time

from oslo_log import log as logging

from cyborg.common import context as cyborg_context
from cyborg.common import exception

LOG = logging.getLogger(__name__)

# Seconds a stopping conductor waits, in all, for periodic jobs running.
STOP_WAIT = 2.0

JOBS = (
    # Repair Placement drift and finish syncs a failed report left behind.
    ('reconcile_placement', 'reconcile_interval',
     'cyborg.conductor.placement_sync:reconcile_all'),
    # Remove vanished hardware whose allocations ended, soon after.
    ('drop_released_gone', 'gone_check_interval',
     'cyborg.conductor.placement_sync:drop_released_gone'),
    # Re-sync remote pools' sharing providers, retry the fabric detaches
    # that failed and remove the providers of pools that are gone.
    ('reconcile_remote_pools', 'reconcile_interval',
     'cyborg.conductor.remote_pools:reconcile'),
    # Fail ARQs left in BindStarted past [DEFAULT]bind_timeout (a conductor
    # died mid-bind) and tell Nova.
    ('fail_stuck_arqs', 'stuck_arq_check_interval',
     'cyborg.conductor.arq_binding:fail_stuck'),
    # Take out of the schedule the FPGAs a conductor died programming
    # (what they hold is unknown) until a re-probe.
    ('take_out_overdue_programmings', 'stuck_arq_check_interval',
     'cyborg.conductor.programming:take_out_overdue'),
    # Delete the quota lock rows of projects left without ARQs.
    ('purge_quota_locks', 'reconcile_interval',
     'cyborg.conductor.quotas:purge_unused_locks'),
    # Delete the ARQs never bound past [conductor]initial_arq_max_age (a
    # create answered 503 left them; off by default).
    ('purge_initial_arqs', 'reconcile_interval',
     'cyborg.conductor.arq_binding:purge_initial'),
    # Program again the image a reboot took from an FPGA under the Bound
    # ARQs that asked for it (a report starts it too; this retries).
    ('restore_fpga_images', 'stuck_arq_check_interval',
     'cyborg.conductor.programming:restore_lost'),
    # Re-send accelerator-request-bound events Nova has not accepted yet.
    ('resend_nova_events', 'nova_event_retry_interval',
     'cyborg.conductor.nova:resend_due'),
    # Health steps that come with time: suspect expiry, end of a hold-down
    # (re-probe), probe timeout.
    ('health_timers', 'health.tick_interval',
     'cyborg.conductor.health:run_timers'),
)


def _load(path):
    module, _sep, function = path.partition(':')
    return getattr(importlib.import_module(module), function)


class PeriodicRunner:
    """Runs the jobs of ``JOBS`` (or ``jobs``) on threads until stopped."""

    def __init__(self, conf, jobs=JOBS):
        self.conf = conf
        self.jobs = jobs
        self._stop = threading.Event()
        self._threads = []

    def start(self):
        self._stop.clear()
        for name, option, path in self.jobs:
            interval = interval_of(self.conf, option)
            if not interval:
                LOG.info('Periodic job %s is disabled', name)
                continue
            thread = threading.Thread(
                target=self._loop, args=(name, interval, path),
                name=f'periodic-{name}', daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self):
        """Ask every job to stop (one running ends its run first)."""
        self._stop.set()

    def wait(self, timeout=STOP_WAIT):
        """Wait, ``timeout`` seconds at most in all, for running jobs to
        end.  A job still running then (a re-send to a Nova that does not
        answer, a long reconcile) is left to its daemon thread: every job
        is safe to cut short and run again, and a stopping conductor has
        others to wait for (its background binds)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in self._threads):
            LOG.info('Periodic jobs still running at stop are left to end '
                     'with the process')
        self._threads = []

    def __str__(self):
        return 'periodic jobs'

    def _loop(self, name, interval, path):
        while not self._stop.wait(interval):
            run_job(self.conf, name, path)


class AtStart:
    """Runs ``'module:function'`` once, as ``function(conf, context,
    started_at)``, on a thread of its own as the conductor starts (so an
    absent database never holds up the other services), trying again
    every ``retry`` seconds while the database is unreachable.
    ``started_at``: when this process started, so that the job leaves
    alone what this run has done since; a datetime, or a callable of the
    context that tells it when the job runs
    (``cyborg.db.api.clock.this_moment``)."""

    def __init__(self, conf, name, path, started_at, retry=2.0):
        self.conf = conf
        self.name = name
        self.path = path
        self.started_at = started_at
        self.retry = retry
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._run,
                                        name=f'at-start-{self.name}',
                                        daemon=True)
        self._thread.start()

    def stop(self):
        # Not joined: the job is idempotent, and a run cut short by the
        # process's exit is done again by the next start.
        self._stop.set()

    def __str__(self):
        return f'start-up job {self.name}'

    def _started_at(self, context):
        started_at = self.started_at
        if callable(started_at):
            started_at = started_at(context)
        return started_at

    def _run(self):
        while not self._stop.is_set():
            try:
                context = cyborg_context.get_admin_context()
                _load(self.path)(self.conf, context,
                                 self._started_at(context))
                return
            except Exception as e:
                if not _waited_for(e):
                    LOG.exception('Start-up job %s failed', self.name)
                    return
                LOG.warning('Start-up job %s waits for the database (%s)',
                            self.name, exception.first_line(e))
            self._stop.wait(self.retry)


def _waited_for(error):
    """Whether a job waits ``error`` out (the database away, or not made
    yet by cyborg-dbsync; Placement away): one line each time, not a
    traceback, and a start-up job tries again."""
    return (isinstance(error, exception.DB_OUTAGES +
                       (exception.ServiceUnavailable,))
            or exception.db_not_ready(error))


def interval_of(conf, option):
    """The value of a job's interval option (see the table's format)."""
    group, _sep, name = option.rpartition('.')
    return conf[group or 'conductor'][name]


def run_job(conf, name, path):
    """Run one job once, logging (not raising) what goes wrong."""
    try:
        _load(path)(conf, cyborg_context.get_admin_context())
    except Exception as e:
        if not _waited_for(e):
            LOG.exception('Periodic job %s failed; it runs again next time',
                          name)
            return
        # An expected outage: one line, not a traceback every tick.
        LOG.warning('Periodic job %s skipped (%s); it runs again next '
                    'time', name, exception.first_line(e))
