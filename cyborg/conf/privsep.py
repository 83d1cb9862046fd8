"""[cyborg_sys_admin] options: how the agent starts its privileged helper
(oslo.privsep's options, under the section the agent's context reads;
see cyborg.agent.privileged), and what the helper may run.  The helper
reads them from the configuration files it was started with, never from
the agent's calls."""

from oslo_config import cfg
from oslo_privsep import priv_context

GROUP = 'cyborg_sys_admin'

opts = [
    cfg.ListOpt('fpga_tool_dirs',
                default=['/usr/bin', '/usr/local/bin',
                         '/opt/xilinx/xrt/bin'],
                help='Directories, searched in order, in which the '
                     'privileged helper finds the FPGA vendor tools it '
                     'runs as root (OPAE\'s fpgaconf, XRT\'s xbutil). '
                     'Absolute paths of directories only root can write; '
                     'the helper never runs a tool from elsewhere.'),
]


def register_opts(conf):
    conf.register_opts(priv_context.OPTS, group=GROUP)
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: priv_context.OPTS + opts}
