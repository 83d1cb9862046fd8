import os

from cyborg.drivers import fake, loader
from cyborg.objects import inventory


def _driver(conf, tmp_path, host='node1'):
    conf.set_override('state_path', str(tmp_path))
    conf.set_override('sysfs_root', str(tmp_path / 'no-sysfs'), 'agent')
    return loader.load_driver(conf, host, 'fake_driver')


def test_fake_device_is_the_documented_one(conf, tmp_path):
    devices = _driver(conf, tmp_path).discover()
    assert len(devices) == 1
    device = devices[0]
    assert (device.type, device.vendor) == ('FPGA', '0xABCD')
    [deployable] = device.deployables
    assert deployable.name == 'node1_FakeDevice'
    assert deployable.num_accelerators == 16
    assert deployable.resource_class == 'FPGA'
    assert deployable.traits == ['CUSTOM_FAKE_DEVICE']
    assert deployable.driver_name == 'fake_driver'
    assert deployable.bitstream_id is None
    handles = deployable.attach_handles
    assert len(handles) == 16
    assert {h.attach_type for h in handles} == {'TEST_PCI'}
    assert len({h.key() for h in handles}) == 16
    # Round trip through the wire format is lossless.
    assert inventory.DriverDevice.from_dict(device.to_dict()) == device


def test_programming_sets_bitstream_id_of_next_report(conf, tmp_path):
    driver = _driver(conf, tmp_path)
    assert isinstance(driver, fake.base.Programmable)
    image = tmp_path / 'image.bin'
    image.write_bytes(b'bits')
    driver.program(fake.CONTROLPATH_ADDRESS, str(image), 'img-1')
    assert driver.discover()[0].deployables[0].bitstream_id == 'img-1'
    # Another host's fake device keeps its own state.
    other = _driver(conf, tmp_path, host='node2')
    assert other.discover()[0].deployables[0].bitstream_id is None
    assert not [p for p in os.listdir(tmp_path) if p.endswith('.tmp')]
