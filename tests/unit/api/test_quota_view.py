"""The quota view names what limits a project: a resource the
``require`` strategy lists has limit 0 unless Keystone registers one, and
creates asking for it are refused ("limit 0"), so the view shows it
(it was left out: the refusal named a resource the quota did not)."""

from cyborg.api.views import quotas as view
from cyborg.common import quota
from cyborg.conf import quota as quota_conf


def test_a_resource_the_strategy_requires_is_shown_with_limit_0():
    limits = quota.Limits(registered={'class:PGPU': 4},
                          strategy=quota_conf.REQUIRE,
                          listed=['class:FPGA', 'class:PGPU'])
    shown = view.show('p1', limits, {})['quota']['resources']
    assert shown['class:FPGA'] == {'limit': 0, 'in_use': 0}
    assert shown['class:PGPU'] == {'limit': 4, 'in_use': 0}
    assert shown[quota.ARQS]['limit'] == quota.UNLIMITED


def test_nothing_required_by_name_when_quotas_are_not_enforced():
    limits = quota.Limits(strategy=quota_conf.REQUIRE,
                          listed=['class:FPGA'], enforced=False)
    assert 'class:FPGA' not in view.show('p1', limits, {})['quota'][
        'resources']
