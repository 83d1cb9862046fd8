"""cyborg: accelerator management, wire-compatible with OpenStack Cyborg.

Two process-wide choices are made here, before anything else is imported:

- In our long-running services (``SERVICES``), SIGTERM and SIGINT end the
  process at once with status 0 from the first moment, instead of killing
  it with the signal, until the service installs its own handling:
  importing a command takes a second or more, and a service manager that
  stops a service right after starting it must see a clean exit.  The
  one-shot commands (cyborg-dbsync, cyborg-status, cyborg-manage) die of
  the signal (status 143 for SIGTERM, 130 for SIGINT): a deployment tool
  must not take an interrupted schema upgrade or check for a success.
- oslo.service's threading backend is selected before any cyborg module
  imports oslo.messaging (whose server module resolves the oslo.service
  backend at import time and would otherwise load eventlet): no cyborg
  process or test runs eventlet.
- stevedore (which finds drivers and plugins for us, oslo.messaging and
  keystoneauth) writes no entry-point cache into the home directory
  (``~/.cache/python-entrypoints``): a cyborg process writes only under
  ``[DEFAULT]state_path``, so it runs with a read-only root filesystem.
"""

import os
import signal
import sys
import warnings


def exit_zero(_signum, _frame):
    """A SIGTERM/SIGINT handler for a process that has started nothing
    that needs stopping: it ends at once with status 0."""
    # Not SystemExit: a handler runs between any two bytecodes, finalizers
    # (__del__, weakref callbacks) included, and an exception raised there
    # is printed and ignored: the signal would be lost and the process run
    # on.  Nothing has been started yet that needs stopping.
    os._exit(0)


# The console scripts that run until stopped.
SERVICES = frozenset(('cyborg-api', 'cyborg-conductor', 'cyborg-agent',
                      'cyborg-aio', 'cyborg-wsgi-api'))

_script = os.path.basename(sys.argv[0] if sys.argv else '')
if _script in SERVICES:
    for _signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(_signum, exit_zero)
elif _script.startswith('cyborg-'):
    # A one-shot command: killed by the signal, whatever it was doing (not
    # KeyboardInterrupt, which a cleanup or a driver could swallow).
    for _signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(_signum, signal.SIG_DFL)

from oslo_service import backend as _oslo_service_backend  # noqa: E402

# eventlet is installed (oslo.service depends on it) and futurist imports it
# when present, without using it; its deprecation banner on every start
# would only mislead operators into thinking cyborg runs on eventlet.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')

try:
    _oslo_service_backend.init_backend(
        _oslo_service_backend.BackendType.THREADING)
except _oslo_service_backend.exceptions.BackendAlreadySelected:
    # Imported by a tool that loaded oslo.messaging first (the config and
    # policy generators): it runs no cyborg service, so it does not matter.
    pass

from stevedore import _cache as _stevedore_cache  # noqa: E402

# Reads of a cache someone else wrote still work; we only never write one.
_stevedore_cache._c._disable_caching = True
