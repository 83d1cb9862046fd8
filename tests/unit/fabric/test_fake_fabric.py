"""Fabric drivers by name, and the fake fabric's rules: what it records,
an address attached to one host at a time, idempotent detach."""

import pytest

from cyborg.common import exception
from cyborg.fabric import base
from cyborg.fabric import fake
from cyborg.fabric import loader
from tests.fixtures import api as api_fixture

HANDLE = base.FabricHandle(uuid='h-1', fabric_address='nqn.x:ns1',
                           pool_name='pool')


@pytest.fixture
def driver(tmp_path):
    conf = api_fixture.make_conf({('fabric', 'fake_state_dir'):
                                  str(tmp_path)})
    return loader.get(conf, 'fake')


def test_drivers_load_by_entry_point_name(driver):
    assert isinstance(driver, fake.FakeFabricDriver)
    assert 'fake' in loader.names()
    with pytest.raises(exception.Invalid, match='no fabric driver named'):
        loader.get(driver.conf, 'no-such-fabric')


def test_attach_and_detach_are_recorded(driver, tmp_path):
    info = driver.attach(HANDLE, 'host-a', 'vm-1')
    assert info['target'] == 'nqn.x:ns1' and info['host'] == 'host-a'
    # Attaching again to the same host is fine (idempotent)...
    driver.attach(HANDLE, 'host-a', 'vm-1')
    # ...to another host is refused while attached.
    with pytest.raises(fake.FakeFabricError, match='attached to host-a'):
        driver.attach(HANDLE, 'host-b', 'vm-2')
    assert fake.attached(str(tmp_path)) == {'nqn.x:ns1': {
        'hostname': 'host-a', 'instance_uuid': 'vm-1', 'handle': 'h-1'}}
    driver.detach(HANDLE, 'host-a', 'vm-1')
    driver.detach(HANDLE, 'host-a', 'vm-1')
    assert fake.attached(str(tmp_path)) == {}
    assert [(e['op'], e['hostname']) for e in fake.journal(str(tmp_path))] \
        == [('attach', 'host-a'), ('attach', 'host-a'),
            ('attach', 'host-b'), ('detach', 'host-a'),
            ('detach', 'host-a')]


def test_fail_attach_and_no_state_dir(driver, tmp_path):
    (tmp_path / fake.FAIL_ATTACH).write_text('')
    with pytest.raises(fake.FakeFabricError, match='refused'):
        driver.attach(HANDLE, 'host-a', 'vm-1')
    unset = loader.get(api_fixture.make_conf(), 'fake')
    with pytest.raises(fake.FakeFabricError, match='fake_state_dir'):
        unset.attach(HANDLE, 'host-a', 'vm-1')
