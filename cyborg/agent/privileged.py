"""The agent's privileged operations, behind oslo.privsep.

The agent runs unprivileged; these few functions run in the privsep
daemon (started on first use through ``privsep-helper`` with the
``[cyborg_sys_admin]`` options, e.g. ``helper_command = sudo
privsep-helper``).  Each one does one narrow thing and validates its
arguments itself, since a privileged function that wrote any path it was
given would hand root to whoever can call it.  So the caller names
things, never paths the daemon would trust:

- ``create_mdev``/``remove_mdev`` take a PCI address, an mdev type and an
  mdev uuid; the sysfs tree is the daemon's own ``[agent]sysfs_root``,
  and a control file is written only when it resolves under the tree's
  ``devices`` directory and is not itself a link.  An mdev is removed
  only from the parent (and of the type) the caller names: a uuid of
  another device's mdev removes nothing.
- ``run_fpga_tool`` takes a tool's name (``FPGA_TOOLS``), a PCI address
  and a bitstream file; the daemon finds the tool in its own
  ``[cyborg_sys_admin]fpga_tool_dirs``, opens the file once (no link
  followed) directly in its own ``[DEFAULT]state_path`` (where the agent
  writes bitstreams), accepts what it opened only as a regular file of
  one name, and hands the tool that open file (``/proc/self/fd/<n>``),
  never the name: the agent, which owns that directory, cannot swap the
  file between the check and the tool's read.  It builds the command
  line itself.

What the daemon reads is ``CONF``: the configuration privsep-helper
loaded from its ``--config-file`` options.  Tests on fake sysfs trees
call the functions in-process after ``default.set_client_mode(False)``,
pointing ``CONF`` at their own configuration
(``tests.fixtures.privsep.in_process``).
"""

import os
import re
import stat
import subprocess

from oslo_config import cfg
from oslo_privsep import capabilities as caps
from oslo_privsep import priv_context

import cyborg.conf
from cyborg.common import exception
from cyborg.conf import privsep as privsep_conf
from cyborg.objects import inventory

default = priv_context.PrivContext(
    'cyborg',
    cfg_section=privsep_conf.GROUP,
    pypath=__name__ + '.default',
    capabilities=[caps.CAP_SYS_ADMIN, caps.CAP_DAC_OVERRIDE],
)

# The configuration the functions read (see the module's docstring).
CONF = cyborg.conf.CONF

_MDEV_TYPE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$')


# The kernel's own limit on links followed in one lookup (ELOOP).
_MAX_LINKS = 40


def _writable_by_others(info):
    return info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _refuse(path, why):
    return exception.Invalid(
        reason=f'the privileged helper does not trust its configuration '
               f'{path}: {why}; nothing was done')


def _trusted_path(path):
    """The real path of ``path`` once every name on the way to it is
    root's alone; ``Invalid`` otherwise.

    What the helper read at its start is what these names led to then,
    so checking the file alone is not enough: whoever can write a
    directory on the way can put a file of its own (or a link to one)
    in the place of root's, start the helper, and put root's file back
    before the first call.  So the lookup is walked as the kernel walks
    it, following each link (a ``..`` in a link climbs from where the
    link led), and each directory a name is looked up in must be owned
    by root and writable by no one else, or have the sticky bit (as
    ``/tmp``) with that name root's: there no one but root may rename or
    remove it, though others may add names of their own.  The file (or
    configuration directory) itself must be owned by root and writable
    by no one else, sticky or not: in a configuration directory others
    could write, a drop-in of theirs read at the start could be gone by
    the call.

    The path must be absolute: privsep-helper read a relative one (or
    one starting with ``~``) from the directory it was started in (or
    its user's home), and its daemon now runs in ``/``.  oslo.config
    read it with each ``..`` taken away by name (``a/link/../b`` is
    ``a/b``), so that is the path walked."""
    if not os.path.isabs(path):
        raise _refuse(path, 'not an absolute path')
    names = os.path.normpath(path).split('/')
    current = '/'
    links = 0
    try:
        info = os.lstat(current)
        while names:
            name = names.pop(0)
            if name in ('', '.'):
                continue
            if name == '..':
                current = os.path.dirname(current)
                info = os.lstat(current)
                continue
            entry = os.path.join(current, name)
            found = os.lstat(entry)
            if info.st_uid != 0 or (
                    _writable_by_others(info) and
                    not (info.st_mode & stat.S_ISVTX and
                         found.st_uid == 0)):
                raise _refuse(
                    path, f'the directory {current} on its way is not '
                          f'root\'s alone (it must be owned by root and '
                          f'writable by root only, or sticky with '
                          f'{name} root\'s)')
            if stat.S_ISLNK(found.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    raise _refuse(path, 'too many links on its way')
                target = os.readlink(entry)
                if target.startswith('/'):
                    current = '/'
                    info = os.lstat(current)
                names[:0] = target.split('/')
                continue
            current, info = entry, found
    except OSError as exc:
        raise exception.Invalid(
            reason=f'the privileged helper cannot check its '
                   f'configuration {path}: {exc.strerror}')
    if info.st_uid != 0 or _writable_by_others(info):
        raise _refuse(path, 'it must be owned by root and writable by '
                            'root only')
    return current


# The options the helper acts on, as (group, name), and the places their
# values must not come from: the environment (OS_<GROUP>__<NAME>, which
# oslo.config reads too: a sudoers rule keeping such variables, env_keep
# or SETENV, would let the caller choose them) and the command line (the
# caller's too).  Files are checked below.
_ACTED_ON = ((None, 'state_path'), ('agent', 'sysfs_root'),
             ('cyborg_sys_admin', 'fpga_tool_dirs'))
_CALLER_S = (cfg.Locations.environment, cfg.Locations.command_line)


def _trusted_settings():
    """Refuse (``Invalid``, nothing done) when the settings the daemon
    acts on could be the caller's: privsep-helper runs as root through a
    sudoers rule, which cannot pin the ``--config-file`` options the
    unprivileged agent starts it with, and the tool directories, state
    directory and sysfs tree it trusts come from those files.  So each
    file (and config directory, and the files in it), and every
    directory on the way to each, must be root's alone
    (``_trusted_path``).  The check runs at each call, not when the
    helper starts (oslo.privsep has no hook there): a layout root's
    alone now was root's alone when the helper read it, unless root
    itself changed it since.  A daemon that is not root gains nothing
    from a caller's file: it is not asked (tests in process)."""
    if os.geteuid() != 0:
        return
    for group, name in _ACTED_ON:
        found = CONF.get_location(name, group)
        if found is not None and found.location in _CALLER_S:
            raise exception.Invalid(
                reason=f'the privileged helper does not trust its '
                       f'configuration: [{group or "DEFAULT"}]{name} comes '
                       f'from {found.detail or found.location.name}, not '
                       f'from a file of root\'s (keep OS_* variables out '
                       f'of the sudoers env_keep)')
    for path in CONF.config_file or ():
        _trusted_path(path)
    for directory in CONF.config_dir or ():
        real = _trusted_path(directory)
        try:
            names = sorted(os.listdir(real))
        except OSError as exc:
            raise exception.Invalid(
                reason=f'the privileged helper cannot check its '
                       f'configuration {directory}: {exc.strerror}')
        # What oslo.config read: <directory>/*.conf (here hidden ones
        # too).
        for name in names:
            if name.endswith('.conf'):
                _trusted_path(os.path.join(directory, name))


def _check(pattern, value, what):
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise exception.Invalid(reason=f'bad {what} {value!r}')


def check_mdev(parent_address, mdev_type, mdev_uuid):
    """Raise ``Invalid`` unless the three are a PCI address, an mdev type
    name and an mdev uuid (the agent checks before it looks at sysfs too,
    with the same rules)."""
    _check(inventory.PCI_ADDRESS, parent_address, 'PCI address')
    _check(_MDEV_TYPE, mdev_type, 'mdev type')
    _check(inventory.MDEV_UUID, mdev_uuid, 'mdev uuid')


# -- mdevs ---------------------------------------------------------------

def _open_control_file(directory, name):
    """A descriptor, open for writing, on the sysfs control file ``name``
    of ``directory`` (a path under the daemon's tree, reached through the
    tree's own links such as ``bus/pci/devices/<address>``); None when
    there is none.  The directory must resolve under the tree's
    ``devices`` and the file must be a regular file, not a link: a
    tree whose links lead elsewhere gets nothing written."""
    root = os.path.realpath(CONF.agent.sysfs_root)
    devices = os.path.join(root, 'devices')
    real = os.path.realpath(directory)
    if not os.path.isdir(real):
        return None
    if os.path.commonpath([real, devices]) != devices:
        raise exception.Invalid(
            reason=f'{directory} is not a device under {devices}')
    try:
        dir_fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY |
                         os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        # sysfs control files take one write; O_TRUNC/O_CREAT would be
        # wrong.  O_NOFOLLOW: ELOOP for a link.
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise exception.Invalid(
            reason=f'{real}/{name} cannot be written: {exc.strerror}')
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise exception.Invalid(reason=f'{real}/{name} is not a file')
    return fd


def _write(fd, text):
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


@default.entrypoint
def create_mdev(parent_address, mdev_type, mdev_uuid):
    """Create mdev ``mdev_uuid`` of ``mdev_type`` on ``parent_address``."""
    _trusted_settings()
    check_mdev(parent_address, mdev_type, mdev_uuid)
    fd = _open_control_file(
        os.path.join(CONF.agent.sysfs_root, 'bus', 'pci', 'devices',
                     parent_address, 'mdev_supported_types', mdev_type),
        'create')
    if fd is None:
        raise exception.NotFound(
            message=f'Device {parent_address} has no mdev type {mdev_type}')
    _write(fd, mdev_uuid)


@default.entrypoint
def remove_mdev(parent_address, mdev_uuid, mdev_type=None):
    """Remove mdev ``mdev_uuid`` of the device at ``parent_address`` (and
    of ``mdev_type``, when given); returns False if it did not exist.
    Conflict, nothing written, when that uuid is another device's mdev
    (or of another type): a caller naming the wrong parent must not
    remove someone else's vGPU."""
    _trusted_settings()
    _check(inventory.PCI_ADDRESS, parent_address, 'PCI address')
    _check(inventory.MDEV_UUID, mdev_uuid, 'mdev uuid')
    if mdev_type is not None:
        _check(_MDEV_TYPE, mdev_type, 'mdev type')
    mdev = os.path.join(CONF.agent.sysfs_root, 'bus', 'mdev', 'devices',
                        mdev_uuid)
    fd = _open_control_file(mdev, 'remove')
    if fd is None:
        return False
    try:
        _check_owner(mdev, parent_address, mdev_type)
    except BaseException:
        os.close(fd)
        raise
    _write(fd, '1')
    return True


def mdev_where(link):
    """(its parent's directory, its type: 'unknown' where unreadable) of
    the mdev whose link in ``bus/mdev/devices`` is ``link``."""
    real = os.path.realpath(link)
    try:
        found_type = os.path.basename(
            os.readlink(os.path.join(real, 'mdev_type')))
    except OSError:
        found_type = 'unknown'
    return os.path.dirname(real), found_type


def _check_owner(mdev, parent_address, mdev_type):
    """Conflict unless the mdev whose link in ``bus/mdev/devices`` is
    ``mdev`` is a child of the device at ``parent_address`` (and of
    ``mdev_type``, when given).  The kernel puts an mdev's directory in
    its parent's and links its ``mdev_type`` to the parent's
    ``mdev_supported_types/<type>``."""
    parent, found_type = mdev_where(mdev)
    wanted = os.path.realpath(os.path.join(
        CONF.agent.sysfs_root, 'bus', 'pci', 'devices', parent_address))
    if parent == wanted and mdev_type in (None, found_type):
        return
    asked = f'of type {mdev_type} on' if mdev_type else 'on'
    raise exception.Conflict(
        reason=f'mdev {os.path.basename(mdev)} is of type {found_type} on '
               f'{os.path.basename(parent)}, not {asked} {parent_address}; '
               f'it was not removed')


# -- FPGA programming ----------------------------------------------------

def _fpgaconf_argv(binary, address, image):
    """OPAE's ``fpgaconf`` for the FPGA at PCI ``address``."""
    domain, bus, rest = address.split(':')
    device, function = rest.split('.')
    return [binary, '--segment', '0x' + domain, '--bus', '0x' + bus,
            '--device', '0x' + device, '--function', '0x' + function,
            image]


def _xbutil_argv(binary, address, image):
    """XRT's ``xbutil program`` on the user function at ``address``."""
    return [binary, 'program', '--device', address, '--user', image]


# Vendor tools that program FPGAs (OPAE for Intel/Inspur, XRT for Xilinx):
# name -> its command line.
FPGA_TOOLS = {'fpgaconf': _fpgaconf_argv, 'xbutil': _xbutil_argv}


def _tool_binary(tool):
    """The executable ``tool`` in the first of the daemon's
    ``[cyborg_sys_admin]fpga_tool_dirs`` that has one."""
    dirs = [d for d in CONF.cyborg_sys_admin.fpga_tool_dirs
            if os.path.isabs(d)]
    for directory in dirs:
        path = os.path.join(directory, tool)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise exception.ResourceNotFound(
        message=f"FPGA programming tool {tool} could not be found in "
                f"[cyborg_sys_admin]fpga_tool_dirs "
                f"({', '.join(dirs) or 'none'}); the card was not touched")


def _open_bitstream(image_path):
    """A descriptor, open for reading, on the file ``image_path`` names,
    once it is known to be a regular file (no link, one name) directly
    in the daemon's state directory, where the agent writes the
    bitstreams it programs.  What is checked is what was opened (the
    agent, which owns that directory, may swap the name for a link or
    another file at any time; whatever it does afterwards, the tool reads
    this file: ``run_fpga_tool``)."""
    state = os.path.realpath(CONF.state_path)
    if (not isinstance(image_path, str) or image_path.startswith('-') or
            not os.path.isabs(image_path)):
        raise exception.Invalid(reason=f'bad bitstream path {image_path!r}')
    name = os.path.basename(image_path)
    directory = os.path.realpath(os.path.dirname(image_path))
    if directory != state or not name or name.startswith('-'):
        raise exception.Invalid(
            reason=f'bitstream {image_path} is not a file in {state}')
    try:
        dir_fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise exception.Invalid(
            reason=f'bitstream {image_path}: {exc.strerror}')
    try:
        fd = _open_regular(name, dir_fd, image_path)
    finally:
        os.close(dir_fd)
    return fd


def _open_regular(name, dir_fd, image_path):
    """``name`` in ``dir_fd`` opened read-only: O_NOFOLLOW (a link is
    ELOOP), O_NONBLOCK (a FIFO put there does not hold the daemon), then
    checked on the descriptor itself (fstat)."""
    not_regular = exception.Invalid(
        reason=f'bitstream {image_path} is not a regular file')
    try:
        # Its type first, without opening it: a device node is not opened
        # at all.  The check that counts is the one on the descriptor.
        if not stat.S_ISREG(os.stat(name, dir_fd=dir_fd,
                                    follow_symlinks=False).st_mode):
            raise not_regular
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK |
                     os.O_NOCTTY, dir_fd=dir_fd)
    except OSError as exc:
        raise exception.Invalid(
            reason=f'bitstream {image_path}: {exc.strerror}')
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise not_regular
    except BaseException:
        os.close(fd)
        raise
    return fd


def _by_descriptor(fd):
    """The name under which a child given ``fd`` (``pass_fds``) opens the
    very file the descriptor is open on, whatever became of its name."""
    return f'/proc/self/fd/{fd}'


def _run(argv, fd, tool):
    """Run ``argv`` with ``fd`` passed on (stdin closed); its stdout.
    ``FPGAToolFailed`` when it ran and failed, a refusal (Conflict) when
    it could not be started at all: the card was not touched then."""
    try:
        done = subprocess.run(argv, pass_fds=(fd,), close_fds=True,
                              stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, check=False)
    except OSError as exc:
        raise exception.Conflict(
            message=f'FPGA programming tool {tool} could not be started '
                    f'({exc.strerror or exc}); the card was not touched')
    out = done.stdout.decode('utf-8', 'replace')
    if done.returncode != 0:
        # It ran: the card may be partly written.
        said = done.stderr.decode('utf-8', 'replace').strip() or \
            out.strip()
        said = ' '.join(said.splitlines()[-3:])
        raise exception.FPGAToolFailed(
            message=f'FPGA programming with {tool} failed: exit status '
                    f'{done.returncode}' + (f': {said}' if said else ''))
    return out


@default.entrypoint
def run_fpga_tool(tool, address, image_path):
    """Program the FPGA at PCI ``address`` with the bitstream file
    ``image_path`` using ``tool`` (a name of ``FPGA_TOOLS``); returns the
    tool's stdout.  Refusals (``Invalid``, ``ResourceNotFound``,
    ``Conflict``: the card was not touched) come before the tool runs;
    ``FPGAToolFailed`` once it ran."""
    _trusted_settings()
    if not isinstance(tool, str) or tool not in FPGA_TOOLS:
        raise exception.Invalid(reason=f'not an FPGA tool: {tool!r}')
    _check(inventory.PCI_ADDRESS, address, 'PCI address')
    fd = _open_bitstream(image_path)
    try:
        argv = FPGA_TOOLS[tool](_tool_binary(tool), address,
                                _by_descriptor(fd))
        return _run(argv, fd, tool)
    finally:
        os.close(fd)
