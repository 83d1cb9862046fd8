"""cyborg-conductor: the RPC endpoints on topic ``cyborg-conductor`` and the
periodic jobs (Placement reconcile, stuck binds, Nova event retries)."""

from cyborg.common import service
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import periodics
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import api as db_api


def build_services(conf):
    """The conductor's services, in start order."""
    db_api.configure(conf)
    endpoints = [conductor_manager.ConductorManager(conf, conf.host)]
    return [service.RPCService(conf, conductor_rpcapi.TOPIC, conf.host,
                               endpoints),
            periodics.PeriodicRunner(conf)]


def main(argv=None):
    service.run_process('cyborg-conductor', build_services, argv)
