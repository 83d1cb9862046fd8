"""The two ``openstack accelerator`` CLI plugins, each in its own cached
virtualenv, driven through ``cli_runner.py`` (one process per plugin).

Both register the same command names in the same entry point group, so in
one virtualenv one would shadow the other:

- ``osc``: python-openstackclient's own accelerator commands (built on
  openstacksdk; since python-openstackclient 10.4.0);
- ``cyborgclient``: python-cyborgclient's, beside the last
  python-openstackclient without commands of its own (10.3.0), so that
  every ``openstack accelerator`` command is cyborgclient's.

Both also hold this project (installed in place, without its
dependencies) for the commands it ships itself (``cyborg_osc``, e.g.
``accelerator arq allocate``), which come beside either plugin's.

How a command authenticates: with ``catalog=True`` as a user would, by
password, the accelerator endpoint (and Nova's and Glance's) found in the
catalog of the cloud's region.  Otherwise with a real token of the same
user issued once (``--os-auth-type admin_token --os-token ...
--os-endpoint <api>``): the same command code, the same identity and
policy checks, without a Keystone login per command (a login costs about
a second on a loaded machine, the command itself tens of milliseconds).
Every test logs in through the catalog at least once.
"""

import json
import os
import pathlib
import subprocess
import time

from tests.fixtures import keystone as keystone_fixture
from tests.fixtures import venvs

PLUGINS = {
    'osc': ('python-openstackclient', ['python-openstackclient==10.5.0']),
    'cyborgclient': ('python-cyborgclient',
                     ['python-openstackclient==10.3.0',
                      'python-cyborgclient==3.0.0']),
}
RUNNER = pathlib.Path(__file__).with_name('cli_runner.py')
# This project: its own accelerator commands, in every CLI virtualenv.
REPO = pathlib.Path(__file__).resolve().parents[3]
OWN_DIST = 'cyborg'


class Result:
    def __init__(self, argv, answer):
        self.argv = argv
        self.status = answer['status']
        self.stdout = answer['stdout']
        self.stderr = answer['stderr']
        self.seconds = answer['seconds']

    @property
    def output(self):
        return self.stdout + self.stderr

    def json(self):
        assert self.status == 0, self
        return json.loads(self.stdout)

    def __repr__(self):
        return 'openstack %s -> %s\n%s' % (' '.join(self.argv), self.status,
                                           self.output[-3000:])


class Cli:
    """``openstack`` of one plugin's virtualenv, as a user of the cloud."""

    def __init__(self, plugin, cloud, keystone):
        self.plugin = plugin
        self.dist, requirements = PLUGINS[plugin]
        self.venv = venvs.cached_venv(plugin, requirements, editable=[REPO])
        self.cloud = cloud
        self.keystone = keystone
        self.seconds = []
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}
        self._proc = subprocess.Popen(
            [venvs.python(self.venv), str(RUNNER)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env,
            cwd=str(cloud.tmp))

    def _ask(self, request):
        self._proc.stdin.write(json.dumps(request) + '\n')
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        assert line, 'the CLI runner of %s died' % self.plugin
        return json.loads(line)

    def commands(self):
        """{command: entry point} of the accelerator commands."""
        found = self._ask({'op': 'commands'})['commands']
        return {c['name'].replace('_', ' '): c for c in found}

    def auth_args(self, user, scope=None):
        scope = scope or keystone_fixture.USERS[user][0][0]
        return ['--os-auth-url', self.keystone.auth_url,
                '--os-identity-api-version', '3',
                '--os-username', user,
                '--os-password', keystone_fixture.PASSWORD,
                '--os-user-domain-id', keystone_fixture.DOMAIN,
                '--os-project-name', scope,
                '--os-project-domain-id', keystone_fixture.DOMAIN,
                '--os-region-name', self.cloud.region,
                '--os-interface', 'public']

    def token_args(self, user):
        return ['--os-auth-type', 'admin_token',
                '--os-token', self.keystone.token(user),
                '--os-endpoint', self.cloud.url()]

    def __call__(self, *args, user='demo-admin', service_token=None,
                 catalog=False):
        auth = self.auth_args(user) if catalog else self.token_args(user)
        argv = auth + ['accelerator'] + list(args)
        started = time.monotonic()
        result = Result(args, self._ask({
            'argv': argv, 'identity': '%s %s' % (user, catalog),
            'service_token': service_token}))
        self.seconds.append(time.monotonic() - started)
        return result

    def ok(self, *args, **kwargs):
        """A command that must succeed; its JSON output when it has one."""
        result = self(*args, **kwargs)
        assert result.status == 0, result
        text = result.stdout.strip()
        return json.loads(text) if text.startswith(('{', '[')) else text

    def fails(self, *args, **kwargs):
        """A command that must fail; its output."""
        result = self(*args, **kwargs)
        assert result.status != 0, result
        return result.output

    def close(self):
        self._proc.stdin.close()
        self._proc.wait(30)
