"""cyborg-agent: discovers this host's accelerators, reports them to the
conductor (at start, every ``[DEFAULT]periodic_interval`` seconds and at
once on hotplug) and serves topic ``cyborg-agent`` as ``[DEFAULT]host``."""

from cyborg.agent import manager as agent_manager
from cyborg.agent import reporter as agent_reporter
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import service
from cyborg.drivers import loader


def build_services(conf, host=None):
    """The agent's services, in start order: RPC first, so a conductor's
    request for a report is heard before the first report goes out."""
    host = host or conf.host
    drivers = loader.load_drivers(conf, host)
    reporter = agent_reporter.Reporter(conf, host, drivers)
    endpoints = [agent_manager.AgentManager(conf, host, reporter=reporter,
                                            drivers=drivers)]
    services = [service.RPCService(conf, agent_rpcapi.TOPIC, host,
                                   endpoints),
                reporter]
    if conf.agent.hotplug:
        services.append(hotplug_watcher(conf, reporter))
    return services


def hotplug_watcher(conf, reporter):
    # Imported here: pyudev is only needed when hotplug is on.
    from cyborg.agent import hotplug
    return hotplug.HotplugWatcher(conf, reporter.request_report)


def main(argv=None):
    service.run_process('cyborg-agent', build_services, argv)
