import copy

from cyborg.agent import reporter
from cyborg.objects import inventory


def _device(address, rc='PGPU', n=1):
    dep = inventory.Deployable(
        name='h_' + address, num_accelerators=n,
        attributes={'rc': rc},
        attach_handles=[inventory.AttachHandle('PCI',
                                               inventory.pci_info(address))],
        driver_name='d')
    return inventory.DriverDevice(
        type='GPU', vendor='10de', model='m',
        controlpath_id=inventory.ControlPathID(address), deployables=[dep])


def test_first_report_is_full():
    devices = [_device('0000:01:00.0')]
    report = reporter.build_report(devices, None, None, full=False)
    assert report['full'] is True
    assert report['base_digest'] is None
    assert report['digest'] == inventory.inventory_digest(devices)
    assert report['devices'] == [devices[0].to_dict()]


def test_delta_has_changed_and_removed_only():
    a, b, c = (_device('0000:0%d:00.0' % i) for i in (1, 2, 3))
    acked = [a, b]
    acked_digest = inventory.inventory_digest(acked)
    b2 = copy.deepcopy(b)
    b2.deployables[0].num_accelerators = 2
    report = reporter.build_report([b2, c], acked_digest, acked, full=False)
    assert report['full'] is False
    assert report['base_digest'] == acked_digest
    assert report['digest'] == inventory.inventory_digest([b2, c])
    assert [d['controlpath_id']['cpid_info'] for d in report['devices']] == \
        ['0000:02:00.0', '0000:03:00.0']
    assert report['removed'] == [a.key()]


def test_unchanged_report_is_empty():
    devices = [_device('0000:01:00.0')]
    digest = inventory.inventory_digest(devices)
    report = reporter.build_report(copy.deepcopy(devices), digest, devices,
                                   full=False)
    assert report == {'digest': digest, 'base_digest': digest,
                      'full': False, 'devices': [], 'removed': []}


def test_full_on_request_even_with_cache():
    devices = [_device('0000:01:00.0')]
    digest = inventory.inventory_digest(devices)
    report = reporter.build_report(devices, digest, devices, full=True)
    assert report['full'] is True and len(report['devices']) == 1
