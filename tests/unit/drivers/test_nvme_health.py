"""NVMe SSD health while the host's nvme driver holds the controller: its
state and its temperature alarm (fake sysfs tree, as the nvme driver and
its hwmon show them)."""

from cyborg.common import states
from cyborg.drivers import loader

SSD = '0000:db:00.0'
KEY = 'PCI:' + SSD


def _setup(conf, scenario, **nvme):
    tree = scenario('mixed')
    tree.set_nvme(SSD, **nvme)
    driver = loader.load_driver(conf, 'h', 'inspur_nvme_ssd_driver')
    return tree, driver, driver.discover()


def _check(driver, devices):
    return sorted((r.severity, r.code or '')
                  for r in driver.check_health(devices) if r.device == KEY)


def test_a_live_controller_is_well_and_shows_its_temperature(conf,
                                                            scenario):
    _tree, driver, devices = _setup(conf, scenario, temperature=38,
                                    alarm=0)
    assert _check(driver, devices) == [(states.OK, '')]
    assert driver.usage(devices) == {KEY: {'temperature_celsius': 38.0}}


def test_states_and_the_temperature_alarm(conf, scenario):
    tree, driver, devices = _setup(conf, scenario, temperature=38, alarm=0)
    tree.set_nvme(SSD, state='resetting', temperature=38, alarm=0)
    assert _check(driver, devices) == [(states.TRANSIENT, 'nvme:resetting')]
    tree.set_nvme(SSD, state='live', temperature=81, alarm=1)
    assert _check(driver, devices) == [
        (states.TRANSIENT, 'nvme:temperature')]
    tree.set_nvme(SSD, state='dead', temperature=81, alarm=0)
    assert _check(driver, devices) == [(states.FATAL, 'nvme:dead')]


def test_a_controller_passed_through_has_pci_health_only(conf, scenario):
    tree = scenario('mixed')
    tree.set_driver(SSD, 'vfio-pci')
    driver = loader.load_driver(conf, 'h', 'inspur_nvme_ssd_driver')
    devices = driver.discover()
    assert _check(driver, devices) == [(states.OK, '')]
    assert driver.usage(devices) == {}
