"""keystoneauth option sets shared by the groups that reach other services."""

from keystoneauth1 import loading as ks_loading


def register_client_opts(conf, group, service_type):
    """Register session, auth and adapter options for one service group."""
    ks_loading.register_session_conf_options(conf, group)
    ks_loading.register_auth_conf_options(conf, group)
    ks_loading.register_adapter_conf_options(conf, group)
    conf.set_default('service_type', service_type, group=group)
    conf.set_default('valid_interfaces', ['internal', 'public'], group=group)


def client_opts(extra=()):
    """The options of one service group, for the sample generator."""
    return (list(extra)
            + ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options('password')
            + ks_loading.get_adapter_conf_options(include_deprecated=False))
