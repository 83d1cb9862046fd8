"""cyborg-conductor: the RPC endpoints on topic ``cyborg-conductor``, the
periodic jobs (Placement reconcile, stuck binds, Nova event retries), the
start-up recovery of the binds and events its previous run left and,
with ``[metrics]enabled``, Prometheus metrics on
``[metrics]host:conductor_port``."""

from oslo_log import log as logging

from cyborg.common import metrics
from cyborg.common import quota
from cyborg.common import rpc
from cyborg.common import service
from cyborg.conductor import arq_binding
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import metrics_collector
from cyborg.conductor import nova
from cyborg.conductor import periodics
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import api as db_api
from cyborg.db.api import clock as clock_db

LOG = logging.getLogger(__name__)

NOVA_ARQ_BINDING_TIMEOUT = nova.NOVA_ARQ_BINDING_TIMEOUT


def late_outcome_warning(conf):
    """Why Nova, waiting its default ``[compute]arq_binding_timeout``,
    may fail a build before it hears the outcome of a bind whose
    conductor died; None when it hears in time.

    The stuck-bind check (every ``[conductor]stuck_arq_check_interval``)
    fails such a bind once ``[DEFAULT]bind_timeout`` has passed since it
    started, and tells Nova at once; an outcome the conductor recorded
    but did not deliver is due ``[conductor]nova_event_retry_interval``
    after the bind's deadline (``arq_binding._due``), and the re-send
    periodic runs every ``nova_event_retry_interval``.  Nova hears at
    the latest ``bind_timeout`` + the larger of
    ``stuck_arq_check_interval`` and twice ``nova_event_retry_interval``
    after the bind started."""
    conductor = conf.conductor
    if not conductor.stuck_arq_check_interval:
        return ('[conductor]stuck_arq_check_interval is 0: the binds of a '
                'conductor that dies are failed, and Nova told, only when '
                'that conductor starts again; Nova fails the build after '
                'its [compute]arq_binding_timeout (%d s by default)'
                % NOVA_ARQ_BINDING_TIMEOUT)
    latest = conf.bind_timeout + max(
        conductor.stuck_arq_check_interval,
        2 * conductor.nova_event_retry_interval)
    if latest < NOVA_ARQ_BINDING_TIMEOUT:
        return None
    return ('Nova may fail the build of a bind whose conductor died before '
            'it hears the outcome: it hears it up to %d s after the bind '
            'started ([DEFAULT]bind_timeout %d s + the larger of '
            '[conductor]stuck_arq_check_interval %d s and twice '
            '[conductor]nova_event_retry_interval %d s), and fails the '
            'build after its [compute]arq_binding_timeout (%d s by '
            'default); lower them, or raise Nova\'s arq_binding_timeout '
            'above %d s' % (latest, conf.bind_timeout,
                            conductor.stuck_arq_check_interval,
                            conductor.nova_event_retry_interval,
                            NOVA_ARQ_BINDING_TIMEOUT, latest))


def warn_if_outcomes_late(conf):
    warning = late_outcome_warning(conf)
    if warning:
        LOG.warning('%s', warning)


def build_services(conf, metrics_of=metrics.CONDUCTOR):
    """The conductor's services, in start order; also serves metrics,
    the families named by ``metrics_of`` (the all-in-one builds its
    conductor here too and serves all of its one process's)."""
    warn_if_outcomes_late(conf)
    # This moment, told by the database server's clock once the start-up
    # jobs reach the database (the process does not wait for it here).
    started_at = clock_db.this_moment()
    db_api.configure(conf)
    rpc.reconnect_fast(conf)
    serve_metrics(conf, metrics_of)
    endpoints = [conductor_manager.ConductorManager(conf, conf.host)]
    # First, on its own thread: it needs no broker, and binds this run
    # takes meanwhile are newer than ``started_at``, so it leaves them be.
    recovery = periodics.AtStart(conf, 'recover_binds',
                                 'cyborg.conductor.arq_binding:recover',
                                 started_at)
    clock = periodics.AtStart(conf, 'check_clock',
                              'cyborg.conductor.clock:check', started_at)
    # Stopped and waited for in the reverse order: the RPC server first,
    # so no call is taken once the stop has begun (another conductor
    # takes it); the periodic jobs, which need no broker, before it, so
    # they run while the broker is away (the RPC server's start waits for
    # it); the background binds last, once no call can start one any
    # more.
    return [arq_binding.BackgroundBinds(), recovery, clock,
            periodics.PeriodicRunner(conf),
            service.RPCService(conf, conductor_rpcapi.TOPIC, conf.host,
                               endpoints)]


def serve_metrics(conf, only=metrics.CONDUCTOR):
    """Register the conductor's scrape-time counts (ARQs by state, Nova
    events pending, devices by health, silent hosts) and serve the
    process's registry on ``[metrics]host:conductor_port``; the serving
    is a no-op unless ``[metrics]enabled``."""
    metrics_collector.register(conf)
    metrics.serve(conf, conf.metrics.conductor_port, only)


def main(argv=None):
    service.run_process('cyborg-conductor', build_services, argv,
                        config_problem=quota.config_problem)
