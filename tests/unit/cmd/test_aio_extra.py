"""Placement (a whole service) and the clients come with the "aio"
extra only; every other command works without them, and cyborg-aio
says what to install, or which --port to take when its port is busy."""

import configparser
import importlib.metadata
import os
import socket
import subprocess
import sys

from tests.fixtures import processes

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                    os.pardir)

BLOCK_PLACEMENT = '''
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == 'placement' or name.startswith('placement.'):
            raise ModuleNotFoundError("No module named 'placement'",
                                      name='placement')
        return None

sys.meta_path.insert(0, Block())
'''


def _requirements(text):
    return {line.split('>')[0].split('=')[0].split('<')[0].strip().lower()
            for line in text.splitlines()
            if line.strip() and not line.strip().startswith('#')}


def test_placement_is_only_in_the_aio_extra():
    with open(os.path.join(ROOT, 'requirements.txt')) as f:
        assert 'openstack-placement' not in _requirements(f.read())
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, 'setup.cfg'))
    for extra in ('aio', 'demo'):
        wanted = _requirements(parser['extras'][extra])
        assert {'openstack-placement', 'python-openstackclient'} <= wanted
        # One CLI plugin: two register the same commands and which one
        # runs is the order Python lists them in (doc/source/clients.rst).
        assert 'python-cyborgclient' not in wanted


def test_the_scripts_install_what_they_use():
    with open(os.path.join(ROOT, 'tools', 'run-aio.sh')) as f:
        assert '.[aio]' in f.read()
    with open(os.path.join(ROOT, 'test-requirements.txt')) as f:
        assert 'openstack-placement' in _requirements(f.read())


def test_the_test_virtualenv_gets_one_cli_plugin():
    """tools/run-tests.sh installs test-requirements.txt into .venv, the
    virtualenv tools/run-aio.sh runs and whose openstack command the
    all-in-one's banner names: python-cyborgclient there too, and that
    command ran its accelerator commands, not python-openstackclient's
    (doc/source/clients.rst, "Two plugins, one command set")."""
    with open(os.path.join(ROOT, 'test-requirements.txt')) as f:
        wanted = _requirements(f.read())
    assert 'python-openstackclient' in wanted
    assert 'python-cyborgclient' not in wanted
    # And a .venv made while it was listed loses it at its next install.
    with open(os.path.join(ROOT, 'tools', 'run-tests.sh')) as f:
        assert 'uninstall -q -y python-cyborgclient' in f.read()


def test_each_accelerator_command_has_one_plugin_here():
    """The virtualenv these tests run in is the one tools/run-tests.sh
    made (or one like it): no command name is registered twice, so the
    one that runs is not left to the order Python lists them in."""
    registered = {}
    for entry_point in importlib.metadata.entry_points(
            group='openstack.accelerator.v2'):
        registered.setdefault(entry_point.name, set()).add(
            entry_point.dist.name)
    assert registered
    twice = {name: sorted(dists) for name, dists in registered.items()
             if len(dists) > 1}
    assert not twice


def test_services_start_without_placement_installed():
    child = BLOCK_PLACEMENT + '''
import cyborg.cmd.api, cyborg.cmd.conductor, cyborg.cmd.agent
import cyborg.cmd.dbsync, cyborg.cmd.status, cyborg.wsgi.api
import cyborg.conductor.placement_sync, cyborg.placement.client
try:
    import placement
except ImportError:
    print('imports ok')
'''
    done = subprocess.run([sys.executable, '-c', child], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == 'imports ok'


def test_aio_without_placement_names_the_extra(tmp_path):
    child = BLOCK_PLACEMENT + '''
from cyborg.cmd import aio
aio.main(sys.argv[1:])
'''
    done = subprocess.run(
        [sys.executable, '-c', child, '--port', str(processes.free_port()),
         '--state-dir', str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert '".[aio]"' in done.stderr, done.stderr
    assert 'Traceback' not in done.stderr


def test_aio_on_a_busy_port_suggests_another(tmp_path):
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [os.path.join(sys.prefix, 'bin', 'cyborg-aio'), '--port',
             str(port), '--state-dir', str(tmp_path)],
            capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert 'port %d on 127.0.0.1 is taken' % port in done.stderr
    assert '--port %d' % (port + 1) in done.stderr
    assert 'Traceback' not in done.stderr


def test_api_on_a_busy_port_says_which_option(tmp_path):
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        conf = tmp_path / 'c.conf'
        conf.write_text('[api]\nhost_ip = 127.0.0.1\nport = %d\n'
                        'auth_strategy = noauth\n' % port)
        done = subprocess.run(
            [os.path.join(sys.prefix, 'bin', 'cyborg-api'), '--config-file',
             str(conf)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert 'set another [api]port' in output
    assert 'Traceback' not in output


def test_the_banner_names_an_openstack_command_that_exists(monkeypatch):
    from cyborg.cmd import aio
    monkeypatch.setenv('PATH', '/usr/bin:/bin')
    command = aio.openstack_command()
    # The client the "aio" extra installed, even off the PATH.
    assert os.path.isabs(command) and os.access(command, os.X_OK)
    assert command in aio.banner('http://127.0.0.1:1', 'http://p', '/s')
    monkeypatch.setenv('PATH', os.path.dirname(command))
    assert aio.openstack_command() == 'openstack'


def test_a_second_aio_on_the_same_state_dir_is_refused(tmp_path):
    """Two all-in-ones on one set of databases would each fail the
    other's binds at start-up: the second one says who has the state
    directory and starts nothing."""
    holder = subprocess.Popen(
        [sys.executable, '-c', 'import sys, time\n'
         'from cyborg.cmd import aio\n'
         'aio.lock_state_dir(sys.argv[1])\n'
         'print("locked", flush=True)\n'
         'time.sleep(60)\n', str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'locked'
        done = subprocess.run(
            [os.path.join(sys.prefix, 'bin', 'cyborg-aio'), '--port',
             str(processes.free_port()), '--state-dir', str(tmp_path)],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 1
        assert 'another cyborg-aio (pid %d) is using %s' % (
            holder.pid, tmp_path) in done.stderr, done.stderr
        assert 'Traceback' not in done.stderr
        assert not (tmp_path / 'cyborg.sqlite').exists()
    finally:
        holder.kill()
        holder.wait()
    # Free again once the holder is gone.
    from cyborg.cmd import aio
    lock = aio.lock_state_dir(str(tmp_path))
    aio._HELD_LOCKS.remove(lock)
    os.close(lock)


def test_an_unusable_state_dir_is_one_line(tmp_path):
    """A file, a path no directory can be made at, a path under a file:
    one line naming the directory, no traceback, nothing started."""
    a_file = tmp_path / 'a-file'
    a_file.write_text('')
    for state_dir, why in ((a_file, 'not a directory'),
                           (a_file / 'sub', 'Not a directory'),
                           ('/proc/cyborg-aio-state', None)):
        done = subprocess.run(
            [os.path.join(sys.prefix, 'bin', 'cyborg-aio'), '--port',
             str(processes.free_port()), '--state-dir', str(state_dir)],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stderr
        assert 'Traceback' not in done.stderr, done.stderr
        line, = done.stderr.splitlines()
        assert line.startswith(
            'cyborg-aio cannot start: the state directory %s is not usable'
            % state_dir), line
        assert why is None or '(%s)' % why in line, line
