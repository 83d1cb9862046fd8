"""[metrics] options: the Prometheus endpoints of each process."""

from oslo_config import cfg

GROUP = 'metrics'

opts = [
    cfg.BoolOpt('enabled', default=False,
                help='Serve Prometheus metrics: the agent and the conductor '
                     'on their own HTTP port (below), the API at /metrics '
                     'on its own port (no authentication: expose it only '
                     'to your monitoring network).'),
    cfg.HostAddressOpt('host', default='127.0.0.1',
                       help='Address the agent\'s and the conductor\'s '
                            'metrics endpoints listen on.'),
    cfg.PortOpt('agent_port', default=9721,
                help='Port of the agent\'s metrics endpoint.'),
    cfg.PortOpt('conductor_port', default=9722,
                help='Port of the conductor\'s metrics endpoint.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: opts}
