"""One FPGA function, one trait: what the Intel driver reports for the
function it reads on a card is what the conductor advertises for one it
programmed (``inventory.function_trait``), however the id is spelt."""

import pytest

from cyborg.drivers import loader
from cyborg.objects import inventory

AFU = 'd8424dc4a4a3c413f89e433683f9040b'
# The same id as a Glance image's accel:function_id usually spells it.
GLANCE_ID = 'd8424dc4-a4a3-c413-f89e-433683f9040b'


@pytest.mark.parametrize('spelt', [
    AFU, GLANCE_ID, GLANCE_ID.upper(), AFU.upper(), f' {GLANCE_ID}\n'])
def test_a_uuid_gets_one_trait_however_it_is_spelt(spelt):
    assert inventory.function_trait(spelt) == \
        'CUSTOM_FPGA_FUNCTION_ID_D8424DC4_A4A3_C413_F89E_433683F9040B'


@pytest.mark.parametrize('function_id, trait', [
    ('crypto-1', 'CUSTOM_FPGA_FUNCTION_ID_CRYPTO_1'),
    ('f.new/1', 'CUSTOM_FPGA_FUNCTION_ID_F_NEW_1'),
    # Not UUID-shaped (dashes elsewhere, a digit short): kept as spelt.
    ('d8424dc4a4a3-c413-f89e-433683f9040b',
     'CUSTOM_FPGA_FUNCTION_ID_D8424DC4A4A3_C413_F89E_433683F9040B'),
    ('d8424dc4-a4a3-c413-f89e-433683f9040',
     'CUSTOM_FPGA_FUNCTION_ID_D8424DC4_A4A3_C413_F89E_433683F9040'),
])
def test_other_ids_are_made_placement_safe(function_id, trait):
    assert inventory.function_trait(function_id) == trait
    assert inventory.attribute_problem('trait0', trait) is None


def test_the_intel_driver_reports_the_trait_of_the_function_it_reads(
        conf, scenario):
    """The driver named a loaded function CUSTOM_FPGA_FUNCTION_ID_INTEL_
    <hex>, the conductor CUSTOM_FPGA_FUNCTION_ID_<ID>: a profile asking for
    the documented trait never matched a function loaded at boot or by
    hand.  The old name is still reported, for the profiles asking it."""
    tree = scenario('intel_fpga')
    tree.add_fpga_region('0000:d8:00.0', 'region3', afu_id=AFU)
    driver = loader.load_driver(conf, 'h', 'intel_fpga_driver')
    traits = {dep.name: dep.traits for dev in driver.discover()
              for dep in dev.deployables}['h_0000:d8:00.0']
    assert inventory.function_trait(GLANCE_ID) in traits
    assert 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + AFU.upper() in traits
