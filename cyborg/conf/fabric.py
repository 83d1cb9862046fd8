"""[fabric] options: the fabric drivers that attach remote
(fabric-attached) accelerators to hosts (cyborg.fabric), used by the
conductor."""

from oslo_config import cfg

GROUP = 'fabric'

opts = [
    cfg.StrOpt('fake_state_dir',
               sample_default='$state_path/fake_fabric',
               help='Directory where the fake fabric driver (``fake``, for '
                    'tests and trying remote pools out) records every '
                    'attach and detach (``journal.jsonl``) and what is '
                    'attached where (``attached.json``).  Unset, the fake '
                    'driver refuses to attach.  Real fabric drivers do not '
                    'read it.'),
    cfg.IntOpt('detach_timeout', default=60, min=1,
               help='Seconds a fabric driver has to detach a remote '
                    'accelerator before the conductor stops waiting and '
                    'counts the detach as refused: the handle stays out of '
                    'use, attached as far as cyborg knows, until the '
                    'periodic reconcile detaches it.  An unbind or delete '
                    'the API waits for gives the driver less where the API '
                    'stops waiting sooner ([api]conductor_timeout).  An '
                    'attach has the bind\'s time ([DEFAULT]bind_timeout), '
                    'less what undoing it may take (this, at most half of '
                    'what is left).  Drivers should still give up on '
                    'their own before that.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: opts}
