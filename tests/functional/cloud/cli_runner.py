"""Run ``openstack`` commands in one process, one per line of stdin.

Started with the python of a CLI plugin's own virtualenv (it imports
nothing of cyborg's), it reads JSON requests, one per line, and answers
each with one JSON line on stdout:

- ``{"argv": [...], "identity": "...", "service_token": null}``:
  ``openstack <argv>`` through
  python-openstackclient's own ``shell.main``, the code of the console
  script, with its output captured -> ``{"status", "stdout", "stderr",
  "seconds"}``.  A ``service_token`` is added as ``X-Service-Token`` to
  every request the command makes (no ``openstack`` option sends one,
  but Nova's requests carry one: this shows what a service could do).
  ``identity`` names who the auth options in ``argv`` make the caller.
- ``{"op": "commands"}``: the accelerator commands this virtualenv's
  plugins declare (entry point group ``openstack.accelerator.v2``) ->
  ``{"commands": [{"name", "value", "dist"}]}``.

One start-up (imports, plugin discovery) for every command instead of one
per command.
"""

import contextlib
import io
import json
import logging
import sys
import time
from importlib import metadata

from keystoneauth1 import session as ks_session
from openstackclient.common import clientmanager
from openstackclient import shell

GROUP = 'openstack.accelerator.v2'
SERVICE_TOKEN = {'value': None}
CALLER = {'value': None}
_request = ks_session.Session.request


def _request_with_service_token(self, url, method, **kwargs):
    if SERVICE_TOKEN['value']:
        headers = dict(kwargs.get('headers') or {})
        headers['X-Service-Token'] = SERVICE_TOKEN['value']
        kwargs['headers'] = headers
    return _request(self, url, method, **kwargs)


ks_session.Session.request = _request_with_service_token


def _forget_clients():
    """python-openstackclient keeps each plugin's client in a descriptor
    on the ClientManager class, made once per process: the first
    command's user would be every later command's.  Forget them when the
    caller changes, as a new process would (and keep them while it does
    not: no new token, no new version discovery)."""
    for cls in clientmanager.ClientManager.__mro__:
        for value in vars(cls).values():
            if hasattr(value, '_handle') and hasattr(value, 'factory'):
                value._handle = None


def run(argv, identity=None, service_token=None):
    caller = (identity, service_token)
    if caller != CALLER['value'] or identity is None:
        _forget_clients()
        CALLER['value'] = caller
    SERVICE_TOKEN['value'] = service_token
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = shell.main(list(argv))
        except SystemExit as e:     # argparse refusing the arguments
            status = e.code if isinstance(e.code, int) else 1
        except Exception as e:      # noqa: BLE001 (reported, not raised)
            status = 'crashed: %s: %s' % (type(e).__name__, str(e)[:300])
    # cliff adds a console handler on every run; drop them.
    logging.getLogger().handlers.clear()
    return {'status': status, 'stdout': out.getvalue(),
            'stderr': err.getvalue(),
            'seconds': round(time.monotonic() - started, 3)}


def commands():
    return {'commands': [
        {'name': ep.name, 'value': ep.value, 'dist': ep.dist.name}
        for ep in metadata.entry_points(group=GROUP)]}


def main():
    answer = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        if request.get('op') == 'commands':
            result = commands()
        else:
            result = run(request['argv'], request.get('identity'),
                         request.get('service_token'))
        answer.write(json.dumps(result) + '\n')
        answer.flush()


if __name__ == '__main__':
    main()
