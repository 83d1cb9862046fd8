"""Every service cyborg calls over HTTP is waited for a bounded time by
default (keystoneauth's own default is forever), and a bind's Placement
lookup gives up before the API gives up on the conductor."""

import pytest
from keystoneauth1 import loading as ks_loading


@pytest.mark.parametrize('group', ['placement', 'nova', 'glance'])
def test_sessions_time_out_by_default(conf, group):
    session = ks_loading.load_session_from_conf_options(conf, group)
    assert session.timeout and session.timeout > 0


def test_a_bind_hears_from_placement_before_the_api_gives_up(conf):
    assert conf.placement.timeout < conf.api.conductor_timeout
