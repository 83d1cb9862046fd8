"""Quotas from the real Keystone's unified limits (doc/source/quotas.rst):
cyborg-api and cyborg-conductor as processes with ``[quota]driver =
unified_limits``, reading the registered limits and project limits of the
``accelerator`` service in a region of their own through oslo.limit, on
MariaDB and on PostgreSQL."""

import json
import threading
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa

from tests.fixtures import deployment as deployment_fixture

QUOTA_VERSION = 'accelerator 2.7'


@pytest.fixture(scope='module', params=['mysql', 'postgresql'])
def quota_cloud(request, tmp_path_factory, keystone):
    region = 'quota-%s' % uuidlib.uuid4().hex[:8]
    quota = {'quota': {'driver': 'unified_limits'},
             'oslo_limit': keystone.limit_options(region)}
    apis = {'default': dict(deployment_fixture.NEW_DEFAULTS, **quota)}
    with deployment_fixture.Deployment(
            tmp_path_factory.mktemp('quotas'), keystone, apis=apis,
            conductor=quota, region=region,
            db_kind=request.param) as running:
        keystone.register_limit(region, 'accelerator_requests', 10)
        keystone.register_limit(region, 'class:FPGA', 8)
        engine = sa.create_engine(running.db_url,
                                  poolclass=sa.pool.NullPool)
        running.count_arqs = lambda project: _count(engine, project)
        running.profile = _profile(running, keystone, {'resources:FPGA': '1'})
        try:
            yield running
        finally:
            engine.dispose()


def _count(engine, project_id):
    with engine.connect() as connection:
        return connection.scalar(sa.text(
            'SELECT count(*) FROM extended_accelerator_requests '
            'WHERE project_id = :p'), {'p': project_id})


def _call(cloud, keystone, user, method, path, body=None, version=None):
    headers = {'X-Auth-Token': keystone.token(user)}
    if version:
        headers['OpenStack-API-Version'] = version
    return requests.request(method, cloud.url() + path, json=body,
                            headers=headers, timeout=60)


def _fault(response):
    return json.loads(response.json()['error_message'])['faultstring']


def _profile(cloud, keystone, group):
    name = 'q-%s' % uuidlib.uuid4().hex[:8]
    created = _call(cloud, keystone, 'demo-admin', 'POST',
                    '/device_profiles', [{'name': name, 'groups': [group]}])
    assert created.status_code == 201, created.text
    return name


def _create(cloud, keystone, user, profile=None):
    return _call(cloud, keystone, user, 'POST', '/accelerator_requests',
                 {'device_profile_name': profile or cloud.profile})


def _quota(cloud, keystone, user, project=None):
    path = '/quotas' + ('/' + project if project else '')
    response = _call(cloud, keystone, user, 'GET', path,
                     version=QUOTA_VERSION)
    assert response.status_code == 200, response.text
    return response.json()['quota']


@pytest.fixture
def clean(quota_cloud, keystone):
    """Every ARQ of the test projects is deleted after the test."""
    yield
    for user in ('demo-member', 'alt-member'):
        listed = _call(quota_cloud, keystone, user, 'GET',
                       '/accelerator_requests').json()['arqs']
        for arq in listed:
            _call(quota_cloud, keystone, user, 'DELETE',
                  '/accelerator_requests/' + arq['uuid'])


def test_a_quota_of_two_refuses_the_third_and_writes_nothing(
        quota_cloud, keystone, clean):
    cloud, demo = quota_cloud, keystone.project_id('demo')
    keystone.set_project_limit(cloud.region, 'demo', 'accelerator_requests',
                               2)
    for _ in range(2):
        created = _create(cloud, keystone, 'demo-member')
        assert created.status_code == 201, created.text
    assert cloud.count_arqs(demo) == 2

    refused = _create(cloud, keystone, 'demo-member')
    assert refused.status_code == 403, refused.text
    assert _fault(refused) == ('Quota exceeded for accelerator_requests: '
                               'limit 2, in use 2, requested 1')
    assert cloud.count_arqs(demo) == 2

    assert _quota(cloud, keystone, 'demo-reader') == {
        'project_id': demo, 'enforced': True,
        'resources': {'accelerator_requests': {'limit': 2, 'in_use': 2},
                      'class:FPGA': {'limit': 8, 'in_use': 2}}}

    # A limit changed in Keystone counts at the next request.
    keystone.set_project_limit(cloud.region, 'demo', 'accelerator_requests',
                               3)
    assert _create(cloud, keystone, 'demo-member').status_code == 201
    assert cloud.count_arqs(demo) == 3


def test_two_concurrent_creates_at_the_limit_leave_exactly_one(
        quota_cloud, keystone, clean):
    cloud, alt = quota_cloud, keystone.project_id('alt')
    keystone.set_project_limit(cloud.region, 'alt', 'accelerator_requests',
                               2)
    assert _create(cloud, keystone, 'alt-member').status_code == 201
    keystone.token('alt-member')    # one token for both, taken beforehand
    for _round in range(3):
        barrier = threading.Barrier(2, timeout=30)
        answers = []

        def create():
            barrier.wait()
            answers.append(_create(cloud, keystone, 'alt-member'))
        threads = [threading.Thread(target=create) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [201, 403], [a.text for a in answers]
        assert cloud.count_arqs(alt) == 2
        winner = next(a for a in answers if a.status_code == 201)
        deleted = _call(cloud, keystone, 'alt-member', 'DELETE',
                        '/accelerator_requests/'
                        + winner.json()['arqs'][0]['uuid'])
        assert deleted.status_code == 204, deleted.text


def test_accelerators_are_limited_by_resource_class(
        quota_cloud, keystone, clean):
    cloud, demo = quota_cloud, keystone.project_id('demo')
    keystone.set_project_limit(cloud.region, 'demo', 'accelerator_requests',
                               10)
    keystone.set_project_limit(cloud.region, 'demo', 'class:FPGA', 3)
    two_fpgas = _profile(cloud, keystone, {'resources:FPGA': '2'})
    try:
        assert _create(cloud, keystone, 'demo-member',
                       two_fpgas).status_code == 201
        refused = _create(cloud, keystone, 'demo-member', two_fpgas)
        assert refused.status_code == 403, refused.text
        assert _fault(refused) == ('Quota exceeded for class:FPGA: limit 3, '
                                   'in use 2, requested 2')
        assert cloud.count_arqs(demo) == 2
        # No registered limit for class:PGPU: not limited (the default
        # strategy requires one for accelerator_requests only).
        gpu = _profile(cloud, keystone, {'resources:PGPU': '4'})
        assert _create(cloud, keystone, 'demo-member',
                       gpu).status_code == 201
        assert _quota(cloud, keystone, 'demo-member')['resources'] == {
            'accelerator_requests': {'limit': 10, 'in_use': 6},
            'class:FPGA': {'limit': 3, 'in_use': 2},
            'class:PGPU': {'limit': -1, 'in_use': 4}}
    finally:
        keystone.set_project_limit(cloud.region, 'demo', 'class:FPGA', 8)


def test_who_sees_which_quota(quota_cloud, keystone, clean):
    cloud, alt = quota_cloud, keystone.project_id('alt')
    assert _create(cloud, keystone, 'alt-member').status_code == 201
    # An admin sees any project's, with its own limits: alt has none of
    # class:FPGA, so the registered default applies.
    seen = _quota(cloud, keystone, 'demo-admin', alt)
    assert seen['project_id'] == alt
    assert seen['resources']['class:FPGA'] == {'limit': 8, 'in_use': 1}
    assert _quota(cloud, keystone, 'alt-reader', alt) == seen
    denied = _call(cloud, keystone, 'demo-reader', 'GET', '/quotas/' + alt,
                   version=QUOTA_VERSION)
    assert denied.status_code == 403
    assert _fault(denied) == ('Access was denied to the following '
                              'resource: cyborg:quota:get')
