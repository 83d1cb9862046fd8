"""[conductor] options."""

from oslo_config import cfg

from cyborg.common import states

GROUP = 'conductor'

opts = [
    cfg.IntOpt('workers', default=8, min=1,
               help='Threads of one conductor that carry binds through '
                    '(taking a handle, FPGA programming, mdev creation). '
                    'RPC requests themselves are served by '
                    '[DEFAULT]executor_thread_pool_size threads.'),
    cfg.IntOpt('mdev_timeout', default=20, min=1,
               help='Seconds an agent has to create or remove one mediated '
                    'device (a vGPU) when asked: it takes well under one, '
                    'and an agent that does not answer by then is taken '
                    'for down, rather than hold a bind worker for the '
                    'whole [DEFAULT]bind_timeout or an unbind or delete '
                    'past the API\'s [api]conductor_timeout.  An agent '
                    'that has sent no report for three '
                    '[DEFAULT]periodic_interval periods is not asked at '
                    'all.'),
    cfg.IntOpt('reconcile_interval', default=600, min=0,
               help='Seconds between two reconciliations of Placement with '
                    'the database (0 disables the periodic reconcile).'),
    cfg.IntOpt('gone_check_interval', default=60, min=0,
               help='Seconds between two checks of the rows kept because '
                    'their hardware vanished while allocated, while not '
                    'healthy, or (devices) in a status an operator gave '
                    'them: those no allocation holds and no longer '
                    'remembered ([health]max_hold_down) are removed with '
                    'their Placement providers.  The periodic reconcile '
                    'does it too; this check is one query when nothing is '
                    'gone (0 disables it).'),
    cfg.IntOpt('stuck_arq_check_interval', default=30, min=0,
               help='Seconds between two checks for accelerator requests '
                    'stuck in BindStarted, for FPGA programmings a '
                    'conductor left unfinished, and for FPGAs to program '
                    'again ([conductor]restore_fpga_images) (0 disables '
                    'them).'),
    cfg.BoolOpt('restore_fpga_images', default=True,
                help='Program again the image that Bound accelerator '
                     'requests asked for (accel:bitstream_id or '
                     'accel:function_id) on an FPGA that lost it (a '
                     'reboot or a power loss brought it back on its flash '
                     'default image), once its agent reports it, and at '
                     'each [conductor]stuck_arq_check_interval check, '
                     'when every instance holding the card asked for '
                     'that image.  Off: the report is only logged as a '
                     'WARNING naming the requests and their instances.'),
    cfg.IntOpt('reprogram_retry_interval', default=300, min=0,
               help='Seconds a conductor waits after a failed attempt at '
                    'programming an FPGA\'s image again '
                    '([conductor]restore_fpga_images) before it tries that '
                    'card again.'),
    cfg.IntOpt('initial_arq_max_age', default=0, min=0,
               help='Seconds after its creation an accelerator request '
                    'that was never bound (still Initial) is deleted by a '
                    'periodic job (every [conductor]reconcile_interval), '
                    'freeing its share of the project\'s quota. Nova binds '
                    'the requests it creates within seconds, but a create '
                    'answered 503 (a conductor that died after the write) '
                    'leaves requests Nova never learns of. Set it above '
                    'the longest a user or a standalone consumer waits '
                    'between a create and its bind (a day: 86400). 0: '
                    'never deleted.'),
    cfg.IntOpt('nova_event_retry_interval', default=10, min=1,
               help='Seconds between two attempts to deliver pending '
                    'accelerator-request-bound events to Nova.'),
    cfg.StrOpt('new_device_status', default=states.ENABLED,
               choices=[(states.ENABLED, 'new devices are offered at once'),
                        (states.MAINTAINING, 'new devices wait, out of the '
                         'schedule, until an admin enables them; the '
                         'driver\'s preparation step runs then')],
               help='Status a newly discovered device starts in. A device '
                    'that comes back keeps its uuid.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: opts}
