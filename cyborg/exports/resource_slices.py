"""Kubernetes dynamic resource allocation: the inventory as
``resource.k8s.io/v1`` ResourceSlice objects (the API group's stable
version since Kubernetes 1.34).

One pool per host and driver, named after the host; the pool's devices
are split into slices of at most ``MAX_DEVICES`` (the API server's limit),
each naming the node.  A pool with nothing to offer (every unit held,
every deployable out of the schedule) is one slice of no devices, so
that applying the export replaces the slice that offered them.  Every
slice carries the labels ``LABELS`` and ``NODE_LABEL`` (to prune by) and
the cyborg host name (``HOSTNAME_ANNOTATION``: the node name cannot be
mapped back to it).  A device is one allocatable unit (an attach
handle: a whole GPU, a VF, an mdev slot), named as a DNS label unique in
its pool, with typed attributes (``type``, ``vendor``, ``model``,
``resourceClass``, ``pciAddress``, ``numaNode``...) and, when the driver
knows it, a ``memory`` capacity.  The Kubernetes driver name is the
cyborg driver's under ``DRIVER_DOMAIN``: these slices describe what
cyborg manages, for a DRA driver or an operator to publish.
"""

import hashlib
import re

from cyborg.exports import dns_label, dns_subdomain, exported, held, units
from cyborg.objects import inventory as inventory_objects

API_VERSION = 'resource.k8s.io/v1'
KIND = 'ResourceSlice'
DRIVER_DOMAIN = 'cyborg.openstack.org'
# The API server refuses a slice with more devices (ResourceSliceMaxDevices).
MAX_DEVICES = 128
# A driver name is at most 63 characters; a string attribute 64 bytes
# (of UTF-8); an object name (a DNS subdomain) and a label value 253 and
# 63 characters.
MAX_DRIVER = 63
MAX_STRING = 64
MAX_NAME = 253
MAX_LABEL_VALUE = 63
# Room kept at the end of a slice name for '-<index>'.
_INDEX_ROOM = 8
# On every slice: who manages them, so that what an export no longer
# holds can be pruned (kubectl apply --prune -l ..., doc/source/
# exports.rst), and which host they describe.
LABELS = {'app.kubernetes.io/managed-by': 'cyborg'}
NODE_LABEL = DRIVER_DOMAIN + '/node'
HOSTNAME_ANNOTATION = DRIVER_DOMAIN + '/hostname'
# An attribute value taken as a number: ASCII digits that fit an int64
# (an admin may set any string, e.g. "--1" or "²").
_INTEGER = re.compile(r'-?[0-9]{1,18}')
_COUNT = re.compile(r'[0-9]{1,18}')


def driver_name(cyborg_driver):
    """'nvidia_gpu_driver' -> 'nvidia-gpu.cyborg.openstack.org'."""
    name = cyborg_driver[:-len('_driver')] if cyborg_driver.endswith(
        '_driver') else cyborg_driver
    room = MAX_DRIVER - len(DRIVER_DOMAIN) - 1
    return '%s.%s' % (dns_label(name, room), DRIVER_DOMAIN)


def _pci_address(info):
    try:
        return '%s:%s:%s.%s' % (info['domain'], info['bus'], info['device'],
                                info['function'])
    except (KeyError, TypeError):
        return None


def _string(value):
    """A string attribute: at most MAX_STRING bytes of UTF-8 (the API
    server counts bytes), cut between characters, never within one."""
    data = str(value).encode('utf-8', 'replace')[:MAX_STRING]
    return {'string': data.decode('utf-8', 'ignore')}


def _attributes(device, deployable, handle):
    attrs = deployable.attributes
    out = {'type': _string(device.type), 'vendor': _string(device.vendor),
           'model': _string(device.model)}
    if attrs.get('rc'):
        out['resourceClass'] = _string(attrs['rc'])
    if handle is not None:
        out['attachType'] = _string(handle.attach_type)
        address = _pci_address(handle.attach_info)
        if address:
            out['pciAddress'] = _string(address)
    for key, name in (('vgpu_type', 'vgpuType'), ('mig_uuid', 'migUUID'),
                      ('gpu_uuid', 'gpuUUID')):
        if attrs.get(key):
            out[name] = _string(attrs[key])
    numa_node = str(attrs.get('numa_node', ''))
    if _INTEGER.fullmatch(numa_node):
        out['numaNode'] = {'int': int(numa_node)}
    out['deployableUUID'] = _string(deployable.uuid)
    return out


def _capacity(deployable, unit_count):
    memory = str(deployable.attributes.get('memory_mb') or '')
    if unit_count == 1 and _COUNT.fullmatch(memory):
        return {'memory': {'value': '%sMi' % memory}}
    return {}


def _device_name(device, deployable, handle, index, taken):
    base = device.type
    address = handle is not None and _pci_address(handle.attach_info)
    if address:
        base += '-' + address
        mark = handle.attach_info.get(inventory_objects.VGPU_MARK)
        if mark:
            base += '-' + str(mark)
    else:
        base += '-' + deployable.uuid[:8] + '-%d' % index
    name = dns_label(base)
    suffix = 1
    while name in taken:
        tail = '-%d' % suffix
        name = dns_label(base, 63 - len(tail)) + tail
        suffix += 1
    taken.add(name)
    return name


def _pools(inventory):
    """{driver name: [device dicts]} of one host, in a stable order: every
    driver of a deployable of the host has its pool, with no devices when
    it has nothing to offer."""
    pools, names = {}, {}
    for device in inventory.devices:
        for deployable in device.deployables:
            driver = driver_name(deployable.driver_name)
            devices = pools.setdefault(driver, [])
            if not exported(deployable):
                continue
            taken = names.setdefault(driver, set())
            # Names and capacity as if every unit were free, so that a
            # unit's name does not change as others are taken; the held
            # units themselves are not offered.
            found = units(deployable)
            capacity = _capacity(deployable, len(found))
            for index, handle in enumerate(found):
                name = _device_name(device, deployable, handle, index, taken)
                if held(handle):
                    continue
                entry = {'name': name,
                         'attributes': _attributes(device, deployable,
                                                   handle)}
                if capacity:
                    entry['capacity'] = capacity
                devices.append(entry)
    return pools


def _shortened(text, limit, *keys):
    """``text`` (a DNS subdomain) if it is at most ``limit`` characters,
    else cut to leave room for a hash of ``keys`` appended: names that
    would have been cut alike stay apart."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256('\0'.join(keys).encode(
        'utf-8', 'replace')).hexdigest()[:10]
    return '%s-%s' % (text[:limit - len(digest) - 1].rstrip('.-'), digest)


def _slice_prefix(node, hostname, driver):
    """The slice names of a pool, less '-<index>': the node and the
    driver's first label.  Only the whole name's 253 characters bound
    it (an object name is a DNS subdomain, not a host name: no label
    limit), so the driver part is never cut away by a long node name."""
    return _shortened('%s-%s' % (node, driver.split('.')[0]),
                      MAX_NAME - _INDEX_ROOM, hostname, driver)


def slices(inventory, generation):
    """The ResourceSlice objects (dicts) of one host: one pool per driver,
    each pool in as many slices as MAX_DEVICES requires, and one slice
    of no devices for a pool with nothing to offer (what ``kubectl
    apply`` then replaces: it deletes nothing).  ``generation`` is the
    pool generation (it must grow whenever the host's inventory
    changes)."""
    node = dns_subdomain(inventory.hostname)
    labels = dict(LABELS)
    labels[NODE_LABEL] = _shortened(node, MAX_LABEL_VALUE,
                                    inventory.hostname)
    out = []
    for driver, devices in sorted(_pools(inventory).items()):
        chunks = [devices[i:i + MAX_DEVICES]
                  for i in range(0, len(devices), MAX_DEVICES)] or [[]]
        prefix = _slice_prefix(node, inventory.hostname, driver)
        for index, chunk in enumerate(chunks):
            out.append({
                'apiVersion': API_VERSION,
                'kind': KIND,
                'metadata': {
                    'name': '%s-%d' % (prefix, index),
                    'labels': dict(labels),
                    'annotations': {
                        HOSTNAME_ANNOTATION: inventory.hostname}},
                'spec': {
                    'driver': driver,
                    'nodeName': node,
                    'pool': {'name': node, 'generation': generation,
                             'resourceSliceCount': len(chunks)},
                    'devices': chunk,
                }})
    return out


def document(inventories):
    """A Kubernetes ``List`` of the slices of every host of
    ``inventories`` ([(HostInventory, generation)]), for ``kubectl apply
    -f``."""
    items = []
    for inventory, generation in inventories:
        items.extend(slices(inventory, generation))
    return {'apiVersion': 'v1', 'kind': 'List', 'items': items}
