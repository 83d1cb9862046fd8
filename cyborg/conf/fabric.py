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
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: opts}
