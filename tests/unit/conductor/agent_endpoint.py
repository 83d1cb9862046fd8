"""An agent's RPC side for conductor tests: the agent RPC API 1.1
(``prepare_device``, ``probe_health``) served in this process over
oslo.messaging's ``fake://`` transport, recording what the conductor asks.

It stands for an agent whose driver prepares (or fails to prepare) a
device; the conductor's client, the RPC transport and the serialisation
are the real ones.  ``serving(conf, host, agent)`` serves ``agent`` as
server ``host`` meanwhile; ``agent=None`` serves nothing (an agent that
never answers).
"""

import contextlib
import threading

import oslo_messaging as messaging

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import rpc
from tests.fixtures import api as api_fixture


class RecordingAgent:
    """Answers prepare_device (True, or raises ``prepare_error``) and
    records probe_health casts."""

    target = messaging.Target(version='1.1')

    def __init__(self, prepare_error=None):
        self.prepare_error = prepare_error
        self.prepared = []
        self.probes = []
        self.probed = threading.Event()

    def prepare_device(self, context, device_key):
        self.prepared.append(device_key)
        if self.prepare_error is not None:
            raise self.prepare_error
        return True

    def probe_health(self, context, device_keys):
        self.probes.append(list(device_keys))
        self.probed.set()


@contextlib.contextmanager
def serving(conf, host, agent):
    api_fixture._register_messaging_opts(conf)
    transport = messaging.get_rpc_transport(conf, url='fake://')
    rpc.set_transport(transport)
    server = None
    if agent is not None:
        server = rpc.get_server(conf, agent_rpcapi.TOPIC, host, [agent])
        server.start()
    try:
        yield agent
    finally:
        if server is not None:
            server.stop()
            server.wait()
        rpc.set_transport(None)
        transport.cleanup()
