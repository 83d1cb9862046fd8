"""[quota] options, and the [oslo_limit] options oslo.limit reads.

Quotas are off by default (``driver = noop``).  With ``unified_limits``
the limits live in Keystone (registered limits and project limits of the
``accelerator`` service) and are read through oslo.limit, whose options
are the ``[oslo_limit]`` group: which endpoint the limits belong to and
the credentials to read them with (doc/source/quotas.rst).
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_limit import opts as limit_opts

from cyborg.conf import ksa

GROUP = 'quota'
LIMIT_GROUP = 'oslo_limit'
LIMIT_NAMESPACE = 'oslo.limit'
# Seconds each request for limits waits for Keystone ([oslo_limit]timeout,
# whose library default is to wait forever): a hung Keystone fails the
# create 503 instead of holding the conductor's thread.
LIMIT_TIMEOUT = 10

NOOP = 'noop'
UNIFIED_LIMITS = 'unified_limits'
REQUIRE = 'require'
IGNORE = 'ignore'

opts = [
    cfg.StrOpt('driver', default=NOOP,
               choices=[(NOOP, 'no quotas: every project may create as '
                         'many accelerator requests as it likes'),
                        (UNIFIED_LIMITS, 'limits from Keystone (unified '
                         'limits, read through oslo.limit and the '
                         '[oslo_limit] options), enforced when accelerator '
                         'requests are created')],
               help='How accelerator requests are limited per project. '
                    'Set the same value for cyborg-api (which shows limits '
                    'and usage) and cyborg-conductor (which enforces '
                    'them).'),
    cfg.StrOpt('unified_limits_resource_strategy', default=REQUIRE,
               choices=[(REQUIRE, 'the resources of '
                         'unified_limits_resource_list are limited to 0 '
                         'while Keystone has no registered limit for them; '
                         'any other resource without one is unlimited'),
                        (IGNORE, 'the resources of '
                         'unified_limits_resource_list are unlimited while '
                         'Keystone has no registered limit for them; any '
                         'other resource without one is limited to 0')],
               help='What a resource without a registered limit in Keystone '
                    'is allowed (unified_limits only). A project limit '
                    'always needs a registered limit in Keystone.'),
    cfg.ListOpt('unified_limits_resource_list',
                default=['accelerator_requests'],
                help='Resource names (accelerator_requests, '
                     'class:<resource class> such as class:FPGA) that '
                     'unified_limits_resource_strategy applies to.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)
    # What oslo_limit.opts.register_opts does, on ``conf`` itself (that
    # one puts the credentials on the global CONF only).  oslo.limit reads
    # the global CONF, which is the one cyborg's processes parse.
    ks_loading.register_session_conf_options(conf, LIMIT_GROUP)
    conf.set_default('timeout', LIMIT_TIMEOUT, group=LIMIT_GROUP)
    ks_loading.register_adapter_conf_options(conf, LIMIT_GROUP,
                                             include_deprecated=False)
    ks_loading.register_auth_conf_options(conf, LIMIT_GROUP)
    conf.register_opts(_endpoint_opts(), group=LIMIT_GROUP)


def _endpoint_opts():
    """oslo.limit's own options (which endpoint the limits belong to)."""
    return [opt for group, group_opts in limit_opts.list_opts()
            for opt in group_opts
            if group == LIMIT_GROUP and opt.name.startswith('endpoint_')]


def list_opts():
    listed = {GROUP: opts}
    listed.update(ksa.library_opts(LIMIT_NAMESPACE, timeout=LIMIT_TIMEOUT))
    return listed
