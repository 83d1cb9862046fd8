"""Every helper_command the documentation gives has the agent's
privileged helper read what the agent reads: cyborg.conf and the drop-ins
of the cyborg.conf.d beside it.  A helper reading cyborg.conf alone would
act on another [agent]sysfs_root or [DEFAULT]state_path than the agent's
as soon as a drop-in sets one.  (devstack's is checked on what its
phases write: tests/unit/devstack/test_plugin.py.)"""

import os
import re
import shlex

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                    os.pardir, os.pardir))
DOCS = ['doc/source/install.rst', 'doc/source/deployment/kolla.rst']


def _helper_commands(path):
    with open(os.path.join(ROOT, path)) as f:
        return re.findall(r'^\s*helper_command = (.+)$', f.read(), re.M)


@pytest.mark.parametrize('path', DOCS)
def test_the_helper_reads_cyborg_conf_and_its_drop_ins(path):
    commands = _helper_commands(path)
    assert commands, path
    for command in commands:
        argv = shlex.split(command)
        assert os.path.basename(argv[argv[0] == 'sudo']) == \
            'privsep-helper', command
        options = list(zip(argv, argv[1:]))
        [conf] = [v for k, v in options if k == '--config-file']
        [conf_d] = [v for k, v in options if k == '--config-dir']
        assert os.path.basename(conf) == 'cyborg.conf', command
        assert conf_d == os.path.join(os.path.dirname(conf),
                                      'cyborg.conf.d'), command
