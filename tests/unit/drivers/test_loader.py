import pytest

from cyborg.common import exception
from cyborg.drivers import base, loader


def test_loads_enabled_drivers_in_order(conf):
    conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
    drivers = loader.load_drivers(conf, 'h')
    assert list(drivers) == ['fake_driver']
    assert isinstance(drivers['fake_driver'], base.Driver)
    assert drivers['fake_driver'].host == 'h'


def test_no_driver_is_enabled_by_default(conf, caplog):
    """As in OpenStack Cyborg: an agent whose configuration leaves the
    option out loaded the fake driver, and offered its fake FPGA to the
    real Placement."""
    caplog.set_level('WARNING', logger='cyborg.drivers.loader')
    conf.clear_override('enabled_drivers', group='agent')
    assert loader.load_drivers(conf, 'h') == {}
    assert 'No accelerator driver is enabled' in caplog.text


def test_unknown_driver_is_a_clear_error(conf):
    conf.set_override('enabled_drivers', ['no_such_driver'], 'agent')
    with pytest.raises(exception.InvalidParameterValue,
                       match='no_such_driver'):
        loader.load_drivers(conf, 'h')


def test_custom_names_are_in_placement_alphabet():
    assert base.custom_name('intel', 'pac-a10 v1.2') == \
        'CUSTOM_INTEL_PAC_A10_V1_2'
    assert base.custom_name('CUSTOM_x') == 'CUSTOM_X'
    attrs = base.make_attributes('PGPU', ['nvidia.a100', 'CUSTOM_B'],
                                 numa_node=1, absent=None)
    assert attrs == {'rc': 'PGPU', 'trait0': 'CUSTOM_B',
                     'trait1': 'CUSTOM_NVIDIA_A100', 'numa_node': '1'}
