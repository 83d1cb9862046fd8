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
                     'credentials, whose images always may.  List the '
                     'projects operators upload bitstreams to: images '
                     'uploaded as an administrator belong to the admin '
                     'project and are shared by default, which no other '
                     'project may use unless the admin project is listed '
                     'here (or the images made public).  By id (a '
                     'profile\'s accel:bitstream_id, an administrator\'s '
                     'program request), another image programs an FPGA '
                     'only for a project Glance serves it to: public or '
                     'community images, the project\'s own, and images '
                     'shared with it (any member status); any other is '
                     'not found (the conductor logs a WARNING naming its '
                     'owner).  By accel:function_id, only the images of '
                     'these projects, public images and the project\'s '
                     'own count (exactly one is wanted): never a '
                     'community image, nor one another project shares.  '
                     'The project is the ARQ\'s at bind and when an image '
                     'is programmed again after a reboot, and that of the '
                     'administrator\'s token for a program request.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)
    ksa.register_client_opts(conf, GROUP, 'image', TIMEOUT)


def list_opts():
    return {GROUP: ksa.client_opts(TIMEOUT, opts)}
