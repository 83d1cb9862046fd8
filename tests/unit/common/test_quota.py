"""Quota resources, how usage is counted and how limits apply
(doc/source/quotas.rst)."""

import pytest

from cyborg.common import exception
from cyborg.common import quota


def test_a_profile_requests_one_arq_per_unit_and_its_classes():
    groups = [{'resources:FPGA': '2', 'trait:CUSTOM_X': 'required'},
              {'resources:CUSTOM_A': '1', 'resources:PGPU': '1'},
              {'resources:FPGA': '1', 'accel:bitstream_id': 'b'}]
    assert quota.requested(groups) == {
        'accelerator_requests': 5, 'class:FPGA': 3, 'class:CUSTOM_A': 1,
        'class:PGPU': 1}


def test_zero_amounts_request_nothing():
    assert quota.requested([{'resources:FPGA': '0'}]) == {
        'accelerator_requests': 0}


def test_usage_of_whole_groups_is_what_they_requested():
    groups = [{'resources:FPGA': '2'},
              {'resources:CUSTOM_A': '1', 'resources:PGPU': '2'}]
    # Two creates of the profile: 4 ARQs of group 0 and 6 of group 1.
    held = [(groups, 0, 4), (groups, 1, 6)]
    assert quota.usage(held) == {'accelerator_requests': 10,
                                 'class:FPGA': 4, 'class:CUSTOM_A': 2,
                                 'class:PGPU': 4}
    assert quota.usage(held) == {
        name: 2 * amount for name, amount in quota.requested(groups).items()}


def test_a_group_partly_deleted_is_rounded_up():
    groups = [{'resources:CUSTOM_A': '1', 'resources:PGPU': '2'}]
    # One ARQ of three left: a third of each class, rounded up.
    assert quota.usage([(groups, 0, 1)]) == {
        'accelerator_requests': 1, 'class:CUSTOM_A': 1, 'class:PGPU': 1}


def test_a_bad_profile_row_counts_its_arqs_only():
    held = [(quota.groups_of('not json'), 0, 2),
            (quota.groups_of('{"a": 1}'), 1, 1)]
    assert quota.usage(held) == {'accelerator_requests': 3}


def test_no_arqs_no_usage():
    assert quota.usage([]) == {'accelerator_requests': 0}


def _limits(registered=None, project=None, strategy='require',
            listed=('accelerator_requests',)):
    return quota.Limits(registered, project, strategy, listed)


def test_a_project_limit_wins_over_the_registered_default():
    limits = _limits({'accelerator_requests': 10, 'class:FPGA': 4},
                     {'accelerator_requests': 2})
    assert limits.limit('accelerator_requests') == 2
    assert limits.limit('class:FPGA') == 4
    assert limits.names() == {'accelerator_requests', 'class:FPGA'}


def test_minus_one_is_unlimited():
    limits = _limits({'accelerator_requests': -1}, {'class:FPGA': -1})
    assert limits.limit('accelerator_requests') is None
    assert limits.limit('class:FPGA') is None


@pytest.mark.parametrize('strategy, listed_limit, other_limit', [
    ('require', 0, None),
    ('ignore', None, 0),
])
def test_the_strategy_decides_for_resources_keystone_has_no_limit_for(
        strategy, listed_limit, other_limit):
    limits = _limits(strategy=strategy, listed=('accelerator_requests',))
    assert limits.limit('accelerator_requests') == listed_limit
    assert limits.limit('class:FPGA') == other_limit


def test_no_limits_when_not_enforced():
    assert quota.NO_LIMITS.limit('accelerator_requests') is None
    quota.NO_LIMITS.check({'accelerator_requests': 10 ** 6},
                          {'accelerator_requests': 1})


def test_check_names_the_limit_the_usage_and_the_request():
    limits = _limits({'accelerator_requests': 2})
    limits.check({'accelerator_requests': 1}, {'accelerator_requests': 1})
    with pytest.raises(exception.QuotaExceeded) as info:
        limits.check({'accelerator_requests': 2},
                     {'accelerator_requests': 1})
    assert info.value.code == 403
    assert str(info.value) == ('Quota exceeded for accelerator_requests: '
                               'limit 2, in use 2, requested 1')


def test_check_names_every_resource_over_and_only_those():
    limits = _limits({'accelerator_requests': 10, 'class:FPGA': 3,
                      'class:PGPU': 5})
    with pytest.raises(exception.QuotaExceeded) as info:
        limits.check({'accelerator_requests': 9, 'class:FPGA': 2},
                     {'accelerator_requests': 2, 'class:FPGA': 2,
                      'class:PGPU': 0})
    assert str(info.value) == (
        'Quota exceeded for accelerator_requests: limit 10, in use 9, '
        'requested 2; for class:FPGA: limit 3, in use 2, requested 2')


def test_a_resource_not_requested_is_not_checked():
    limits = _limits({'accelerator_requests': 10, 'class:PGPU': 0})
    limits.check({'class:PGPU': 5}, {'accelerator_requests': 1,
                                     'class:FPGA': 1, 'class:PGPU': 0})


def test_noop_is_the_default(conf):
    driver = quota.get_driver(conf)
    assert driver.enforced is False
    assert driver.limits('p1') is quota.NO_LIMITS
    assert quota.config_problem(conf) is None


def test_unified_limits_needs_credentials_and_an_endpoint(conf):
    conf.set_override('driver', 'unified_limits', group='quota')
    assert 'auth_type' in quota.config_problem(conf)
    conf.set_override('auth_type', 'password', group='oslo_limit')
    assert 'endpoint' in quota.config_problem(conf)
    conf.set_override('endpoint_service_type', 'accelerator',
                      group='oslo_limit')
    assert quota.config_problem(conf) is None
    assert quota.get_driver(conf) is quota.get_driver(conf)
    assert quota.get_driver(conf).enforced is True
