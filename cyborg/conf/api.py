"""[api] options."""

from oslo_config import cfg

GROUP = 'api'

opts = [
    cfg.HostAddressOpt('host_ip', default='0.0.0.0',
                       help='Address the cyborg-api server listens on.'),
    cfg.PortOpt('port', default=6666,
                help='Port the cyborg-api server listens on.'),
    cfg.IntOpt('api_workers', default=1, min=1,
               help='Number of cyborg-api worker processes.'),
    cfg.IntOpt('threads', default=16, min=1,
               help='Request threads per cyborg-api worker process.'),
    cfg.StrOpt('public_endpoint',
               help='Public URL of the API, used in links, e.g. '
                    'https://cloud.example.com/accelerator. When unset, the '
                    'request\'s host URL is used.'),
    cfg.StrOpt('auth_strategy', default='keystone',
               choices=[('keystone', 'Validate tokens with Keystone '
                                     '(keystonemiddleware auth_token).'),
                        ('noauth', 'No authentication: identity comes from '
                                   'the X-Project-Id, X-User-Id and X-Roles '
                                   'headers. For the all-in-one and tests '
                                   'only.')],
               help='How API requests are authenticated.'),
    cfg.IntOpt('max_limit', default=1000, min=1,
               help='Largest number of items a list call returns at once.'),
    cfg.IntOpt('max_request_body_size', default=1048576, min=1024,
               help='Largest request body in bytes; a larger one is '
                    'refused with 413 before it is read. Bodies are read '
                    'whole before a request is handled, so a client that '
                    'disconnects while sending one is logged in one line.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: opts}
