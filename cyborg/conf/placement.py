"""[placement] options: keystoneauth session and auth."""

from oslo_config import cfg

from cyborg.conf import ksa

GROUP = 'placement'

opts = [
    cfg.StrOpt('endpoint_override_noauth',
               help='Placement URL to use without authentication '
                    '(all-in-one and tests, where Placement runs with '
                    'auth_strategy=noauth2). Leave unset in production.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)
    ksa.register_client_opts(conf, GROUP, 'placement')


def list_opts():
    return {GROUP: ksa.client_opts(opts)}
