"""NVMe SSD health while the host's nvme driver holds the controller: its
state and its temperature alarm (fake sysfs tree, as the nvme driver and
its hwmon show them)."""

from cyborg.common import states
from cyborg.drivers import inspur_nvme_ssd
from tests.unit.drivers import conftest

SSD = '0000:db:00.0'
KEY = 'PCI:' + SSD


def _setup(discovered, **nvme):
    return discovered('mixed', 'inspur_nvme_ssd_driver',
                      lambda tree: tree.set_nvme(SSD, **nvme))


def _check(driver, devices):
    return conftest.one_check(driver, devices, KEY)[0]


def test_a_live_controller_is_well_and_shows_its_temperature(conf, discovered):
    _tree, driver, devices = _setup(discovered, temperature=38,
                                    alarm=0)
    assert _check(driver, devices) == [(states.OK, '')]
    assert driver.usage(devices) == {KEY: {'temperature_celsius': 38.0}}


def test_states_and_the_temperature_alarm(conf, discovered, monkeypatch):
    # The alarm read at every check here (not once per SMART_INTERVAL).
    monkeypatch.setattr(inspur_nvme_ssd, 'SMART_INTERVAL', 0)
    tree, driver, devices = _setup(discovered, temperature=38, alarm=0)
    tree.set_nvme(SSD, state='resetting', temperature=38, alarm=0)
    assert _check(driver, devices) == [(states.TRANSIENT, 'nvme:resetting')]
    tree.set_nvme(SSD, state='live', temperature=81, alarm=1)
    assert _check(driver, devices) == [
        (states.TRANSIENT, 'nvme:temperature')]
    tree.set_nvme(SSD, state='dead', temperature=81, alarm=0)
    assert _check(driver, devices) == [(states.FATAL, 'nvme:dead')]


def test_the_alarm_is_read_once_per_smart_interval(conf, discovered,
                                                    monkeypatch):
    """Each read of temp1_alarm costs the drive an admin command: between
    two reads the alarm is the one last read."""
    tree, driver, devices = _setup(discovered, temperature=38, alarm=0)
    assert _check(driver, devices) == [(states.OK, '')]
    tree.set_nvme(SSD, temperature=81, alarm=1)
    assert _check(driver, devices) == [(states.OK, '')]
    monkeypatch.setattr(inspur_nvme_ssd, 'SMART_INTERVAL', 0)   # time up
    assert _check(driver, devices) == [
        (states.TRANSIENT, 'nvme:temperature')]
    monkeypatch.setattr(inspur_nvme_ssd, 'SMART_INTERVAL', 3600)
    tree.set_nvme(SSD, temperature=38, alarm=0)
    # Remembered until the next read...
    assert _check(driver, devices) == [
        (states.TRANSIENT, 'nvme:temperature')]
    monkeypatch.setattr(inspur_nvme_ssd, 'SMART_INTERVAL', 0)
    assert _check(driver, devices) == [(states.OK, '')]


def test_a_controller_passed_through_has_pci_health_only(discovered):
    _tree, driver, devices = discovered(
        'mixed', 'inspur_nvme_ssd_driver',
        lambda tree: tree.set_driver(SSD, 'vfio-pci'))
    assert _check(driver, devices) == [(states.OK, '')]
    assert driver.usage(devices) == {}
