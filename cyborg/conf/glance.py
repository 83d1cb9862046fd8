"""[glance] options: how to reach Glance, which holds FPGA bitstream images."""

from oslo_config import cfg

from cyborg.conf import ksa

GROUP = 'glance'
# For each read of a bitstream's download, not for the whole of it.
TIMEOUT = 60
# The conductor sends a bitstream to the agent in one RPC message,
# base64-encoded (4 bytes for every 3), with the request's context and
# arguments around it.  RabbitMQ refuses a message over its
# max_message_size: 128 MiB by default from 3.8 to 3.13, 16 MiB from 4.0.
# 95 MiB encoded is 126.7 MiB, leaving over a MiB for the rest.
MAX_BITSTREAM_SIZE = 95 * 1024 * 1024

opts = [
    cfg.IntOpt('download_chunk_size', default=1048576, min=4096,
               help='Bytes read at once when downloading a bitstream.'),
    cfg.IntOpt('max_bitstream_size', default=MAX_BITSTREAM_SIZE, min=1,
               help='The largest FPGA bitstream, in bytes, that '
                    'programming accepts (at bind and by an '
                    'administrator).  The conductor sends a bitstream to '
                    'the agent in one RPC message, base64-encoded (4 bytes '
                    'for every 3), which the message broker refuses '
                    'beyond its maximum message size: keep this under '
                    'three quarters of that maximum, less a MiB.  The '
                    'default (95 MiB) fits RabbitMQ\'s default '
                    'max_message_size of 128 MiB (RabbitMQ 3.8 to 3.13); '
                    'from RabbitMQ 4.0 that default is 16 MiB: set this to '
                    '11 MiB (11534336) there, or raise the broker\'s '
                    'max_message_size.  A larger image is refused (400 '
                    'for an administrator\'s program; a bind fails with '
                    'the reason) before its download when Glance gives '
                    'its size, else as soon as the download passes the '
                    'limit.'),
    cfg.ListOpt('trusted_image_owners', default=[],
                help='Projects (ids) whose images may program an FPGA for '
                     'any project, besides the project of these [glance] '
                     'credentials, whose images always may (the project '
                     'operators upload bitstreams to).  Any other image '
                     'programs an FPGA only for a project Glance shows it '
                     'to: public or community images, the project\'s own, '
                     'and images shared with it that it accepted.  An '
                     'image another project may not use is as one Glance '
                     'does not have: an accel:bitstream_id naming it is '
                     'not found, and an accel:function_id does not count '
                     'it among the images with that function id (exactly '
                     'one is wanted).  This applies at bind (the ARQ\'s '
                     'project), when an image is programmed again after a '
                     'reboot (that of each ARQ bound to the card), and to '
                     'an administrator\'s program (the project of the '
                     'administrator\'s token).'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)
    ksa.register_client_opts(conf, GROUP, 'image', TIMEOUT)


def list_opts():
    return {GROUP: ksa.client_opts(TIMEOUT, opts)}
