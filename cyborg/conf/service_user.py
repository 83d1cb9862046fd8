"""[service_user] options: the service token sent along with user tokens."""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

GROUP = 'service_user'

opts = [
    cfg.BoolOpt('send_service_user_token', default=False,
                help='Send a service token along with the user token when '
                     'calling other services on a user\'s behalf.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)


def list_opts():
    return {GROUP: (opts
                    + ks_loading.get_session_conf_options()
                    + ks_loading.get_auth_common_conf_options()
                    + ks_loading.get_auth_plugin_conf_options('password'))}
