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
  ``devices`` directory and is not itself a link.
- ``run_fpga_tool`` takes a tool's name (``FPGA_TOOLS``), a PCI address
  and a bitstream file; the daemon finds the tool in its own
  ``[cyborg_sys_admin]fpga_tool_dirs``, accepts the file only as a
  regular file (no link) directly in its own ``[DEFAULT]state_path``
  (where the agent writes bitstreams), and builds the command line
  itself.

What the daemon reads is ``CONF``: the configuration privsep-helper
loaded from its ``--config-file`` options.  Tests on fake sysfs trees
call the functions in-process after ``default.set_client_mode(False)``,
pointing ``CONF`` at their own configuration
(``tests.fixtures.privsep.in_process``).
"""

import os
import re
import stat

from oslo_concurrency import processutils
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


def _trusted_settings():
    """Refuse (``Invalid``, nothing done) when the settings the daemon
    acts on could be the caller's: privsep-helper runs as root through a
    sudoers rule, which cannot pin the ``--config-file`` options the
    unprivileged agent starts it with, and the tool directories, state
    directory and sysfs tree it trusts come from those files.  So each
    file (and config directory, and the files in it) must be owned by
    root and writable by no one else.  A daemon that is not root gains
    nothing from a caller's file: it is not asked (tests in process)."""
    if os.geteuid() != 0:
        return
    paths = list(CONF.config_file or ())
    for directory in CONF.config_dir or ():
        paths.append(directory)
        if os.path.isdir(directory):
            paths.extend(os.path.join(directory, name)
                         for name in sorted(os.listdir(directory))
                         if name.endswith('.conf'))
    for path in paths:
        try:
            info = os.stat(path)
        except OSError as exc:
            raise exception.Invalid(
                reason=f'the privileged helper cannot check its '
                       f'configuration {path}: {exc.strerror}')
        if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise exception.Invalid(
                reason=f'the privileged helper does not trust its '
                       f'configuration {path}: it must be owned by root and '
                       f'writable by root only; nothing was done')


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
def remove_mdev(mdev_uuid):
    """Remove mdev ``mdev_uuid``; returns False if it did not exist."""
    _trusted_settings()
    _check(inventory.MDEV_UUID, mdev_uuid, 'mdev uuid')
    fd = _open_control_file(
        os.path.join(CONF.agent.sysfs_root, 'bus', 'mdev', 'devices',
                     mdev_uuid),
        'remove')
    if fd is None:
        return False
    _write(fd, '1')
    return True


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


def _bitstream(image_path):
    """``image_path`` resolved, once it is known to name a regular file
    (no link, one name) directly in the daemon's state directory, where
    the agent writes the bitstreams it programs.  (The tool opens it by
    name afterwards: the agent, which owns that directory, could still
    swap the file in between; the tool then reads another file, which
    vendor tools refuse as a bitstream.)"""
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
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise exception.Invalid(
            reason=f'bitstream {image_path}: {exc.strerror}')
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        raise exception.Invalid(
            reason=f'bitstream {image_path} is not a regular file')
    return os.path.join(state, name)


@default.entrypoint
def run_fpga_tool(tool, address, image_path):
    """Program the FPGA at PCI ``address`` with the bitstream file
    ``image_path`` using ``tool`` (a name of ``FPGA_TOOLS``); returns the
    tool's stdout.  Refusals (``Invalid``, ``ResourceNotFound``) come
    before the tool runs; ``FPGAToolFailed`` once it ran."""
    _trusted_settings()
    if not isinstance(tool, str) or tool not in FPGA_TOOLS:
        raise exception.Invalid(reason=f'not an FPGA tool: {tool!r}')
    _check(inventory.PCI_ADDRESS, address, 'PCI address')
    image = _bitstream(image_path)
    argv = FPGA_TOOLS[tool](_tool_binary(tool), address, image)
    try:
        out, _err = processutils.execute(*argv)
    except processutils.ProcessExecutionError as exc:
        # It ran: the card may be partly written.
        raise exception.FPGAToolFailed(
            message=f'FPGA programming with {tool} failed: {exc}')
    except OSError as exc:
        raise exception.CyborgException(
            message=f'FPGA programming with {tool} could not start: '
                    f'{exc}')
    return out
