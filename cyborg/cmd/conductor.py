"""cyborg-conductor: the RPC endpoints on topic ``cyborg-conductor`` and the
periodic jobs (Placement reconcile, stuck binds, Nova event retries)."""

import sys

from oslo_log import log as logging

from cyborg.common import service
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import api as db_api

LOG = logging.getLogger(__name__)


def build_services(conf):
    """The conductor's services, in start order."""
    db_api.configure(conf)
    endpoints = [conductor_manager.ConductorManager(conf, conf.host)]
    services = [service.RPCService(conf, conductor_rpcapi.TOPIC, conf.host,
                                   endpoints)]
    periodic = periodic_service(conf)
    if periodic is not None:
        services.append(periodic)
    return services


def periodic_service(conf):
    """The runner of cyborg.conductor.periodics' job table."""
    from cyborg.conductor import periodics
    return periodics.PeriodicRunner(conf)


def main(argv=None):
    conf = service.prepare(argv, prog='cyborg-conductor')
    LOG.info('cyborg-conductor starting on host %s', conf.host)
    sys.exit(service.serve(conf, 'cyborg-conductor', build_services(conf)))
