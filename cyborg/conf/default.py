"""[DEFAULT] options."""

import socket

from oslo_config import cfg

# Seconds between two periodic inventory reports, unless configured.
PERIODIC_INTERVAL = 60

opts = [
    cfg.StrOpt('host',
               default=socket.gethostname(),
               sample_default='localhost',
               help='Name of this node: the RPC server name of its conductor '
                    'or agent, and the host name its agent reports devices '
                    'under. Must match the compute service host name.'),
    cfg.IntOpt('periodic_interval',
               default=PERIODIC_INTERVAL, min=1,
               help='Seconds between two periodic inventory reports of an '
                    'agent. Hotplug events report at once in between.'),
    cfg.IntOpt('bind_timeout',
               default=240, min=10,
               help='Seconds an accelerator request may stay in BindStarted '
                    '(including FPGA programming) before it is failed and '
                    'Nova is told. Keep it below Nova\'s '
                    'arq_binding_timeout (300 s).'),
    cfg.StrOpt('state_path',
               default='/var/lib/cyborg',
               help='Directory where cyborg keeps local state (agent '
                    'report cache).'),
    cfg.FloatOpt('graceful_shutdown_timeout',
                 default=3.0, min=0.0,
                 help='Seconds a process waits after SIGTERM for in-flight '
                      'requests (RPC calls, API requests) to finish before '
                      'it exits. Raise it on agents that program FPGAs, '
                      'and keep it under the time your service manager '
                      'waits before SIGKILL.'),
]


def register_opts(conf):
    conf.register_opts(opts)


def list_opts():
    return {'DEFAULT': opts}
