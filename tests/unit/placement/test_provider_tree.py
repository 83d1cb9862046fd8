"""provider_tree: pure functions from rows to the wanted providers."""

import pytest

from cyborg.common import states
from cyborg.objects import inventory
from cyborg.placement import provider_tree

CN = '0f6a3a8e-52b1-4d39-9b47-2f3e8d0b5a11'


def _provider(status='enabled', gone=False, num=4, attributes=None,
              health=states.HEALTHY):
    deployable = {'name': 'h1_0000:81:00.0', 'num_accelerators': num,
                  'gone': gone}
    return provider_tree.provider_for(
        deployable, attributes or {'rc': 'FPGA', 'trait0': 'CUSTOM_X',
                                   'vendor_id': '8086'}, status, CN,
        health=health)


def test_provider_follows_the_contract_layout():
    p = _provider()
    assert p.uuid == inventory.provider_uuid('h1_0000:81:00.0')
    assert p.parent_uuid == CN
    assert p.inventories == {'FPGA': {
        'total': 4, 'reserved': 0, 'min_unit': 1, 'max_unit': 4,
        'step_size': 1, 'allocation_ratio': 1.0}}
    assert p.traits == {'CUSTOM_X', 'OWNER_CYBORG'}


def test_maintaining_or_gone_reserves_everything():
    assert _provider(status='maintaining').inventories['FPGA']['reserved'] \
        == 4
    assert _provider(gone=True).inventories['FPGA']['reserved'] == 4


@pytest.mark.parametrize('health', sorted(states.OUT_OF_SCHEDULE))
def test_out_of_schedule_health_reserves_everything_and_marks_it(health):
    p = _provider(health=health)
    assert p.inventories['FPGA']['reserved'] == 4
    assert p.traits == {'CUSTOM_X', 'OWNER_CYBORG', states.UNHEALTHY_TRAIT}
    assert states.UNHEALTHY_TRAIT in provider_tree.custom_names([p])[1]


@pytest.mark.parametrize('health', [states.HEALTHY, states.SUSPECT])
def test_schedulable_health_leaves_the_provider_alone(health):
    assert _provider(health=health) == _provider()


def test_maintaining_wins_over_health_and_health_still_shows():
    assert _provider(status='maintaining').traits == {'CUSTOM_X',
                                                      'OWNER_CYBORG'}
    sick = _provider(status='maintaining', health=states.UNHEALTHY)
    assert sick.inventories['FPGA']['reserved'] == 4
    assert states.UNHEALTHY_TRAIT in sick.traits


def test_no_rc_or_no_accelerators_means_no_inventory():
    assert _provider(attributes={'trait0': 'CUSTOM_X'}).inventories == {}
    assert _provider(num=0).inventories == {}


def test_custom_names_to_create_first():
    rcs, traits = provider_tree.custom_names([
        _provider(attributes={'rc': 'CUSTOM_QAT', 'trait0': 'CUSTOM_Q',
                              'trait1': 'HW_CPU_X86_AVX'}),
        _provider()])
    assert rcs == {'CUSTOM_QAT'}
    assert traits == {'CUSTOM_Q', 'CUSTOM_X'}


def test_inventories_differ_on_any_field_we_set():
    want = _provider().inventories
    same = {'FPGA': dict(want['FPGA'], allocation_ratio=1)}
    assert not provider_tree.inventories_differ(want, same)
    assert provider_tree.inventories_differ(
        want, {'FPGA': dict(want['FPGA'], reserved=4)})
    assert provider_tree.inventories_differ(want, {})
    assert provider_tree.inventories_differ(
        want, dict(same, VCPU=same['FPGA']))
