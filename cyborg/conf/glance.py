"""[glance] options: how to reach Glance, which holds FPGA bitstream images."""

from oslo_config import cfg

from cyborg.conf import ksa

GROUP = 'glance'
# For each read of a bitstream's download, not for the whole of it.
TIMEOUT = 60

opts = [
    cfg.IntOpt('download_chunk_size', default=1048576, min=4096,
               help='Bytes read at once when downloading a bitstream.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)
    ksa.register_client_opts(conf, GROUP, 'image', TIMEOUT)


def list_opts():
    return {GROUP: ksa.client_opts(TIMEOUT, opts)}
