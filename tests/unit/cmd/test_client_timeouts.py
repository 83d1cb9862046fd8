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


def test_token_validation_times_out_by_default(conf):
    """keystonemiddleware waits for Keystone forever unless told: cyborg
    tells it ([keystone_authtoken]http_connect_timeout), and the session
    it validates tokens with carries that timeout."""
    from keystonemiddleware import auth_token

    from cyborg.api import auth
    from cyborg.conf import api as api_conf

    auth.register_keystone_opts(conf)
    assert conf.keystone_authtoken.http_connect_timeout == \
        api_conf.KEYSTONE_TIMEOUT > 0
    protocol = auth_token.AuthProtocol(lambda env, start: [],
                                       {'oslo_config_config': conf})
    assert protocol._session.timeout == api_conf.KEYSTONE_TIMEOUT


def test_limits_are_read_with_a_timeout_by_default(conf):
    """oslo.limit's session reads [oslo_limit], whose timeout keystoneauth
    leaves unset (forever)."""
    from cyborg.conf import quota as quota_conf

    session = ks_loading.load_session_from_conf_options(
        conf, quota_conf.LIMIT_GROUP)
    assert session.timeout == quota_conf.LIMIT_TIMEOUT > 0


def test_the_sample_shows_the_timeouts_cyborg_runs_with():
    from cyborg.conf import opts

    listed = {(group, opt.dest): opt.default
              for group, group_opts in opts.list_opts()
              for opt in group_opts}
    assert listed[('keystone_authtoken', 'http_connect_timeout')] == 10
    assert listed[('oslo_limit', 'timeout')] == 10
