"""[nova] options: how to reach Nova to send accelerator-request-bound
events."""

from oslo_config import cfg

from cyborg.conf import ksa

GROUP = 'nova'
# Events go out on threads of their own; a batch Nova does not answer in
# time is postponed and sent again.
TIMEOUT = 30

opts = [
    cfg.BoolOpt('send_events', default=True,
                help='Send accelerator-request-bound events to Nova. Set to '
                     'False in standalone use without Nova; with no [nova] '
                     'auth configured no event is sent either.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)
    ksa.register_client_opts(conf, GROUP, 'compute', TIMEOUT)


def list_opts():
    return {GROUP: ksa.client_opts(TIMEOUT, opts)}
