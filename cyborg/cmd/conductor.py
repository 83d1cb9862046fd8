"""cyborg-conductor: the RPC endpoints on topic ``cyborg-conductor``, the
periodic jobs (Placement reconcile, stuck binds, Nova event retries), the
start-up recovery of the binds and events its previous run left and,
with ``[metrics]enabled``, Prometheus metrics on
``[metrics]host:conductor_port``."""

from cyborg.common import metrics
from cyborg.common import quota
from cyborg.common import rpc
from cyborg.common import service
from cyborg.conductor import arq_binding
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import metrics_collector
from cyborg.conductor import periodics
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import api as db_api
from cyborg.db.api import clock as clock_db


def build_services(conf, metrics_of=metrics.CONDUCTOR):
    """The conductor's services, in start order; also serves metrics,
    the families named by ``metrics_of`` (the all-in-one builds its
    conductor here too and serves all of its one process's)."""
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
