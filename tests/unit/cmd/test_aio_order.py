"""The all-in-one's services in start order, which is also the order of
its shutdown, reversed (each service stops once those after it drained):
the conductor's background binds drain while the agent's RPC server and
Placement still answer them, and the agent reports only to a conductor
that listens."""

import subprocess
import sys

from tests.fixtures import processes

CHILD = '''
import os, sys
from cyborg.cmd import aio
conf, state_dir = aio.parse(sys.argv[1:])
services, _, _ = aio.build_services(conf, state_dir)
print('\\n'.join(str(s) for s in services), flush=True)
os._exit(0)
'''


def test_background_binds_drain_before_the_agent_and_placement_stop(
        tmp_path):
    done = subprocess.run(
        [sys.executable, '-c', CHILD, '--port', str(processes.free_port()),
         '--state-dir', str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    order = done.stdout.splitlines()

    def at(prefix):
        found = [i for i, name in enumerate(order)
                 if name.startswith(prefix)]
        assert len(found) == 1, (prefix, order)
        return found[0]

    assert at('embedded Placement') == 0
    assert at('RPC server cyborg-agent.') < at('background binds')
    assert at('background binds') < at('RPC server cyborg-conductor.')
    # Stopped first, the conductor's RPC server takes no call once the
    # stop began; started after them, it does not hold up the periodic
    # jobs while the broker is away.
    assert at('periodic jobs') < at('RPC server cyborg-conductor.')
    assert at('RPC server cyborg-conductor.') < at('inventory reporter')
    assert at('inventory reporter') < at('health monitor')
    assert at('API server') == len(order) - 1
