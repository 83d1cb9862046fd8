"""An SR-IOV NIC's health follows its PF's link: VFs of a port that is
down carry no traffic (fake sysfs tree)."""

from cyborg.common import states
from tests.unit.drivers import conftest

PF = '0000:b1:00.0'
KEY = 'PCI:' + PF


def test_a_port_whose_link_is_down_is_out_while_it_is(discovered):
    tree, driver, devices = discovered(
        'nic', 'intel_nic_driver',
        lambda tree: tree.set_operstate(PF, 'ens801f0', 'up'))
    assert conftest.one_check(driver, devices, KEY)[0] == [(states.OK, '')]
    for state in ('lowerlayerdown', 'down'):
        tree.set_operstate(PF, 'ens801f0', state)
        [(severity, code)] = conftest.one_check(driver, devices, KEY)[0]
        assert (severity, code) == (states.FATAL, 'nic:link_down')
    [reading] = [r for r in driver.check_health(devices) if r.device == KEY]
    assert reading.reason == ('ens801f0 link is down: its VFs carry no '
                              'traffic')
    tree.set_operstate(PF, 'ens801f0', 'up')
    assert conftest.one_check(driver, devices, KEY)[0] == [(states.OK, '')]


def test_a_state_the_kernel_does_not_know_is_no_fault(discovered):
    # Some drivers never report their state ("unknown").
    tree, driver, devices = discovered(
        'nic', 'intel_nic_driver',
        lambda tree: tree.set_operstate(PF, 'ens801f0', 'unknown'))
    assert conftest.one_check(driver, devices, KEY)[0] == [(states.OK, '')]
