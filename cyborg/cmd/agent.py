"""cyborg-agent: discovers this host's accelerators, reports them to the
conductor (at start, after recreating the mdevs of the host's Bound ARQs
a reboot took away, every ``[DEFAULT]periodic_interval`` seconds and at
once on hotplug), watches their health (``[health]``), serves topic
``cyborg-agent`` as ``[DEFAULT]host`` and, with ``[metrics]enabled``, its
Prometheus metrics on ``[metrics]agent_port``.  Under systemd (a unit of
``Type=notify``) it says it is ready once those mdevs are made (or
failed: those are tried again before each later report), or
``[agent]ready_timeout`` seconds have passed (``mdevs.Readiness``)."""

from cyborg.agent import health
from cyborg.agent import manager as agent_manager
from cyborg.agent import mdevs as agent_mdevs
from cyborg.agent import reporter as agent_reporter
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import metrics
from cyborg.common import service
from cyborg.drivers import loader


def build_services(conf, host=None, tell_systemd=False):
    """The agent's services, in start order: RPC first, so a conductor's
    request for a report is heard before the first report goes out; the
    health monitor after the reporter (it watches the devices the reporter
    got acknowledged), so it also stops before it.  The all-in-one starts
    the first (the RPC server) before its conductor and the rest after.
    With ``tell_systemd`` (the cyborg-agent process), first of all the
    ``mdevs.Readiness`` that tells systemd when the agent is ready."""
    host = host or conf.host
    drivers = loader.load_drivers(conf, host)
    # Recreated before the first report: a reboot took them away; those
    # that could not be, tried again before each later report.
    mdevs = agent_mdevs.Mdevs(conf, host, drivers)
    readiness = agent_mdevs.Readiness(conf, mdevs) if tell_systemd else None
    told = mdevs if readiness is None else readiness
    reporter = agent_reporter.Reporter(conf, host, drivers,
                                       before_first_report=told.restore,
                                       before_report=told.retry)
    monitor = health_monitor(conf, host, drivers, reporter)
    endpoints = [agent_manager.AgentManager(conf, host, reporter=reporter,
                                            drivers=drivers,
                                            health_monitor=monitor,
                                            mdevs=mdevs)]
    services = [service.RPCService(conf, agent_rpcapi.TOPIC, host,
                                   endpoints),
                reporter]
    if monitor is not None:
        services.append(monitor)
    if conf.agent.hotplug:
        services.append(hotplug_watcher(conf, reporter))
    if readiness is not None:
        services.insert(0, readiness)
    return services


def health_monitor(conf, host, drivers, reporter):
    """The health monitor, or None when ``[health]enabled`` is off."""
    if not conf.health.enabled:
        return None
    return health.HealthMonitor(conf, host, drivers,
                                reporter.known_devices,
                                in_progress=reporter.programming)


def hotplug_watcher(conf, reporter):
    # Imported here: pyudev is only needed when hotplug is on.
    from cyborg.agent import hotplug
    return hotplug.HotplugWatcher(conf, reporter.request_report)


def build_process_services(conf):
    """``build_services`` for the cyborg-agent process, which also serves
    the metrics (the all-in-one serves its one registry elsewhere) and
    tells systemd when it is ready."""
    metrics.serve(conf, conf.metrics.agent_port, metrics.AGENT)
    return build_services(conf, tell_systemd=True)


def main(argv=None):
    service.run_process('cyborg-agent', build_process_services, argv)
