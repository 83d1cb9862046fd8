"""[nova] options: how to reach Nova to send accelerator-request-bound
events."""

from oslo_config import cfg

from cyborg.conf import ksa

GROUP = 'nova'
# Events go out on threads of their own; a batch Nova does not answer in
# time is postponed and sent again.
TIMEOUT = 30
# Seconds after which an undelivered event is given up on: a while after
# Nova's own [compute]arq_binding_timeout (300 s), past which the build
# that waited for it has failed.
EVENT_MAX_AGE = 600

opts = [
    cfg.BoolOpt('send_events', default=True,
                help='Send accelerator-request-bound events to Nova. Set to '
                     'False in standalone use without Nova; with no [nova] '
                     'auth configured no event is sent either.'),
    cfg.IntOpt('event_max_age', default=EVENT_MAX_AGE, min=0,
               help='Seconds after which a bind outcome (an '
                    'accelerator-request-bound event) that Nova has not '
                    'accepted is given up on: dropped, logged at ERROR and '
                    'counted in cyborg_conductor_nova_events_expired_total. '
                    'Nova fails a build whose events have not come within '
                    'its [compute]arq_binding_timeout (300 seconds by '
                    'default): keep this above that. 0: never give up.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)
    ksa.register_client_opts(conf, GROUP, 'compute', TIMEOUT)


def list_opts():
    return {GROUP: ksa.client_opts(TIMEOUT, opts)}
