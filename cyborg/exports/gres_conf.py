"""Slurm: the inventory as ``gres.conf`` lines.

One line per deployable offered to schedulers::

    NodeName=compute-1 Name=gpu Type=nvidia_20f1 File=/dev/vfio/20 Count=1

``Name`` is the GRES name (``gpu``, ``fpga``, ``qat``, ``nic``, ``nvme``,
``aichip``: list them in slurm.conf's ``GresTypes``), ``Type`` the model
(the vGPU or MIG type where there is one).  ``File`` names the VFIO group
device a whole PCI function is passed through with, when the driver
reported its IOMMU group; pools of VFs or mdevs have no single file and
carry ``Count`` alone.  ``Count`` is the units no consumer holds
(``cyborg.exports.free_units``).  Deployables out of the schedule (in
maintenance, unhealthy, gone, being programmed), or with every unit
held, are left out and named in a comment.

Every line is one line: a value is one word of ``[A-Za-z0-9_.-]`` (or a
number, a ``/dev/vfio`` path), and a name in a comment has each character
that is not printable (a newline, any control character, a line or
paragraph separator) written as its Python escape (``\\n``).  The
conductor refuses such host and deployable names in reports
(``cyborg.conductor.inventory_plan``); rows stored before it did, or
written by other means, cannot add a line to the document.
"""

import re

from cyborg.exports import exported, free_units, units

GRES_NAMES = {'GPU': 'gpu', 'FPGA': 'fpga', 'QAT': 'qat', 'NIC': 'nic',
              'SSD': 'nvme', 'AICHIP': 'aichip'}
_NOT_TYPE = re.compile(r'[^A-Za-z0-9_.-]+')


def _type(device, deployable):
    attrs = deployable.attributes
    text = attrs.get('vgpu_type')
    if not text and attrs.get('mig_uuid'):
        # A MIG instance: its resource class names the profile.
        text = str(attrs.get('rc', '')).replace('CUSTOM_', '', 1).lower()
    text = text or '%s_%s' % (device.vendor, device.model)
    return _NOT_TYPE.sub('_', str(text)).strip('_') or 'unknown'


def _file(deployable, count):
    group = str(deployable.attributes.get('iommu_group', ''))
    whole = (count == 1 and deployable.handles
             and deployable.handles[0].attach_type in ('PCI', 'TEST_PCI'))
    if whole and group.isdigit():
        return '/dev/vfio/%s' % group
    return None


def _node(hostname):
    # A NodeName is one word; a host name never holds spaces or '='.
    return _NOT_TYPE.sub('_', hostname)


def _name(device):
    return _NOT_TYPE.sub('_', GRES_NAMES.get(device.type,
                                             device.type.lower()))


def _shown(text):
    """``text`` for a comment: on one line, with each character that is
    not printable (a control character, a line or paragraph separator,
    which would end the comment and start a line of its own) as its
    escape."""
    return ''.join(c if c.isprintable()
                   else c.encode('unicode_escape').decode('ascii')
                   for c in str(text))


def lines(inventory):
    """The gres.conf lines of one host (comments included)."""
    out = []
    for device in inventory.devices:
        for deployable in device.deployables:
            total = len(units(deployable))
            if not total:
                continue
            if not exported(deployable):
                out.append('# %s: out of the schedule, not offered'
                           % _shown(deployable.name))
                continue
            count = len(free_units(deployable))
            if not count:
                out.append('# %s: all %d in use, not offered'
                           % (_shown(deployable.name), total))
                continue
            fields = ['NodeName=%s' % _node(inventory.hostname),
                      'Name=%s' % _name(device),
                      'Type=%s' % _type(device, deployable)]
            path = _file(deployable, total)
            if path:
                fields.append('File=%s' % path)
            fields.append('Count=%d' % count)
            out.append(' '.join(fields))
    return out


def document(inventories):
    """gres.conf text for the HostInventory objects of ``inventories``."""
    out = ['# Generic resources managed by cyborg (GET /v2/exports/'
           'gres.conf).']
    for inventory in inventories:
        host_lines = lines(inventory)
        if host_lines:
            out.append('# %s' % _shown(inventory.hostname))
            out.extend(host_lines)
    return '\n'.join(out) + '\n'
