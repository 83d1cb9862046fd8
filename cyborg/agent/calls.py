"""Calls into a driver on a thread of their own.

A driver's call that never returns (NVML stuck on a wedged GPU, a sysfs
read of a device that stopped answering) must hold that driver only, not
the agent thread that asked: the health monitor's checks, the reporter's
discovery.  ``DriverCall`` runs one call on a daemon thread (it never
holds up the agent's exit) and lets its caller wait for it until a
deadline; whoever keeps it decides what a call still running means, and
starts no second one for the driver meanwhile, so that a hung driver
costs one thread, not one per round.
"""

import threading
import time


class DriverCall:
    """``function()`` on a daemon thread named after the driver and
    ``kind``; ``value`` or ``error`` once it returned."""

    def __init__(self, driver_name, kind, function):
        self.kind = kind
        self.started = time.monotonic()
        self.value = None
        self.error = None
        self._done = threading.Event()
        threading.Thread(target=self._run, args=(function,),
                         name=f'cyborg-agent-{kind}-{driver_name}',
                         daemon=True).start()

    def _run(self, function):
        try:
            self.value = function()
        except Exception as exc:
            self.error = exc
        finally:
            self._done.set()

    def done(self):
        return self._done.is_set()

    def wait(self, deadline):
        """Wait until it returns or monotonic ``deadline``; whether it
        returned."""
        return self._done.wait(max(0.0, deadline - time.monotonic()))
