"""Where configuration comes from: the command line, else
OS_CYBORG_CONFIG, else /etc/cyborg only; never the home directory or the
working directory, which oslo.config would search by default."""

import json
import os
import subprocess
import sys

import pytest

import cyborg.conf

CHILD = '''
import json, sys
import cyborg.conf
from cyborg.common import service
conf = service.prepare(sys.argv[1:], prog='cyborg-test')
print(json.dumps({'host': conf.host, 'files': list(conf.config_file)}))
'''


def _prepare(tmp_path, args=(), env=None):
    home = tmp_path / 'home'
    (home / '.cyborg').mkdir(parents=True, exist_ok=True)
    # Where oslo.config's default search would look first.
    for path in (home / '.cyborg' / 'cyborg.conf', home / 'cyborg.conf',
                 tmp_path / 'cyborg.conf'):
        path.write_text('[DEFAULT]\nhost = from-%s\n' % path.parent.name)
    environ = dict(os.environ, HOME=str(home))
    environ.pop(cyborg.conf.CONFIG_ENV, None)
    environ.pop(cyborg.conf.CONFIG_DIR_ENV, None)
    environ.update(env or {})
    done = subprocess.run([sys.executable, '-c', CHILD, *args],
                          capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=environ)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_home_and_working_directory_are_never_read(tmp_path):
    found = _prepare(tmp_path)
    assert not found['host'].startswith('from-')
    assert all(f.startswith('/etc/cyborg/') for f in found['files'])


def test_os_cyborg_config_names_the_files(tmp_path):
    mine = tmp_path / 'mine.conf'
    mine.write_text('[DEFAULT]\nhost = from-env\n')
    found = _prepare(tmp_path, env={cyborg.conf.CONFIG_ENV: str(mine)})
    assert found == {'host': 'from-env', 'files': [str(mine)]}


def test_the_command_line_wins(tmp_path):
    mine = tmp_path / 'mine.conf'
    mine.write_text('[DEFAULT]\nhost = from-argv\n')
    other = tmp_path / 'other.conf'
    other.write_text('[DEFAULT]\nhost = from-env\n')
    found = _prepare(tmp_path, ['--config-file', str(mine)],
                     env={cyborg.conf.CONFIG_ENV: str(other)})
    assert found['host'] == 'from-argv'


def test_defaults_without_environment(monkeypatch):
    monkeypatch.setattr(cyborg.conf, 'CONFIG_DIR', '/nonexistent/cyborg')
    assert cyborg.conf.default_config_files({}) == []
    assert cyborg.conf.default_config_dirs({}) == []
    env = {cyborg.conf.CONFIG_ENV: ' /a.conf, /b.conf ,'}
    assert cyborg.conf.default_config_files(env) == ['/a.conf', '/b.conf']
    assert cyborg.conf.default_config_dirs(env) == []


@pytest.mark.parametrize('script', ['cyborg-status', 'cyborg-dbsync'])
def test_tools_do_not_read_the_home_directory(tmp_path, script):
    home = tmp_path / 'home'
    (home / '.cyborg').mkdir(parents=True)
    # A file that would break parsing if anything read it.
    (home / '.cyborg' / 'cyborg.conf').write_text('this is not ini\n')
    (home / 'cyborg.conf').write_text('this is not ini\n')
    db = tmp_path / 'c.sqlite'
    conf = tmp_path / 'c.conf'
    conf.write_text('[database]\nconnection = sqlite:///%s\n' % db)
    env = dict(os.environ, HOME=str(home))
    env.pop(cyborg.conf.CONFIG_ENV, None)
    args = (['upgrade', 'check'] if script == 'cyborg-status'
            else ['version'])
    done = subprocess.run([os.path.join(sys.prefix, 'bin', script),
                           '--config-file', str(conf), *args],
                          capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=env)
    # cyborg-status: 2 = a failed check (the empty database), not 255.
    assert done.returncode in (0, 2), done.stdout + done.stderr
    assert 'not ini' not in done.stdout + done.stderr


def test_os_cyborg_config_dir_moves_the_directory(tmp_path):
    etc = tmp_path / 'etc-cyborg'
    (etc / 'cyborg.conf.d').mkdir(parents=True)
    (etc / 'cyborg.conf').write_text('[DEFAULT]\nhost = from-dir\n')
    (etc / 'cyborg.conf.d' / 'zz.conf').write_text(
        '[DEFAULT]\nhost = from-drop-in\n')
    found = _prepare(tmp_path, env={cyborg.conf.CONFIG_DIR_ENV: str(etc)})
    assert found == {'host': 'from-drop-in',
                     'files': [str(etc / 'cyborg.conf')]}


@pytest.mark.parametrize('where', ['--config-file', '--config-file=',
                                   '--config-dir'])
def test_config_options_after_the_subcommand_count_too(tmp_path, where):
    # "cyborg-dbsync upgrade --config-file ..." as operators type it: the
    # file named is read (its database is the one upgraded, shown and
    # checked), as with the option first.
    from cyborg.db import migration

    db = tmp_path / 'c.sqlite'
    conf_dir = tmp_path / 'etc'
    conf_dir.mkdir()
    conf = conf_dir / 'c.conf'
    conf.write_text('[database]\nconnection = sqlite:///%s\n' % db)
    located = {'--config-file': ['--config-file', str(conf)],
               '--config-file=': ['--config-file=%s' % conf],
               '--config-dir': ['--config-dir', str(conf_dir)]}[where]
    env = dict(os.environ)
    env.pop(cyborg.conf.CONFIG_ENV, None)
    env.pop(cyborg.conf.CONFIG_DIR_ENV, None)

    def run(script, *args):
        done = subprocess.run(
            [os.path.join(sys.prefix, 'bin', script), *args, *located],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
            env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run('cyborg-dbsync', 'upgrade')
    assert run('cyborg-dbsync', 'version').strip() == migration.head()
    assert 'Upgrade Check Results' in run('cyborg-status', 'upgrade',
                                          'check')
