"""Unified limits with a Keystone that oslo.limit cannot take cyborg's
limits from, with the real Keystone (tests/fixtures/keystone.py): every
create answers 503 saying why, and the failure is remembered for the
fail-fast window like Keystone's outages (doc/source/quotas.rst).

- ``[oslo_limit]endpoint_service_type`` without ``endpoint_region_name``
  while the catalogue holds the service's endpoints in several regions:
  oslo.limit finds several, and said only "Multiple endpoints found".
- A Keystone enforcing another model than flat (a Keystone of its own,
  ``[unified_limit]enforcement_model = strict_two_level``).

oslo.limit reads ``[oslo_limit]`` from the global configuration, as in
cyborg's processes: the tests set it there.
"""

import contextlib
import os
import signal
import threading

from keystoneauth1 import loading as ks_loading
from oslo_limit import limit
import pytest

import cyborg.conf
from cyborg.common import exception
from cyborg.common import quota
from tests.fixtures import keystone as keystone_fixture

# An accelerator endpoint nothing listens on: only the catalogue counts.
ENDPOINT = 'http://127.0.0.1:9/accelerator'


@contextlib.contextmanager
def _unified_limits(keystone, region):
    """The global configuration reading the limits of the accelerator
    endpoint in ``region`` (None: no endpoint_region_name) from
    ``keystone``."""
    conf = cyborg.conf.CONF
    conf.register_opts(ks_loading.get_auth_plugin_conf_options('password'),
                       group='oslo_limit')
    options = dict(keystone.limit_options(region),
                   endpoint_region_name=region)
    conf.set_override('driver', 'unified_limits', group='quota')
    for name, value in options.items():
        conf.set_override(name, value, group='oslo_limit')
    limit._SDK_CONNECTION = None
    quota._DRIVERS.clear()
    try:
        yield conf
    finally:
        conf.clear_override('driver', group='quota')
        for name in options:
            conf.clear_override(name, group='oslo_limit')
        limit._SDK_CONNECTION = None
        quota._DRIVERS.clear()


def _all_refused(driver, creates=5):
    """The 503s of ``creates`` concurrent reads of the limits."""
    barrier = threading.Barrier(creates, timeout=30)
    refused = []

    def create(index):
        barrier.wait()
        try:
            driver.limits('project-%d' % index)
        except exception.ServiceUnavailable as exc:
            refused.append(str(exc))
    threads = [threading.Thread(target=create, args=(index,))
               for index in range(creates)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(refused) == creates, refused
    return refused


@pytest.fixture(autouse=True)
def long_window(monkeypatch):
    """A fail-fast window no slow machine outlasts between two rounds."""
    monkeypatch.setattr(quota, 'FAIL_FAST_SECONDS', 60.0)


def test_endpoints_in_several_regions_without_a_region_are_named(
        keystone):
    regions = [keystone.add_endpoints({'accelerator': ENDPOINT})
               for _ in range(2)]
    says = ('[oslo_limit] endpoint_service_type accelerator has public '
            'endpoints in ', 'and endpoint_region_name is not set: set it '
            'to the region whose limits are this deployment\'s (or set '
            'endpoint_id)')
    with _unified_limits(keystone, None) as conf:
        driver = quota.get_driver(conf)
        first, second = _all_refused(driver), _all_refused(driver)
        for refused in first + second:
            assert all(part in refused for part in says), refused
        # The second round was refused at once, from what the first
        # learnt.
        assert all('asked again after' in r for r in second), second
        # What cyborg-status upgrade check would say (other tests add
        # regions meanwhile: the number may differ).
        problem = quota.keystone_problem(conf)
        assert problem.startswith(says[0]) and problem.endswith(says[1])

    # With the region the limits are read.
    with _unified_limits(keystone, regions[0]) as conf:
        assert quota.keystone_problem(conf) is None
        limits = quota.get_driver(conf).limits('project-1')
        assert limits.enforced and limits.names() == set()


@pytest.fixture(scope='module')
def strict_keystone(tmp_path_factory):
    """A Keystone of its own enforcing the strict two-level model (the
    run's stays flat), stopped after the module."""
    run_dir = tmp_path_factory.mktemp('strict-keystone')
    with pytest.MonkeyPatch.context() as patch:
        # oslo.config reads OS_<GROUP>__<OPTION> from the environment,
        # which the Keystone server inherits.
        patch.setenv('OS_UNIFIED_LIMIT__ENFORCEMENT_MODEL',
                     'strict_two_level')
        state = keystone_fixture.start(run_dir, os.getpid())
    try:
        yield keystone_fixture.Keystone(state['url'], state)
    finally:
        os.kill(state['watchdog'], signal.SIGTERM)  # stops the server
        os.waitpid(state['watchdog'], 0)


@pytest.mark.parametrize('knows_the_model', [False, True])
def test_a_model_other_than_flat_is_remembered_and_named(
        strict_keystone, monkeypatch, knows_the_model):
    """oslo.limit (2.12) spells the model strict-two-level where Keystone
    says strict_two_level, and refuses it as unknown; one that spells it
    as Keystone does makes an enforcer of it, which cyborg refuses."""
    if knows_the_model:
        monkeypatch.setattr(limit._StrictTwoLevelEnforcer, 'name',
                            'strict_two_level')
    region = strict_keystone.add_endpoints({'accelerator': ENDPOINT})
    with _unified_limits(strict_keystone, region) as conf:
        driver = quota.get_driver(conf)
        reason = ('Keystone enforces limits with the strict_two_level '
                  'model; cyborg supports the flat model only')
        # Those that waited for the one attempt, and every create of the
        # window after it, without asking Keystone again.
        first, second = _all_refused(driver), _all_refused(driver)
        for refused in first + second:
            assert reason in refused, refused
        assert all('asked again after' in r for r in second), second
        assert reason in quota.keystone_problem(conf)
