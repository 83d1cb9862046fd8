"""[upgrade_levels] options: RPC version caps for rolling upgrades.

Each option caps the version of the RPC messages this process SENDS to
one kind of peer, so that a newer process keeps talking to older ones
until they are upgraded too (doc/source/upgrade.rst).  A value is a
version of that peer's RPC API (``1.0``) or a release name listed in
``RELEASES`` of its rpcapi module (``cyborg/conductor/rpcapi.py``,
``cyborg/agent/rpcapi.py``); empty means no cap (the latest version).
"""

from oslo_config import cfg
from oslo_config import types

GROUP = 'upgrade_levels'

# Peer name -> the module holding its RPC version history and releases.
RPCAPI = {'conductor': 'cyborg.conductor.rpcapi',
           'agent': 'cyborg.agent.rpcapi'}


class UpgradeLevel(types.String):
    """A version of the peer's RPC API or a release name; checked against
    the history in code when the option is read (at start)."""

    def __init__(self, peer):
        super().__init__(type_name='RPC version or release name')
        self.peer = peer

    def __call__(self, value):
        value = super().__call__(value).strip()
        if value:
            # Imported here: the rpcapi modules import the messaging stack,
            # which option modules must not pull in at import time.
            import importlib
            rpcapi = importlib.import_module(RPCAPI[self.peer])
            rpcapi.resolve_cap(value)      # ValueError names what is known
        return value

    def __eq__(self, other):
        return (isinstance(other, UpgradeLevel) and other.peer == self.peer
                and super().__eq__(other))

    __hash__ = types.String.__hash__


opts = [
    cfg.Opt('conductor', type=UpgradeLevel('conductor'), default='',
            help='Highest version of the conductor RPC API this process '
                 'sends (APIs and agents call the conductor): a version '
                 'such as 1.0, or a release name. Conductors are upgraded '
                 'first, so this is needed only on an API or agent that '
                 'runs a newer release than some conductor still does; '
                 'remove it once every conductor runs that release. '
                 'Empty: no cap.'),
    cfg.Opt('agent', type=UpgradeLevel('agent'), default='',
            help='Highest version of the agent RPC API the conductor '
                 'sends: a version such as 1.0, or a release name. Set it '
                 'on upgraded conductors while agents of the older '
                 'release remain; remove it once every agent is upgraded. '
                 'A call the capped version does not have is skipped '
                 '(logged once). Empty: no cap.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: opts}
