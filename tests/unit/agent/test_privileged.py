"""The privileged helper takes names from the agent, never paths it would
trust: which tool (found in its own configured directories), which PCI
address, which bitstream (a regular file in its own state directory),
which mdev (in its own sysfs tree, written only under ``devices`` and
never through a link).  The functions run in process, reading the test's
configuration as the daemon reads its own; only the tests of who owns
that configuration (and of the real privsep-helper) need root."""

import os
import re
import subprocess
import sys
import uuid

import pytest
from oslo_config import cfg

import cyborg.conf
from cyborg.common import exception
from tests.fixtures import privsep as fake_privsep
from tests.fixtures import sysfs as fake_sysfs

GPU = '0000:c1:00.0'
TYPE = 'nvidia-223'
FPGA = '0000:d8:00.0'
# What the tool is given for the bitstream: the helper's open file.
BY_DESCRIPTOR = r'/proc/self/fd/\d+'
# A user other than root (a uid: no account needed).
OTHER = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0,
                             reason='the helper checks owners only as root')


@pytest.fixture
def privileged(conf, tmp_path):
    """The privileged functions in process, on a fake tree with one GPU
    offering ``TYPE``, with fake vendor tools; the tools' log is
    ``tmp_path/tool.log``."""
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(GPU, '0x10de', '0x1eb8', '0x030200', driver='nvidia')
    tree.add_mdev_type(GPU, TYPE, 'GRID T4-2B', 8)
    conf.set_override('sysfs_root', tree.root, group='agent')
    conf.set_override('state_path', str(tmp_path / 'state'))
    os.makedirs(conf.state_path)
    fake_privsep.fake_fpga_tools(conf, tmp_path / 'bin',
                                 tmp_path / 'tool.log')
    with fake_privsep.in_process(conf) as module:
        module.tree = tree
        yield module


def _victim(tmp_path, text='root:$6$secret:19000:0:99999:7:::\n'):
    victim = tmp_path / 'etc-shadow'
    victim.write_text(text)
    return victim


def _image(conf, name='cyborg-bitstream-1.bin'):
    path = os.path.join(conf.state_path, name)
    with open(path, 'wb') as f:
        f.write(b'bits')
    return path


# -- FPGA tools ----------------------------------------------------------

def test_the_tool_is_named_and_found_by_the_helper_alone(
        privileged, conf, tmp_path, monkeypatch):
    """Any program called fpgaconf or xbutil, anywhere, ran as root with
    the caller's arguments; now the caller names a tool and the helper
    runs its own, from [cyborg_sys_admin]fpga_tool_dirs, whatever the
    caller's PATH says."""
    attacker = tmp_path / 'attacker'
    attacker.mkdir()
    marker = tmp_path / 'ran-as-root'
    for name in ('fpgaconf', 'xbutil'):
        evil = attacker / name
        evil.write_text(f'#!/bin/sh\nid > {marker}\n')
        evil.chmod(0o755)
    monkeypatch.setenv('PATH', f"{attacker}:{os.environ['PATH']}")
    image = _image(conf)
    for tool in (str(attacker / 'fpgaconf'), 'xbutil --help', 'rm', None):
        with pytest.raises(exception.Invalid, match='not an FPGA tool'):
            privileged.run_fpga_tool(tool, FPGA, image)
    privileged.run_fpga_tool('fpgaconf', FPGA, image)
    privileged.run_fpga_tool('xbutil', '0000:d8:00.1', image)
    assert not marker.exists()
    fpgaconf, xbutil = (tmp_path / 'tool.log').read_text().splitlines()
    assert re.fullmatch(
        f'fpgaconf --segment 0x0000 --bus 0xd8 --device 0x00 --function '
        f'0x0 {BY_DESCRIPTOR}', fpgaconf)
    assert re.fullmatch(
        f'xbutil program --device 0000:d8:00.1 --user {BY_DESCRIPTOR}',
        xbutil)
    assert (tmp_path / 'tool.log.read').read_bytes() == b'bitsbits'


def test_a_tool_missing_from_the_configured_directories_is_refused(
        privileged, conf, tmp_path):
    conf.set_override('fpga_tool_dirs', [str(tmp_path / 'none'), 'bin'],
                      group='cyborg_sys_admin')
    with pytest.raises(exception.ResourceNotFound,
                       match=r'fpgaconf could not be found in .*fpga_tool_'
                             r'dirs \(.*none\); the card was not touched'):
        privileged.run_fpga_tool('fpgaconf', FPGA, _image(conf))


@pytest.mark.parametrize('address', [
    '-h', '0000:d8:00.0 --force', '0000:d8:00.0\n', '0000:D8:00.0',
    '../0000:d8:00.0', 42])
def test_the_address_must_be_a_pci_address(privileged, conf, tmp_path,
                                           address):
    with pytest.raises(exception.Invalid, match='bad PCI address'):
        privileged.run_fpga_tool('fpgaconf', address, _image(conf))
    assert not (tmp_path / 'tool.log').exists()


def _outside(conf, tmp_path):
    return str(tmp_path / 'elsewhere.bin')


def _link(conf, tmp_path):
    path = os.path.join(conf.state_path, 'cyborg-bitstream-link.bin')
    os.symlink(_victim(tmp_path), path)
    return path


def _hard_link(conf, tmp_path):
    path = os.path.join(conf.state_path, 'cyborg-bitstream-hard.bin')
    os.link(_victim(tmp_path), path)
    return path


def _directory(conf, tmp_path):
    path = os.path.join(conf.state_path, 'cyborg-bitstream-dir.bin')
    os.mkdir(path)
    return path


def _dashed(conf, tmp_path):
    return _image(conf, '-rf')


@pytest.mark.parametrize('bitstream', [
    _outside, _link, _hard_link, _directory, _dashed,
    lambda conf, tmp_path: os.path.relpath(_image(conf)),
    lambda conf, tmp_path: '--help',
    lambda conf, tmp_path: os.path.join(conf.state_path, 'missing.bin'),
    lambda conf, tmp_path: os.path.join(conf.state_path, '..',
                                        'elsewhere.bin'),
])
def test_the_bitstream_must_be_a_file_in_the_state_directory(
        privileged, conf, tmp_path, bitstream):
    """A file anywhere (through a link, a second name, a path that
    climbs out) reached the vendor tool running as root."""
    (tmp_path / 'elsewhere.bin').write_bytes(b'not the agent\'s')
    path = bitstream(conf, tmp_path)
    with pytest.raises(exception.Invalid, match='bitstream'):
        privileged.run_fpga_tool('fpgaconf', FPGA, path)
    assert not (tmp_path / 'tool.log').exists()


def test_a_bitstream_reached_through_a_link_to_the_state_directory(
        privileged, conf, tmp_path):
    """The state directory named through a link (as a container's volume
    may be) is still the state directory."""
    image = _image(conf)
    alias = tmp_path / 'alias'
    os.symlink(conf.state_path, alias)
    privileged.run_fpga_tool('fpgaconf', FPGA,
                             str(alias / os.path.basename(image)))
    assert re.fullmatch(BY_DESCRIPTOR,
                        (tmp_path / 'tool.log').read_text().split()[-1])
    assert (tmp_path / 'tool.log.read').read_bytes() == b'bits'


def _racing_tool(conf, tmp_path, image, victim):
    """The fake fpgaconf, run once the helper has checked ``image``: the
    agent (which owns the state directory) swaps the name for a link to
    ``victim`` first, then the tool reads what it was given."""
    script = tmp_path / 'bin' / 'fpgaconf'
    script.write_text(
        '#!/bin/sh\n'
        f'rm -f {image} && ln -s {victim} {image}\n'
        'cat "$(eval echo \\${$#})" >> ' f'{tmp_path / "tool.log.read"}\n')


def test_the_tool_reads_the_file_the_helper_checked(privileged, conf,
                                                     tmp_path):
    """The helper checked the file by its name, then the tool (as root)
    opened that name again: swapped in between for a link, the tool read
    any file of the host (or programmed the card with it).  It reads the
    file the helper opened and checked, whatever became of its name."""
    victim = _victim(tmp_path)
    image = _image(conf)
    _racing_tool(conf, tmp_path, image, victim)
    privileged.run_fpga_tool('fpgaconf', FPGA, image)
    assert os.path.islink(image)        # the swap did happen
    assert (tmp_path / 'tool.log.read').read_bytes() == b'bits'


def test_a_tool_that_cannot_start_is_a_refusal(privileged, conf, tmp_path):
    """A tool found but not startable (a broken interpreter line, a
    binary of another architecture) never touched the card: a refusal
    that says so, not a failure of the tool."""
    script = tmp_path / 'bin' / 'fpgaconf'
    script.write_text('#!/nonexistent/interpreter\n')
    with pytest.raises(exception.Conflict,
                       match='fpgaconf could not be started .*the card was '
                             'not touched'):
        privileged.run_fpga_tool('fpgaconf', FPGA, _image(conf))


def test_a_tool_that_fails_says_how(privileged, conf, tmp_path):
    script = tmp_path / 'bin' / 'xbutil'
    script.write_text('#!/bin/sh\necho "ERROR: bad xclbin" >&2\nexit 2\n')
    with pytest.raises(exception.FPGAToolFailed,
                       match='xbutil failed: exit status 2: ERROR: bad '
                             'xclbin'):
        privileged.run_fpga_tool('xbutil', FPGA, _image(conf))


# -- mdevs ---------------------------------------------------------------

def test_the_sysfs_tree_is_the_helper_s_own(privileged, tmp_path):
    """The caller named the root of the tree the helper wrote in: a tree
    of its own making, whose create and remove files were links to any
    file, had root overwrite that file."""
    victim = _victim(tmp_path)
    crafted = tmp_path / 'crafted'
    mdev = str(uuid.uuid4())
    types = crafted / 'bus/pci/devices' / GPU / 'mdev_supported_types' / TYPE
    types.mkdir(parents=True)
    os.symlink(victim, types / 'create')
    (crafted / 'bus/mdev/devices' / mdev).mkdir(parents=True)
    os.symlink(victim, crafted / 'bus/mdev/devices' / mdev / 'remove')
    with pytest.raises(TypeError):
        privileged.create_mdev(str(crafted), GPU, TYPE, mdev)
    with pytest.raises(exception.Invalid, match='bad PCI address'):
        privileged.remove_mdev(str(crafted), mdev)
    assert victim.read_text().startswith('root:')
    privileged.create_mdev(GPU, TYPE, mdev)
    create = os.path.join(privileged.tree.device_path(GPU),
                          'mdev_supported_types', TYPE, 'create')
    with open(create) as f:
        assert f.read() == mdev


def test_a_create_file_that_is_a_link_is_not_written(privileged, tmp_path):
    victim = _victim(tmp_path)
    create = os.path.join(privileged.tree.device_path(GPU),
                          'mdev_supported_types', TYPE, 'create')
    os.unlink(create)
    os.symlink(victim, create)
    with pytest.raises(exception.Invalid, match='cannot be written'):
        privileged.create_mdev(GPU, TYPE, str(uuid.uuid4()))
    assert victim.read_text().startswith('root:')


def test_a_device_link_leading_out_of_devices_is_not_written(privileged,
                                                              tmp_path):
    """``bus/pci/devices/<address>`` is a link into ``devices``; one to
    anywhere else gets nothing written, even to a file called create."""
    address = '0000:c2:00.0'
    elsewhere = tmp_path / 'elsewhere'
    types = elsewhere / 'mdev_supported_types' / TYPE
    types.mkdir(parents=True)
    (types / 'create').write_text('untouched\n')
    os.symlink(elsewhere, os.path.join(privileged.tree.root, 'bus', 'pci',
                                       'devices', address))
    with pytest.raises(exception.Invalid, match='not a device under'):
        privileged.create_mdev(address, TYPE, str(uuid.uuid4()))
    assert (types / 'create').read_text() == 'untouched\n'


def test_a_remove_file_that_is_a_link_is_not_written(privileged, tmp_path):
    victim = _victim(tmp_path, '0\n')
    mdev = str(uuid.uuid4())
    privileged.tree.add_mdev(GPU, mdev, TYPE)
    remove = os.path.join(privileged.tree.device_path(GPU), mdev, 'remove')
    if os.path.lexists(remove):
        os.unlink(remove)
    os.symlink(victim, remove)
    with pytest.raises(exception.Invalid, match='cannot be written'):
        privileged.remove_mdev(GPU, mdev)
    assert victim.read_text() == '0\n'


def test_an_mdev_link_leading_out_of_devices_is_not_written(privileged,
                                                             tmp_path):
    mdev = str(uuid.uuid4())
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    (elsewhere / 'remove').write_text('0\n')
    os.symlink(elsewhere, os.path.join(privileged.tree.root, 'bus', 'mdev',
                                       'devices', mdev))
    with pytest.raises(exception.Invalid, match='not a device under'):
        privileged.remove_mdev(GPU, mdev)
    assert (elsewhere / 'remove').read_text() == '0\n'


def test_a_removed_mdev_is_written_and_a_missing_one_is_not(privileged):
    mdev = str(uuid.uuid4())
    privileged.tree.add_mdev(GPU, mdev, TYPE)
    assert privileged.remove_mdev(GPU, mdev, TYPE) is True
    with open(os.path.join(privileged.tree.device_path(GPU), mdev,
                           'remove')) as f:
        assert f.read() == '1'
    assert privileged.remove_mdev(GPU, str(uuid.uuid4())) is False


@pytest.mark.parametrize('parent, mdev_type', [
    ('0000:c2:00.0', None), ('0000:c2:00.0', TYPE), (GPU, 'nvidia-224')])
def test_an_mdev_of_another_parent_or_type_is_not_removed(
        privileged, parent, mdev_type):
    """The caller named the parent, but only the uuid was used: a uuid of
    another GPU's vGPU (a stale or crossed handle) removed it from under
    the instance using it."""
    privileged.tree.add_pci('0000:c2:00.0', '0x10de', '0x1eb8', '0x030200',
                            driver='nvidia')
    privileged.tree.add_mdev_type('0000:c2:00.0', TYPE, 'GRID T4-2B', 8)
    mdev = str(uuid.uuid4())
    privileged.tree.add_mdev(GPU, mdev, TYPE)
    with pytest.raises(exception.Conflict,
                       match=f'mdev {mdev} is of type {TYPE} on {GPU}, '
                             f'not .*on {parent}; it was not removed'):
        privileged.remove_mdev(parent, mdev, mdev_type)
    with open(os.path.join(privileged.tree.device_path(GPU), mdev,
                           'remove')) as f:
        assert '1' not in f.read()


@pytest.mark.parametrize('parent, mdev_type, mdev_uuid, what', [
    ('../../..', TYPE, '00000000-0000-0000-0000-000000000000', 'address'),
    (GPU, '../../../../etc', '00000000-0000-0000-0000-000000000000', 'type'),
    (GPU, TYPE, '../../../etc/passwd', 'uuid'),
    (GPU, TYPE, '00000000-0000-0000-0000-00000000000G', 'uuid'),
])
def test_names_are_checked_before_they_make_a_path(
        privileged, parent, mdev_type, mdev_uuid, what):
    with pytest.raises(exception.Invalid, match=f'bad .*{what}'):
        privileged.create_mdev(parent, mdev_type, mdev_uuid)
    if what == 'uuid':
        with pytest.raises(exception.Invalid, match='bad mdev uuid'):
            privileged.remove_mdev(parent, mdev_uuid)
    if what == 'address':
        with pytest.raises(exception.Invalid, match='bad PCI address'):
            privileged.remove_mdev(parent, mdev_uuid)


_THROUGH_THE_DAEMON = '''
import sys
import cyborg.conf
from cyborg.agent import privileged
cyborg.conf.CONF(['--config-file', sys.argv[1]], project='cyborg')
privileged.create_mdev(sys.argv[2], sys.argv[3], sys.argv[4])
privileged.run_fpga_tool('fpgaconf', sys.argv[2], sys.argv[5])
'''


@pytest.mark.skipif(os.geteuid() != 0,
                    reason='privsep-helper keeps capabilities: root only')
@pytest.mark.parametrize('layout', ['trusted', 'writable file',
                                    'writable directory'])
def test_the_real_helper_reads_its_own_configuration(conf, tmp_path,
                                                     layout):
    """Through a real privsep daemon (privsep-helper, started as the
    agent starts it, by an agent whose own options differ): the tree,
    the state directory and the tool directories are those of the
    configuration file the helper was started with, not the agent's.
    That file must be root's alone, and so must the directory it is in:
    the sudoers rule cannot pin the --config-file an agent starts the
    helper with, and a file the agent (or anyone but root) may write or
    replace named tools the helper ran as root."""
    trusted = layout == 'trusted'
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(GPU, '0x10de', '0x1eb8', '0x030200', driver='nvidia')
    tree.add_mdev_type(GPU, TYPE, 'GRID T4-2B', 8)
    state = tmp_path / 'state'
    state.mkdir()
    image = state / 'cyborg-bitstream-1.bin'
    image.write_bytes(b'bits')
    log = tmp_path / 'tool.log'
    fake_privsep.fake_fpga_tools(conf, tmp_path / 'bin', log)
    helper = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
    daemon_conf = tmp_path / 'daemon.conf'
    if layout == 'writable directory':
        # Root's file, in a directory another user may write.
        (tmp_path / 'other').mkdir()
        os.chown(tmp_path / 'other', OTHER, OTHER)
        daemon_conf = tmp_path / 'other' / 'daemon.conf'
    daemon_conf.write_text(
        f'[DEFAULT]\nstate_path = {state}\n'
        f'[agent]\nsysfs_root = {tree.root}\n'
        f'[cyborg_sys_admin]\nfpga_tool_dirs = {tmp_path / "bin"}\n')
    agent_conf = tmp_path / 'agent.conf'
    agent_conf.write_text(
        f'[DEFAULT]\nstate_path = {tmp_path / "agent-state"}\n'
        f'[agent]\nsysfs_root = {tmp_path / "agent-sys"}\n'
        f'[cyborg_sys_admin]\nhelper_command = {helper} '
        f'--config-file {daemon_conf}\n')
    os.chmod(daemon_conf,
             0o666 if layout == 'writable file' else 0o644)
    mdev = str(uuid.uuid4())
    done = subprocess.run(
        [sys.executable, '-c', _THROUGH_THE_DAEMON, str(agent_conf), GPU,
         TYPE, mdev, str(image)],
        capture_output=True, text=True, timeout=120)
    create = os.path.join(tree.device_path(GPU), 'mdev_supported_types',
                          TYPE, 'create')
    if not trusted:
        assert done.returncode != 0
        assert 'does not trust its configuration' in done.stderr, \
            done.stderr[-3000:]
        with open(create) as f:
            assert mdev not in f.read()
        assert not log.exists()
        return
    assert done.returncode == 0, done.stderr[-3000:]
    with open(create) as f:
        assert f.read() == mdev
    assert log.read_text().split()[0] == 'fpgaconf'
    assert re.fullmatch(BY_DESCRIPTOR, log.read_text().split()[-1])
    assert (tmp_path / 'tool.log.read').read_bytes() == b'bits'


_SWAPPED = '''
import os
import sys
import cyborg.conf
from cyborg.agent import privileged
cyborg.conf.CONF(['--config-file', sys.argv[1]], project='cyborg')
privileged.default.start()
# The helper has read the agent's file: root's is put back before the
# first call.
os.replace(sys.argv[5], sys.argv[6])
privileged.create_mdev(sys.argv[2], sys.argv[3], sys.argv[4])
'''


@pytest.mark.skipif(os.geteuid() != 0,
                    reason='privsep-helper keeps capabilities: root only')
def test_a_file_swapped_before_the_helper_started_is_refused(tmp_path):
    """The agent could write the directory of the helper's (root's)
    configuration file: it put a file of its own there, started the
    helper (which read it: the agent's sysfs tree), put root's file back,
    then called.  The file is root's at the call, but not the directory:
    refused, nothing written in either tree."""
    trees = {}
    for name in ('sys', 'agent-sys'):
        trees[name] = fake_sysfs.FakeSysfs(tmp_path / name)
        trees[name].add_pci(GPU, '0x10de', '0x1eb8', '0x030200',
                            driver='nvidia')
        trees[name].add_mdev_type(GPU, TYPE, 'GRID T4-2B', 8)
    etc = tmp_path / 'etc'
    etc.mkdir()
    os.chown(etc, OTHER, OTHER)
    daemon_conf = etc / 'daemon.conf'
    roots = tmp_path / 'root-s.conf'
    for path, tree in ((daemon_conf, 'agent-sys'), (roots, 'sys')):
        path.write_text(f'[agent]\nsysfs_root = {trees[tree].root}\n')
    for path in (daemon_conf, roots):
        os.chmod(path, 0o644)
    helper = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
    agent_conf = tmp_path / 'agent.conf'
    agent_conf.write_text(
        f'[cyborg_sys_admin]\nhelper_command = {helper} '
        f'--config-file {daemon_conf}\n')
    mdev = str(uuid.uuid4())
    done = subprocess.run(
        [sys.executable, '-c', _SWAPPED, str(agent_conf), GPU, TYPE, mdev,
         str(roots), str(daemon_conf)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"the directory {etc} on its way is not root's alone" in \
        done.stderr, done.stderr[-3000:]
    for tree in trees.values():
        create = os.path.join(tree.device_path(GPU), 'mdev_supported_types',
                              TYPE, 'create')
        with open(create) as f:
            assert mdev not in f.read()


# -- where the helper's configuration lies ------------------------------

def _etc(tmp_path):
    """An /etc-like layout under ``tmp_path``: ``etc/cyborg`` with
    ``cyborg.conf`` and ``cyborg.conf.d/sysfs.conf``, every directory
    root's and 0755, every file root's and 0644; returns ``etc/cyborg``."""
    etc = tmp_path / 'etc' / 'cyborg'
    (etc / 'cyborg.conf.d').mkdir(parents=True)
    for directory in (tmp_path / 'etc', etc, etc / 'cyborg.conf.d'):
        os.chmod(directory, 0o755)
    for path in (etc / 'cyborg.conf', etc / 'cyborg.conf.d' / 'sysfs.conf'):
        path.write_text('[DEFAULT]\n')
        os.chmod(path, 0o644)
    return etc


def _args(etc, conf='cyborg.conf'):
    return ['--config-file', str(etc / conf),
            '--config-dir', str(etc / 'cyborg.conf.d')]


def _helper_check(args):
    """The helper's check of the configuration privsep-helper loaded
    from ``args`` (its --config-file and --config-dir options)."""
    settings = cfg.ConfigOpts()
    cyborg.conf.register_opts(settings)
    settings(args, project='cyborg', default_config_files=[],
             default_config_dirs=[])
    with fake_privsep.in_process(settings) as privileged:
        privileged._trusted_settings()


@as_root
def test_root_s_own_directories_are_trusted(tmp_path):
    """/etc-like (every directory root's, 0755), reached through links
    of root's (climbing with '..' in one), or under a sticky directory
    anyone may write (/tmp-like: no one else may rename root's names in
    it)."""
    etc = _etc(tmp_path)
    _helper_check(_args(etc))
    os.symlink('../cyborg/cyborg.conf', etc / 'link.conf')
    os.symlink(etc, tmp_path / 'etc-link')
    _helper_check(_args(etc, 'link.conf'))
    _helper_check(['--config-file',
                   str(tmp_path / 'etc-link' / 'link.conf')])
    shared = tmp_path / 'tmp'
    shared.mkdir()
    os.chmod(shared, 0o1777)
    os.rename(tmp_path / 'etc', shared / 'etc')
    _helper_check(_args(shared / 'etc' / 'cyborg'))


def _writable_by_other(tmp_path, etc, how):
    """Make a directory on the way to ``etc/cyborg.conf`` (or that file a
    link through one) writable by a user other than root; returns that
    directory."""
    if how == 'owned by another user':
        os.chown(etc, OTHER, OTHER)
    elif how == 'group-writable':
        os.chmod(etc, 0o775)
    elif how == 'world-writable':
        os.chmod(etc, 0o777)
    elif how == 'a parent owned by another user':
        os.chown(etc.parent, OTHER, OTHER)
        return etc.parent
    elif how == "another user's link in a sticky directory":
        shared = tmp_path / 'tmp'
        shared.mkdir()
        os.chmod(shared, 0o1777)
        os.symlink(etc / 'real.conf', shared / 'cyborg.conf')
        os.lchown(shared / 'cyborg.conf', OTHER, OTHER)
        os.rename(etc / 'cyborg.conf', etc / 'real.conf')
        os.symlink(shared / 'cyborg.conf', etc / 'cyborg.conf')
        return shared
    else:
        other = tmp_path / 'other'
        other.mkdir()
        os.chown(other, OTHER, OTHER)
        if how == 'a link into it':
            # Root's file in the other user's directory, named by a link.
            os.rename(etc / 'cyborg.conf', other / 'cyborg.conf')
            os.symlink(other / 'cyborg.conf', etc / 'cyborg.conf')
        else:
            # A link to root's file in root's directory, but through a
            # link the other user may replace: neither the path as given
            # nor the real path has that user's directory among its
            # parents.
            os.symlink(etc, other / 'etc')
            os.rename(etc / 'cyborg.conf', etc / 'real.conf')
            os.symlink(other / 'etc' / 'real.conf', etc / 'cyborg.conf')
        return other
    return etc


@as_root
@pytest.mark.parametrize('how', [
    'owned by another user', 'group-writable', 'world-writable',
    'a parent owned by another user', 'a link into it',
    'a link on the way through it',
    "another user's link in a sticky directory"])
def test_root_s_file_where_another_user_may_replace_it_is_refused(
        tmp_path, how):
    """The file is root's, but another user (the agent) may write a
    directory its name is looked up in: it could have had the helper
    read a file of its own there, then put root's back before calling."""
    etc = _etc(tmp_path)
    writable = _writable_by_other(tmp_path, etc, how)
    with pytest.raises(exception.Invalid,
                       match=f"the directory {re.escape(str(writable))} on "
                             f"its way is not root's alone"):
        _helper_check(_args(etc))


@as_root
def test_a_config_dir_others_may_write_is_refused_even_sticky(tmp_path):
    """Sticky is no excuse for the configuration directory itself: a
    drop-in of another user's, read when the helper started, could be
    removed (by its owner) before the call."""
    etc = _etc(tmp_path)
    os.chmod(etc / 'cyborg.conf.d', 0o1777)
    with pytest.raises(exception.Invalid,
                       match='must be owned by root and writable by root '
                             'only'):
        _helper_check(_args(etc))


@as_root
def test_a_dot_dot_after_a_link_is_taken_away_by_name(tmp_path):
    """oslo.config read ``<dir>/link/../other.conf`` as
    ``<dir>/other.conf`` (its name without the ``..``), not as the kernel
    would resolve it (where the link led, one up): the check looks at
    the file that was read, here another user's in a sticky directory,
    not at root's file where the link would lead."""
    etc = _etc(tmp_path)
    shared = tmp_path / 'tmp'
    shared.mkdir()
    os.chmod(shared, 0o1777)
    os.symlink(etc, shared / 'root-s-link')
    (shared / 'other.conf').write_text('[DEFAULT]\n')
    os.chown(shared / 'other.conf', OTHER, OTHER)
    (etc.parent / 'other.conf').write_text('[DEFAULT]\n')
    with pytest.raises(exception.Invalid,
                       match=f"the directory {re.escape(str(shared))} on "
                             f"its way is not root's alone"):
        _helper_check(['--config-file',
                       str(shared / 'root-s-link' / '..' / 'other.conf')])


@as_root
def test_a_relative_path_is_refused(tmp_path, monkeypatch):
    """privsep-helper read a relative --config-file from the directory
    it started in (the agent's choice), but its daemon runs in '/': the
    file the check would find is not the one it read."""
    etc = _etc(tmp_path)
    monkeypatch.chdir(etc)
    with pytest.raises(exception.Invalid, match='not an absolute path'):
        _helper_check(['--config-file', 'cyborg.conf'])


@as_root
@pytest.mark.parametrize('variable', ['OS_AGENT__SYSFS_ROOT',
                                      'OS_DEFAULT__STATE_PATH',
                                      'OS_CYBORG_SYS_ADMIN__FPGA_TOOL_DIRS'])
def test_a_setting_from_the_environment_is_refused(tmp_path, monkeypatch,
                                                    variable):
    """oslo.config reads OS_<GROUP>__<OPTION> variables as well as files:
    a sudoers rule that keeps them (env_keep, SETENV) would let the agent
    choose the tree, state directory or tool directories the helper acts
    on as root, whatever root's files say."""
    etc = _etc(tmp_path)
    _helper_check(_args(etc))
    monkeypatch.setenv(variable, str(tmp_path / 'agent-s'))
    with pytest.raises(exception.Invalid,
                       match=f'comes from {variable}, not from a file'):
        _helper_check(_args(etc))
