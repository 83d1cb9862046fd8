"""doc/source/deployment/kolla.rst and the Containerfile agree on logs: a
[DEFAULT]log_dir the doc's configurations set exists in the image and each
container the doc runs mounts a volume on it (oslo.log does not create the
directory: a service whose log_dir is missing stops at start).  And the
agent's configuration, as the doc lays it out, is one its privileged
helper (run as root) reads whole and trusts."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir, os.pardir))


def _read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read().replace('\\\n', ' ')


def test_every_log_dir_of_the_doc_is_in_the_image_and_mounted():
    doc = _read('doc', 'source', 'deployment', 'kolla.rst')
    log_dirs = set(re.findall(r'^\s*log_dir = (\S+)$', doc, re.M))
    assert log_dirs == {'/var/log/kolla/cyborg'}
    runs = [line for line in doc.splitlines()
            if line.strip().startswith('$ podman run -d')]
    assert len(runs) == 3
    [made] = [line for line in _read('Containerfile').splitlines()
              if 'useradd' in line]
    for log_dir in log_dirs:
        # Owned by the service's user, created with the state directory.
        assert re.search(r'install -d -o cyborg -g cyborg [^&]*%s'
                         % re.escape(log_dir), made), made
        for run in runs:
            assert re.search(r' -v \S+:%s ' % re.escape(log_dir), run), run


def _agent_config_json():
    """The agent's config.json of the doc."""
    doc = _read('doc', 'source', 'deployment', 'kolla.rst')
    blocks = re.findall(r'^\.\. code-block:: json\n\n((?:   .*\n|\n)+)', doc,
                        re.M)
    [config] = [json.loads(block) for block in blocks
                if '"cyborg-agent"' in block]
    assert config['command'] == 'cyborg-agent'
    return config


def _agent_helper_command():
    doc = _read('doc', 'source', 'deployment', 'kolla.rst')
    [command] = re.findall(r'^\s*helper_command = (.+)$', doc, re.M)
    return shlex.split(command)


def test_the_agents_helper_reads_what_the_agent_reads():
    """The agent reads cyborg.conf and the drop-ins of cyborg.conf.d; its
    privileged helper must read the same (a sysfs_root or state_path in
    a drop-in would otherwise differ between the two), and the image
    has that directory, root's."""
    argv = _agent_helper_command()
    assert argv[0] == 'privsep-helper'
    assert argv[1:] == ['--config-file', '/etc/cyborg/cyborg.conf',
                        '--config-dir', '/etc/cyborg/cyborg.conf.d']
    [made] = [line for line in _read('Containerfile').splitlines()
              if '/etc/cyborg/cyborg.conf.d' in line]
    assert re.search(r'install -d -m 0755 /etc/cyborg '
                     r'/etc/cyborg/cyborg\.conf\.d$', made.strip()), made


def test_the_agents_config_json_gives_root_its_cyborg_conf():
    """The agent runs as root and its privileged helper refuses a
    configuration file owned by anyone else or writable by others: the
    config.json of the doc must copy cyborg.conf as root's."""
    config = _agent_config_json()
    [conf] = [f for f in config['config_files']
              if f['dest'] == '/etc/cyborg/cyborg.conf']
    assert conf['owner'] in ('root', 'root:root'), conf
    assert not int(conf['perm'], 8) & 0o022, conf


_TRUSTED = '''
import sys
import cyborg.conf
from cyborg.agent import privileged
cyborg.conf.CONF(sys.argv[1:], project='cyborg', default_config_files=[],
                 default_config_dirs=[])
privileged._trusted_settings()
'''


@pytest.mark.skipif(os.geteuid() != 0,
                    reason='the helper checks owners only as root')
def test_the_helper_trusts_the_agents_files_as_the_doc_lays_them_out(
        tmp_path):
    """/etc/cyborg as config.json and the image leave it (cyborg.conf
    with config.json's owner and mode, cyborg.conf.d root's, 0755), read
    with the doc's helper_command: the helper's own check passes."""
    config = _agent_config_json()
    etc = tmp_path / 'etc' / 'cyborg'
    (etc / 'cyborg.conf.d').mkdir(parents=True)
    os.chmod(etc / 'cyborg.conf.d', 0o755)
    for copied in config['config_files']:
        dest = tmp_path / copied['dest'].lstrip('/')
        dest.write_text('[DEFAULT]\n')
        owner = copied['owner'].split(':')[0]
        uid = {'root': 0, 'cyborg': 42480}[owner]
        os.chown(dest, uid, uid)
        os.chmod(dest, int(copied['perm'], 8))
    argv = [arg.replace('/etc/cyborg', str(etc))
            for arg in _agent_helper_command()[1:]]
    done = subprocess.run([sys.executable, '-c', _TRUSTED, *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
