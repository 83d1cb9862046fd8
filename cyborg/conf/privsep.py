"""[cyborg_sys_admin] options: how the agent starts its privileged helper
(oslo.privsep's options, under the section the agent's context reads;
see cyborg.agent.privileged)."""

from oslo_privsep import priv_context

GROUP = 'cyborg_sys_admin'


def register_opts(conf):
    conf.register_opts(priv_context.OPTS, group=GROUP)


def list_opts():
    return {GROUP: priv_context.OPTS}
