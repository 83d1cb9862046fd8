"""keystoneauth option sets shared by the groups that reach other services.

keystoneauth's session has no request timeout by default: a service that
accepts a connection and never answers (a hung worker, a host gone behind
a firewall that drops packets) would hold the calling thread forever, and
with it whatever the caller holds.  Each group sets a default of its own,
in seconds, for connecting and for each read (not for a whole download).
"""

import importlib.metadata

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg


def register_client_opts(conf, group, service_type, timeout):
    """Register session, auth and adapter options for one service group,
    its requests timing out after ``timeout`` seconds by default."""
    ks_loading.register_session_conf_options(conf, group)
    ks_loading.register_auth_conf_options(conf, group)
    ks_loading.register_adapter_conf_options(conf, group)
    conf.set_default('service_type', service_type, group=group)
    conf.set_default('valid_interfaces', ['internal', 'public'], group=group)
    conf.set_default('timeout', timeout, group=group)


def has_credentials(section):
    """Whether a keystoneauth group (``conf[group]``) names credentials:
    an ``auth_type``, or an ``auth_section`` (another group holding them,
    which keystoneauth reads the plugin and its options from)."""
    return bool(getattr(section, 'auth_type', None)
                or getattr(section, 'auth_section', None))


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


def library_opts(namespace, **defaults):
    """[(group, opts)] of a library's ``oslo.config.opts`` namespace, as
    the sample generator lists them, with ``defaults`` of cyborg's own.

    For the groups cyborg registers from a library (keystonemiddleware's,
    oslo.limit's) but sets a default in at runtime (``conf.set_default``),
    so that the sample shows the default cyborg runs with."""
    [entry_point] = importlib.metadata.entry_points(
        group='oslo.config.opts', name=namespace)
    listed = []
    for group, opts in entry_point.load()():
        opts = list(opts)
        cfg.set_defaults([o for o in opts if o.dest in defaults], **defaults)
        listed.append((group, opts))
    return listed
