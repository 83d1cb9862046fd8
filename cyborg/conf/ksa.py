"""keystoneauth option sets shared by the groups that reach other services.

keystoneauth's session has no request timeout by default: a service that
accepts a connection and never answers (a hung worker, a host gone behind
a firewall that drops packets) would hold the calling thread forever, and
with it whatever the caller holds.  Each group sets a default of its own,
in seconds, for connecting and for each read (not for a whole download).
"""

from keystoneauth1 import loading as ks_loading


def register_client_opts(conf, group, service_type, timeout):
    """Register session, auth and adapter options for one service group,
    its requests timing out after ``timeout`` seconds by default."""
    ks_loading.register_session_conf_options(conf, group)
    ks_loading.register_auth_conf_options(conf, group)
    ks_loading.register_adapter_conf_options(conf, group)
    conf.set_default('service_type', service_type, group=group)
    conf.set_default('valid_interfaces', ['internal', 'public'], group=group)
    conf.set_default('timeout', timeout, group=group)


def client_opts(timeout, extra=()):
    """The options of one service group, for the sample generator."""
    session = ks_loading.get_session_conf_options()
    for opt in session:
        if opt.dest == 'timeout':
            opt.default = timeout
    return (list(extra)
            + session
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options('password')
            + ks_loading.get_adapter_conf_options(include_deprecated=False))
