"""Slice names stay apart: they were made a DNS subdomain label by label,
each label cut to 63 characters, so on a host whose last label had 62 or
more the driver part was cut away and every driver's slices were named
alike (<host>-0), one overwriting another in the cluster.  An object
name is bounded by its 253 characters alone; a name too long for them
ends in a hash of the host and the driver.  Every slice names the cyborg
host it describes (the node name cannot be mapped back to it)."""

import pytest

from cyborg.exports import resource_slices
from cyborg.objects import exports
from tests.unit.exports import test_exports


def _inventory(hostname, drivers=('nvidia_gpu_driver', 'intel_fpga_driver')):
    devices = []
    for index, driver in enumerate(drivers):
        deployable = exports.Deployable(
            uuid='%08d-0000' % index, name='dev%d' % index,
            driver_name=driver, num_accelerators=1, attributes={},
            handles=[exports.Handle(
                uuid='h%d' % index, attach_type='PCI',
                attach_info={'domain': '0000', 'bus': '0c',
                             'device': '%02x' % index, 'function': '0'},
                in_use=False)],
            schedulable=True)
        devices.append(exports.Device(uuid='u%d' % index, type='GPU',
                                      vendor='10de', model='m',
                                      deployables=[deployable]))
    return exports.HostInventory(hostname=hostname, devices=devices)


def _names(*inventories):
    items = [item for inventory in inventories
             for item in resource_slices.slices(inventory, 1)]
    test_exports.check_slices(items)
    return items, [item['metadata']['name'] for item in items]


@pytest.mark.parametrize('hostname', [
    'rack1.' + 'c' * 62, 'c' * 63, 'rack1.' + 'c' * 63 + '.example.org'])
def test_a_long_last_label_keeps_the_drivers_apart(hostname):
    items, names = _names(_inventory(hostname))
    assert len(set(names)) == 2
    node = items[0]['spec']['nodeName']
    assert sorted(names) == [node + '-intel-fpga-0', node + '-nvidia-gpu-0']


def test_a_name_too_long_ends_in_a_hash_of_host_and_driver():
    # Four labels of 63: 255 characters, cut to 253 as a node name.
    long_host = '.'.join(letter * 63 for letter in 'abcd')
    # Another node, the same up to where the slice names are cut.
    twin = long_host[:240] + 'e' + long_host[241:]
    items, names = _names(_inventory(long_host), _inventory(twin))
    assert len(set(names)) == 4
    assert all(len(name) <= 253 for name in names)
    assert {item['spec']['nodeName'] for item in items} == {
        long_host[:253], twin[:253]}
    for item in items:
        assert item['spec']['driver'].split('.')[0] not in \
            item['metadata']['name']
    # The names are those of the host: the same every time.
    assert _names(_inventory(long_host))[1] == names[:2]


def test_every_slice_names_its_host_and_manager():
    hostname = 'Compute_7.' + 'x' * 60
    items, _names_ = _names(_inventory(hostname))
    for item in items:
        metadata = item['metadata']
        assert metadata['annotations'] == {
            resource_slices.HOSTNAME_ANNOTATION: hostname}
        assert metadata['labels']['app.kubernetes.io/managed-by'] == \
            'cyborg'
        node_label = metadata['labels'][resource_slices.NODE_LABEL]
        assert len(node_label) <= 63
        assert node_label.startswith('compute-7.x')
