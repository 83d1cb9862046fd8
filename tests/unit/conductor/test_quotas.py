"""Quotas enforced when ARQs are created, on SQLite, MariaDB and
PostgreSQL: a refusal writes nothing, and concurrent creates of one
project cannot both pass a limit (the project's lock row,
cyborg.db.api.quotas).  The limits are given as Keystone would have
answered; tests/functional/cloud/test_quotas.py reads them from the real
Keystone."""

import contextlib
import json
import socket
import threading
import time

import pytest
import sqlalchemy as sa
import webob

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import quota
from cyborg.conductor import arq_binding
from cyborg.db import models
from cyborg.objects import quotas as quota_objects
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.fixtures import processes


@pytest.fixture(params=databases.KINDS)
def engine(request):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _ctx(project):
    return cyborg_context.RequestContext(project_id=project, user_id='u')


def _count(engine, model, project=None):
    query = sa.select(sa.func.count()).select_from(model)
    if project is not None:
        query = query.where(model.project_id == project)
    with engine.connect() as connection:
        return connection.scalar(query)


def _limits(**registered):
    return quota.Limits({k.replace('__', ':'): v
                         for k, v in registered.items()})


def _create(profile, project, limits):
    return arq_binding.create(_ctx(project), profile, project, limits=limits)


def test_a_quota_of_two_refuses_the_third_and_writes_nothing(engine):
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    limits = _limits(accelerator_requests=2)
    for _ in range(2):
        _create(profile, 'p1', limits)
    with pytest.raises(exception.QuotaExceeded) as info:
        _create(profile, 'p1', limits)
    assert info.value.code == 403
    assert str(info.value) == ('Quota exceeded for accelerator_requests: '
                               'limit 2, in use 2, requested 1')
    assert _count(engine, models.ExtARQ) == 2
    # Another project has a quota of its own.
    _create(profile, 'p2', limits)
    assert _count(engine, models.ExtARQ, 'p2') == 1


def test_project_ids_differing_in_case_have_quotas_of_their_own(engine):
    """MariaDB compared ARQ project ids ignoring case: ``DEMO`` was charged
    for, and counted, the ARQs of ``demo``."""
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    limits = _limits(accelerator_requests=2)
    for _ in range(2):
        _create(profile, 'demo', limits)
    _create(profile, 'DEMO', limits)
    assert quota_objects.usage(_ctx('DEMO'), 'DEMO') == {
        'accelerator_requests': 1, 'class:FPGA': 1}
    assert _count(engine, models.ExtARQ, 'DEMO') == 1


def test_a_create_that_would_go_over_is_refused_whole(engine):
    profile = seed.seed_profile(engine, [{'resources:FPGA': '2'},
                                         {'resources:PGPU': '1'}])
    limits = _limits(accelerator_requests=10, class__FPGA=3)
    assert len(_create(profile, 'p1', limits)) == 3
    with pytest.raises(exception.QuotaExceeded) as info:
        _create(profile, 'p1', limits)
    assert str(info.value) == ('Quota exceeded for class:FPGA: limit 3, '
                               'in use 2, requested 2')
    assert _count(engine, models.ExtARQ) == 3
    assert quota_objects.usage(_ctx('p1'), 'p1') == {
        'accelerator_requests': 3, 'class:FPGA': 2, 'class:PGPU': 1}


def test_deleting_arqs_frees_their_quota(engine):
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    limits = _limits(accelerator_requests=1)
    first = _create(profile, 'p1', limits)
    with pytest.raises(exception.QuotaExceeded):
        _create(profile, 'p1', limits)
    arq_binding.delete(None, _ctx('p1'), arq_uuids=[first[0]['uuid']])
    _create(profile, 'p1', limits)
    assert _count(engine, models.ExtARQ) == 1


def _race(profile, project, limits, creators=2):
    """Start ``creators`` creates at once; (created, refused)."""
    barrier = threading.Barrier(creators, timeout=30)
    outcomes, errors = [], []

    def create():
        barrier.wait()
        try:
            _create(profile, project, limits)
            outcomes.append('created')
        except exception.QuotaExceeded:
            outcomes.append('refused')
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
    threads = [threading.Thread(target=create) for _ in range(creators)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    return outcomes.count('created'), outcomes.count('refused')


def test_concurrent_creates_at_the_limit_leave_exactly_one(engine):
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    limits = _limits(accelerator_requests=3)
    # Several rounds, each of a new project: its first creates race to
    # insert its lock row too.
    for round_ in range(4):
        project = 'race-%d' % round_
        if round_ % 2:
            for _ in range(2):
                _create(profile, project, limits)
            assert _race(profile, project, limits) == (1, 1)
        else:
            assert _race(profile, project, limits, creators=5) == (3, 2)
        assert _count(engine, models.ExtARQ, project) == 3


def test_the_noop_driver_limits_nothing_and_writes_no_lock(conf, engine):
    assert conf.quota.driver == 'noop'
    profile = seed.seed_profile(engine, [{'resources:FPGA': '4'}])
    for _ in range(3):
        arq_binding.create(_ctx('p1'), profile, 'p1', conf=conf)
    assert _count(engine, models.ExtARQ) == 12
    assert _count(engine, models.QuotaLock) == 0


def test_arqs_of_no_project_are_not_limited(engine):
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    limits = _limits(accelerator_requests=0)
    arq_binding.create(_ctx(None), profile, None, limits=limits)
    assert _count(engine, models.QuotaLock) == 0


@contextlib.contextmanager
def _keystone_at(conf, port, **extra):
    """``conf`` with unified limits read from a Keystone on ``port``.
    oslo.limit reads [oslo_limit] from the global CONF, as in cyborg's
    processes."""
    from keystoneauth1 import loading as ks_loading
    from oslo_config import cfg
    from oslo_limit import limit

    global_conf = cfg.CONF
    global_conf.register_opts(
        ks_loading.get_auth_plugin_conf_options('password'),
        group='oslo_limit')
    options = {'auth_type': 'password', 'username': 'cyborg',
               'password': 'p', 'user_domain_id': 'default',
               'project_name': 'service', 'project_domain_id': 'default',
               'auth_url': 'http://127.0.0.1:%d/v3' % port,
               'endpoint_service_type': 'accelerator', **extra}
    conf.set_override('driver', 'unified_limits', group='quota')
    for name, value in options.items():
        global_conf.set_override(name, value, group='oslo_limit')
    try:
        yield conf
    finally:
        for name in options:
            global_conf.clear_override(name, group='oslo_limit')
        limit._SDK_CONNECTION = None
        quota._DRIVERS.clear()


@pytest.fixture
def unreachable_keystone(conf):
    """``conf`` with unified limits read from a Keystone that is not
    there."""
    with _keystone_at(conf, processes.free_port()) as conf:
        yield conf


def test_a_hung_keystone_holds_each_create_once_not_in_turn(conf):
    """A Keystone that takes connections and never answers: five creates
    at once waited for each other's attempt to reach it under one lock,
    the last five times [oslo_limit]timeout; then, each create waited
    it out again.  One attempt is made for all of them, and for a while
    after it failed creates are refused at once."""
    server = socket.socket()
    server.bind(('127.0.0.1', 0))
    server.listen(64)
    held = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return          # closed
    threading.Thread(target=accept, daemon=True).start()
    timeout = 1
    try:
        with _keystone_at(conf, server.getsockname()[1], timeout=timeout):
            driver = quota.get_driver(conf)
            waited = []

            def create(index):
                started = time.monotonic()
                with pytest.raises(exception.ServiceUnavailable):
                    driver.limits(f'p{index}')
                waited.append(time.monotonic() - started)
            creates = [threading.Thread(target=create, args=(index,))
                       for index in range(5)]
            for thread in creates:
                thread.start()
            for thread in creates:
                thread.join(60)
            assert len(waited) == 5
            # One attempt's requests (a few timeouts), not five in a row.
            assert max(waited) < 5 * timeout, waited
            started = time.monotonic()
            with pytest.raises(exception.ServiceUnavailable) as info:
                driver.limits('p9')
            assert time.monotonic() - started < timeout / 2
            assert 'asked again after' in str(info.value)
    finally:
        server.close()
        for connection in held:
            connection.close()


def test_limits_that_cannot_be_read_are_503_and_nothing_written(
        unreachable_keystone, db):
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    with pytest.raises(exception.ServiceUnavailable) as info:
        arq_binding.create(_ctx('p1'), profile, 'p1',
                           conf=unreachable_keystone)
    assert 'the limits in Keystone cannot be read' in str(info.value)
    assert _count(db, models.ExtARQ) == 0
    assert _count(db, models.QuotaLock) == 0


def test_a_503_names_no_keystone_address_the_log_does(unreachable_keystone,
                                                      caplog):
    """keystoneauth's error names Keystone's URL ([oslo_limit]auth_url,
    often an internal one), its host and port; the 503 goes to any
    project member creating ARQs or reading quotas.  It says only that
    the limits cannot be read, the first time and within the fail-fast
    window; the WARNING says the rest, for the operator."""
    address = _keystone_address()
    driver = quota.get_driver(unreachable_keystone)
    refused = []
    with caplog.at_level('WARNING'):
        for _ in range(2):
            with pytest.raises(exception.ServiceUnavailable) as info:
                driver.limits('p1')
            refused.append(str(info.value))
    first, again = refused
    assert quota.UNREADABLE in first and 'asked again after' in again
    for reason in refused:
        assert address not in reason and '://' not in reason, reason
        assert 'Connect' not in reason, reason
    logged = [r.getMessage() for r in caplog.records
              if r.name == quota.LOG.logger.name]
    assert len(logged) == 1 and address in logged[0], logged


def test_a_member_s_503_body_names_no_keystone_address():
    """Through the API: a member's create and quota view."""
    member = {'X-Project-Id': 'p1', 'X-User-Id': 'u',
              'X-Roles': 'member,reader', 'Content-Type': 'application/json',
              'OpenStack-API-Version': 'accelerator latest'}
    with api_fixture.api_service() as service, \
            _keystone_at(service.conf, processes.free_port()):
        address = _keystone_address()
        seed.seed_profile(service.engine, [{'resources:FPGA': '1'}],
                          name='dp')
        create = webob.Request.blank('/v2/accelerator_requests',
                                     method='POST', headers=member)
        create.body = json.dumps({'device_profile_name': 'dp'}).encode()
        view = webob.Request.blank('/v2/quotas', headers=member)
        for request in (create, view):
            response = request.get_response(service.app)
            assert response.status_int == 503, response.text
            assert quota.UNREADABLE in response.text
            assert address not in response.text, response.text
            assert '://' not in response.text, response.text


def _keystone_address():
    """host:port of the [oslo_limit]auth_url in use."""
    from oslo_config import cfg
    return cfg.CONF.oslo_limit.auth_url.split('//', 1)[1].split('/')[0]
