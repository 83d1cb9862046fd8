"""The agent's privileged operations, behind oslo.privsep.

The agent runs unprivileged; these few functions run in the privsep
daemon (started on first use through ``privsep-helper`` with the
``[cyborg_sys_admin]`` options, e.g. ``helper_command = sudo
privsep-helper``).  Each one does one narrow thing and validates its
arguments itself, since a privileged function that wrote any path it was
given would hand root to whoever can call it.

Tests on fake sysfs trees call them in-process after
``default.set_client_mode(False)``.
"""

import os
import re

from oslo_concurrency import processutils
from oslo_privsep import capabilities as caps
from oslo_privsep import priv_context

from cyborg.common import exception

default = priv_context.PrivContext(
    'cyborg',
    cfg_section='cyborg_sys_admin',
    pypath=__name__ + '.default',
    capabilities=[caps.CAP_SYS_ADMIN, caps.CAP_DAC_OVERRIDE],
)

_ADDRESS = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')
_MDEV_TYPE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$')
_UUID = re.compile(r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}$')
# Vendor tools that program FPGAs (OPAE for Intel/Inspur, XRT for Xilinx).
FPGA_TOOLS = ('fpgaconf', 'xbutil')


def _check(pattern, value, what):
    if not isinstance(value, str) or not pattern.match(value):
        raise exception.Invalid(reason=f'bad {what} {value!r}')


def _write(path, text):
    # sysfs control files take one write; O_TRUNC/O_CREAT would be wrong.
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


@default.entrypoint
def create_mdev(sysfs_root, parent_address, mdev_type, mdev_uuid):
    """Create mdev ``mdev_uuid`` of ``mdev_type`` on ``parent_address``."""
    _check(_ADDRESS, parent_address, 'PCI address')
    _check(_MDEV_TYPE, mdev_type, 'mdev type')
    _check(_UUID, mdev_uuid, 'mdev uuid')
    path = os.path.join(sysfs_root, 'bus', 'pci', 'devices', parent_address,
                        'mdev_supported_types', mdev_type, 'create')
    if not os.path.exists(path):
        raise exception.NotFound(
            message=f'Device {parent_address} has no mdev type {mdev_type}')
    _write(path, mdev_uuid)


@default.entrypoint
def remove_mdev(sysfs_root, mdev_uuid):
    """Remove mdev ``mdev_uuid``; returns False if it did not exist."""
    _check(_UUID, mdev_uuid, 'mdev uuid')
    path = os.path.join(sysfs_root, 'bus', 'mdev', 'devices', mdev_uuid,
                        'remove')
    if not os.path.exists(path):
        return False
    _write(path, '1')
    return True


@default.entrypoint
def run_fpga_tool(argv):
    """Run a vendor FPGA programming tool; returns its stdout."""
    if not argv or os.path.basename(argv[0]) not in FPGA_TOOLS:
        raise exception.Invalid(reason=f'not an FPGA tool: {argv!r}')
    try:
        out, _err = processutils.execute(*argv)
    except processutils.ProcessExecutionError as exc:
        # It ran: the card may be partly written.
        raise exception.FPGAToolFailed(
            message=f'FPGA programming with {argv[0]} failed: {exc}')
    except OSError as exc:
        raise exception.CyborgException(
            message=f'FPGA programming with {argv[0]} could not start: '
                    f'{exc}')
    return out
