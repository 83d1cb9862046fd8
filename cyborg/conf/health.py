"""[health] options: how agents watch devices and how the conductor's
health state machine (``cyborg.conductor.health``) judges what they see."""

from oslo_config import cfg

GROUP = 'health'

opts = [
    cfg.BoolOpt('enabled', default=True,
                help='Watch the health of devices: agents run their '
                     'drivers\' health checks and report what they see; '
                     'the conductor takes failing devices out of the '
                     'schedule and re-admits them once well.'),
    # -- agent --------------------------------------------------------
    cfg.FloatOpt('check_interval', default=1.0, min=0.1,
                 help='Agent: seconds between two health checks of every '
                      'device (NVML events are waited for in between, so '
                      'an XID is seen at once). A change is reported at '
                      'once.'),
    cfg.IntOpt('report_interval', default=30, min=1,
               help='Agent: seconds between two full health reports (a '
                    'reading for every device), the safety net for a lost '
                    'change report.'),
    cfg.FloatOpt('check_timeout', default=30.0, min=0.1,
                 help='Agent: seconds a driver\'s health check (or its '
                      're-probe, or usage sampling) may run before its '
                      'devices are reported with a transient reading '
                      '"health check timed out" (suspect, never taken '
                      'for well) until it returns: NVML stuck on a '
                      'wedged GPU, say. Each driver is checked on a '
                      'thread of its own, so the other drivers\' '
                      'devices are still checked and reported meanwhile; '
                      'a check still running is not started again.'),
    # -- conductor: the state machine ---------------------------------
    cfg.IntOpt('suspect_threshold', default=3, min=1,
               help='Transient faults that make a suspect device '
                    'unhealthy, each within suspect_window of the fault '
                    '(or re-stated condition) before it: they are counted '
                    'for as long as the device stays suspect.'),
    cfg.IntOpt('suspect_window', default=300, min=1,
               help='Seconds without a fault, and without the condition '
                    'that made it suspect being re-stated, after which a '
                    'suspect device is healthy again. Keep it longer than '
                    'report_interval.'),
    cfg.IntOpt('max_suspect_time', default=900, min=0,
               help='Seconds a device may stay suspect without a break (a '
                    'transient condition that lasts, re-stated by every '
                    'full report, or faults that keep coming below '
                    'suspect_threshold) before the next transient reading '
                    'takes it out as unhealthy: a GPU held in hardware '
                    'slowdown, a row remap waiting for a reset, an SSD '
                    'stuck resetting. It comes back as any failed device '
                    'does, once it reads well. 0: never (such a device '
                    'stays suspect, still scheduled, while the condition '
                    'lasts).'),
    cfg.IntOpt('hold_down', default=60, min=0,
               help='Seconds an unhealthy device must read well before it '
                    'is actively re-probed for re-admission. Doubled for '
                    'every re-admission within flap_window, so a flapping '
                    'device stays out longer each time, and per re-probe '
                    'it failed in a row after the first. 0: re-probed at '
                    'the first good reading, and probe_timeout seconds '
                    'after a failed re-probe.'),
    cfg.IntOpt('max_hold_down', default=86400, min=0,
               help='Upper bound of the doubled hold_down, in seconds.'),
    cfg.IntOpt('flap_window', default=3600, min=1,
               help='Seconds during which re-admissions count as flaps.'),
    cfg.IntOpt('probe_timeout', default=60, min=1,
               help='Seconds the conductor waits for a re-probe\'s verdict '
                    'before it takes the device back to unhealthy.'),
    cfg.FloatOpt('tick_interval', default=1.0, min=0.1,
                 help='Conductor: seconds between two runs of the health '
                      'timers (suspect expiry, hold-down, probe timeout).'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: opts}
