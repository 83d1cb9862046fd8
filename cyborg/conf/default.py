"""[DEFAULT] options."""

import socket

from oslo_config import cfg

# Seconds between two periodic inventory reports, unless configured.
PERIODIC_INTERVAL = 60
# Seconds a stopping conductor or agent waits for its in-flight work,
# unless configured.
SHUTDOWN_TIMEOUT = 3.0
# Seconds a stopping API waits for its in-flight requests, unless
# configured, beyond the longest a write may wait for the broker and then
# for the conductor ([api]broker_retries, about a second each, and
# [api]conductor_timeout): enough to send the answer.
API_SHUTDOWN_MARGIN = 3.0

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
                    'Nova is told. Nova fails the build after its '
                    '[compute]arq_binding_timeout (300 s by default). The '
                    'outcome of a bind whose conductor dies reaches Nova up '
                    'to this plus the larger of '
                    '[conductor]stuck_arq_check_interval and twice '
                    '[conductor]nova_event_retry_interval after the bind '
                    'started (270 s by default): keep that below Nova\'s '
                    'timeout (the conductor warns at start when it is '
                    'not).'),
    cfg.StrOpt('state_path',
               default='/var/lib/cyborg',
               help='Directory where cyborg keeps local state (agent '
                    'report cache).'),
    cfg.FloatOpt('graceful_shutdown_timeout',
                 min=0.0,
                 help='Seconds a process waits after SIGTERM for in-flight '
                      'requests (RPC calls, API requests) to finish before '
                      'it exits. Unset: %g for cyborg-conductor and '
                      'cyborg-agent; for cyborg-api and cyborg-aio '
                      '[api]conductor_timeout + [api]broker_retries + %g '
                      '(25 by default), so that a restart lets a write '
                      'waiting for the conductor get its answer (a value '
                      'below [api]conductor_timeout cuts such writes off: '
                      'cyborg-api and cyborg-aio warn at start). Behind a '
                      'WSGI server, the server\'s own applies (gunicorn\'s '
                      '--graceful-timeout). Raise it on agents that program '
                      'FPGAs, and keep it under the time your service '
                      'manager waits before SIGKILL (systemd\'s '
                      'TimeoutStopSec, 90 s by default; docker stop\'s '
                      '--time, 10 s by default).'
                 % (SHUTDOWN_TIMEOUT, API_SHUTDOWN_MARGIN)),
]


def register_opts(conf):
    conf.register_opts(opts)


def list_opts():
    return {'DEFAULT': opts}
