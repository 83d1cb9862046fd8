"""Who sees every project is decided by the policy's ``admin`` and
``service`` rules as the operator's policy file has them, not by the
names of the caller's roles.

An operator narrows ``admin`` to the cloud admin's project (the usual
fix of "admin anywhere is admin everywhere") and ``service`` to the
services' project: another project's admin, or a holder of the service
role elsewhere, then sees and changes only its own project's ARQs and
profiles, through the API and through the conductor; the narrowed-in
admin and service still see all.  With the defaults nothing changes.
"""

import json
import uuid as uuidlib

import pytest
import sqlalchemy as sa
import webob

from cyborg.common import context as cyborg_context
from cyborg.common import policy
from cyborg.db import models
from tests.fixtures import api as api_fixture

VERSION = {'OpenStack-API-Version': 'accelerator 2.5'}
# The admin of project tenant-b only, not the cloud admin.
TENANT_ADMIN = dict(VERSION, **{'X-Roles': 'admin,manager,member,reader',
                                'X-Project-Id': 'tenant-b',
                                'X-User-Id': 'bob'})
CLOUD_ADMIN = dict(TENANT_ADMIN, **{'X-Project-Id': 'cloud-admin',
                                    'X-User-Id': 'root'})
# The service role held in a project that is not the services'.
TENANT_SERVICE = dict(VERSION, **{'X-Roles': 'service,member,reader',
                                  'X-Project-Id': 'tenant-b',
                                  'X-User-Id': 'svc'})
SERVICE = dict(TENANT_SERVICE, **{'X-Project-Id': 'services'})
NARROWED = ('"admin": "role:admin and project_id:cloud-admin"\n'
            '"service": "role:service and project_id:services '
            'or is_service:True"\n')


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_FakeDevice')
        yield service


@pytest.fixture(scope='module')
def seeded(service):
    """ARQs of tenant-a (Bound, BindStarted, Initial) and one of tenant-b,
    and a private profile of tenant-a: their uuids."""
    ids = api_fixture.seed_binding_arqs(service.engine, 'tenant-a')
    with service.engine.begin() as c:
        profile_id = c.scalar(sa.select(models.DeviceProfile.id))
        for name, project in (('initial_arq', 'tenant-a'),
                              ('own_arq', 'tenant-b')):
            ids[name] = str(uuidlib.uuid4())
            c.execute(sa.insert(models.ExtARQ).values(
                uuid=ids[name], state='Initial', project_id=project,
                device_profile_id=profile_id, device_profile_group_id=0))
        ids['private_profile'] = str(uuidlib.uuid4())
        c.execute(sa.insert(models.DeviceProfile).values(
            uuid=ids['private_profile'], name='tenant-a-only',
            profile_json=json.dumps([{'resources:FPGA': '1'}]),
            project_id='tenant-a', visibility='private'))
    return ids


@pytest.fixture
def narrowed(service, tmp_path):
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text(NARROWED)
    policy.reset()
    policy.get_enforcer(service.conf)  # registers [oslo_policy]
    service.conf.set_override('policy_file', str(policy_file),
                              group='oslo_policy')
    policy.reset()
    yield
    service.conf.clear_override('policy_file', group='oslo_policy')
    policy.reset()


def _call(service, method, path, headers, body=None):
    req = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        req.headers['Content-Type'] = 'application/json'
        req.body = json.dumps(body).encode()
    return req.get_response(service.app)


def _projects(service, headers):
    resp = _call(service, 'GET', '/v2/accelerator_requests', headers)
    assert resp.status_int == 200, resp.text
    return {a['project_id'] for a in resp.json['arqs']}


def _profiles(service, headers):
    resp = _call(service, 'GET', '/v2/device_profiles', headers)
    assert resp.status_int == 200, resp.text
    return {p['name'] for p in resp.json['device_profiles']}


def _arqs_left(service):
    with service.engine.connect() as c:
        return set(c.scalars(sa.select(models.ExtARQ.uuid)))


def test_another_project_s_admin_is_no_admin_anywhere(service, seeded,
                                                      narrowed):
    # The policy refuses it the admin-only rules...
    assert _call(service, 'GET', '/v2/devices', dict(
        TENANT_ADMIN, **{'X-Roles': 'admin'})).status_int == 403
    # ...and the handlers show it its own project only (it was all).
    assert _projects(service, TENANT_ADMIN) == {'tenant-b'}
    for arq in ('bound_arq', 'initial_arq'):
        resp = _call(service, 'GET',
                     '/v2/accelerator_requests/' + seeded[arq],
                     TENANT_ADMIN)
        assert resp.status_int == 404, resp.text
    assert 'tenant-a-only' not in _profiles(service, TENANT_ADMIN)
    resp = _call(service, 'GET',
                 '/v2/device_profiles/' + seeded['private_profile'],
                 TENANT_ADMIN)
    assert resp.status_int == 404, resp.text
    resp = _call(service, 'POST', '/v2/accelerator_requests', TENANT_ADMIN,
                 {'device_profile_name': 'tenant-a-only'})
    assert resp.status_int == 404, resp.text


@pytest.mark.parametrize('path', [
    '/v2/accelerator_requests/{arq}',
    '/v2/accelerator_requests?arqs={arq}',
])
def test_another_project_s_admin_deletes_no_other_project_s_arq(
        service, seeded, narrowed, path):
    """The conductor decides the delete: the API's decision reaches it
    in the context."""
    before = _arqs_left(service)
    resp = _call(service, 'DELETE', path.format(arq=seeded['initial_arq']),
                 TENANT_ADMIN)
    assert resp.status_int == 404, resp.text
    assert _arqs_left(service) == before


def test_another_project_s_admin_may_not_bind_to_a_project(
        service, seeded, narrowed):
    """Naming the ARQ's project in a bind is an admin's (with the
    service token)."""
    arq = seeded['initial_arq']
    patch = {arq: [
        {'op': 'add', 'path': '/hostname', 'value': 'host1'},
        {'op': 'add', 'path': '/device_rp_uuid',
         'value': str(uuidlib.uuid4())},
        {'op': 'add', 'path': '/instance_uuid',
         'value': str(uuidlib.uuid4())},
        {'op': 'add', 'path': '/project_id', 'value': 'tenant-a'}]}
    resp = _call(service, 'PATCH', '/v2/accelerator_requests', dict(
        TENANT_ADMIN, **{'X-Service-Token': 'nova'}), patch)
    assert resp.status_int == 403, resp.text
    assert '(/project_id)' in resp.text


def test_the_service_role_elsewhere_sees_its_own_project(service, seeded,
                                                         narrowed):
    assert _projects(service, TENANT_SERVICE) == {'tenant-b'}
    # The services' project, and a service token anywhere, see all.
    assert _projects(service, SERVICE) == {'tenant-a', 'tenant-b'}
    assert _projects(service, dict(TENANT_SERVICE, **{
        'X-Roles': 'member,reader', 'X-Service-Token': 'nova'})) == {
            'tenant-a', 'tenant-b'}


def test_a_service_token_follows_the_service_rule(service, seeded,
                                                 tmp_path):
    """A service token sees every project as the ``service`` rule says,
    like any role: one that leaves tokens out (the services' project
    only) leaves a service token of another project its own project's
    ARQs.  (It saw every project whatever the rule said.)"""
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('"service": "role:service and '
                           'project_id:services"\n')
    policy.reset()
    policy.get_enforcer(service.conf)  # registers [oslo_policy]
    service.conf.set_override('policy_file', str(policy_file),
                              group='oslo_policy')
    policy.reset()
    try:
        with_token = dict(TENANT_SERVICE, **{'X-Roles': 'member,reader',
                                             'X-Service-Token': 'nova'})
        assert _projects(service, with_token) == {'tenant-b'}
        resp = _call(service, 'GET',
                     '/v2/accelerator_requests/' + seeded['initial_arq'],
                     with_token)
        assert resp.status_int == 404, resp.text
        # The services' project still sees all.
        assert _projects(service, SERVICE) == {'tenant-a', 'tenant-b'}
    finally:
        service.conf.clear_override('policy_file', group='oslo_policy')
        policy.reset()


def test_a_service_token_sees_every_project_by_default(service, seeded):
    """Nova's calls, a user's token with its service token: the default
    ``service`` rule passes them, whatever the user's project."""
    with_token = dict(TENANT_SERVICE, **{'X-Roles': 'member,reader',
                                         'X-Service-Token': 'nova'})
    assert _projects(service, with_token) == {'tenant-a', 'tenant-b'}


def test_the_narrowed_in_admin_still_sees_and_deletes_all(service, seeded,
                                                          narrowed):
    assert _projects(service, CLOUD_ADMIN) == {'tenant-a', 'tenant-b'}
    assert 'tenant-a-only' in _profiles(service, CLOUD_ADMIN)
    resp = _call(service, 'GET',
                 '/v2/device_profiles/' + seeded['private_profile'],
                 CLOUD_ADMIN)
    assert resp.status_int == 200, resp.text
    extra = str(uuidlib.uuid4())
    with service.engine.begin() as c:
        c.execute(sa.insert(models.ExtARQ).values(
            uuid=extra, state='Initial', project_id='tenant-a',
            device_profile_id=c.scalar(sa.select(models.DeviceProfile.id)),
            device_profile_group_id=0))
    resp = _call(service, 'DELETE', '/v2/accelerator_requests/' + extra,
                 CLOUD_ADMIN)
    assert resp.status_int == 204, resp.text
    assert extra not in _arqs_left(service)


def test_the_defaults_are_unchanged(service, seeded):
    """Any project's admin, and the service role, see every project."""
    for headers in (TENANT_ADMIN, TENANT_SERVICE):
        assert _projects(service, headers) == {'tenant-a', 'tenant-b'}
    assert 'tenant-a-only' in _profiles(service, TENANT_ADMIN)
    assert 'tenant-a-only' not in _profiles(service, TENANT_SERVICE)


def test_the_decision_travels_to_the_conductor():
    """The conductor reads the API's decision, not the role names; a
    context from an API of the previous release (no decision in it)
    is taken as that API decided, by the roles."""
    ctx = cyborg_context.RequestContext(project_id='p', roles=['service'],
                                        sees_every_project=False)
    received = cyborg_context.RequestContext.from_dict(ctx.to_dict())
    assert not received.sees_every_project
    ctx.sees_every_project = True
    assert cyborg_context.RequestContext.from_dict(
        ctx.to_dict()).sees_every_project
    older = ctx.to_dict()
    del older['sees_every_project']
    assert cyborg_context.RequestContext.from_dict(older).sees_every_project
    # Decided by nobody: an admin's or a service token's only.
    assert not cyborg_context.RequestContext(
        project_id='p', roles=['admin', 'service']).sees_every_project
    assert cyborg_context.get_admin_context().sees_every_project
    assert cyborg_context.RequestContext(
        project_id='p', is_service=True).sees_every_project
    assert ctx.elevated().sees_every_project
