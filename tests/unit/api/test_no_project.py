"""A caller with no project (noauth without ``X-Project-Id``) owns
nothing: it passes no rule of a project and sees no project's ARQs, while
admins and services, which need no project, and the all-in-one's operator
(no identity headers at all) keep working."""

import json

import pytest
import sqlalchemy as sa
import webob

from cyborg.common import policy
from cyborg.db import models
from tests.fixtures import api as api_fixture

# Every role but admin and service, and no project.
NO_PROJECT = {'X-Roles': 'manager,member,reader', 'X-User-Id': 'u1'}


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_FakeDevice')
        yield service


@pytest.fixture(scope='module')
def arqs(service):
    """A binding ARQ of p-one and a bound one of p-two (their uuids)."""
    ids = api_fixture.seed_binding_arqs(service.engine, 'p-one')
    with service.engine.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == ids['bound_arq']).values(
                project_id='p-two'))
    return {ids['binding_arq'], ids['bound_arq']}


def _call(service, method, path, headers, body=None):
    req = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        req.headers['Content-Type'] = 'application/json'
        req.body = json.dumps(body).encode()
    return req.get_response(service.app)


def _fault(resp):
    return json.loads(resp.json['error_message'])['faultstring']


def _left(service):
    with service.engine.connect() as c:
        return set(c.scalars(sa.select(models.ExtARQ.uuid)))


def _listed(resp):
    assert resp.status_int == 200, resp.text
    return {a['uuid'] for a in resp.json['arqs']}


def test_no_project_is_refused_the_arq_list(service, arqs):
    """It was every project's ARQs."""
    resp = _call(service, 'GET', '/v2/accelerator_requests', NO_PROJECT)
    assert resp.status_int == 403, resp.text
    assert _fault(resp).endswith('cyborg:arq:get_all')


@pytest.mark.parametrize('method, path, body, rule', [
    ('GET', '/v2/accelerator_requests/{arq}', None, 'cyborg:arq:get_one'),
    ('DELETE', '/v2/accelerator_requests/{arq}', None, 'cyborg:arq:delete'),
    ('DELETE', '/v2/accelerator_requests?arqs={arq}', None,
     'cyborg:arq:delete'),
    ('POST', '/v2/accelerator_requests',
     {'device_profile_name': 'seeded-dp'}, 'cyborg:arq:create'),
    ('GET', '/v2/device_profiles', None, 'cyborg:device_profile:get_all'),
    ('GET', '/v2/devices', None, 'cyborg:device:get_all'),
    ('GET', '/v2/deployables', None, 'cyborg:deployable:get_all'),
    ('GET', '/v2/attributes', None, 'cyborg:attribute:get_all'),
])
def test_no_project_passes_no_project_rule(service, arqs, method, path,
                                           body, rule):
    arq = sorted(arqs)[0]
    before = _left(service)
    resp = _call(service, method, path.format(arq=arq), NO_PROJECT, body)
    assert resp.status_int == 403, resp.text
    assert _fault(resp).endswith(rule)
    assert _left(service) == before


@pytest.mark.parametrize('path', ['/v2/quotas', '/v2/quotas/None'])
def test_no_project_reads_no_quota(service, path):
    """Not even that of a project named as its missing one prints."""
    resp = _call(service, 'GET', path,
                 dict(NO_PROJECT, **{'OpenStack-API-Version':
                                     'accelerator 2.7'}))
    assert resp.status_int == 403, resp.text
    assert _fault(resp).endswith('cyborg:quota:get')


@pytest.mark.parametrize('headers', [
    {},                                 # the all-in-one's operator
    {'X-Roles': 'admin', 'X-User-Id': 'u1'},
    {'X-Roles': 'service', 'X-User-Id': 'k8s'},
], ids=['no-identity', 'admin', 'service'])
def test_admins_and_services_need_no_project(service, arqs, headers):
    assert _listed(_call(service, 'GET', '/v2/accelerator_requests',
                         headers)) >= arqs
    shown = _call(service, 'GET',
                  '/v2/accelerator_requests/' + sorted(arqs)[0], headers)
    assert shown.status_int == 200, shown.text


@pytest.fixture
def readers_may_list(service, tmp_path):
    """An operator's policy letting any reader list and delete ARQs,
    project or not."""
    policy_file = tmp_path / 'policy.yaml'
    policy_file.write_text('"cyborg:arq:get_all": "role:reader"\n'
                           '"cyborg:arq:get_one": "role:reader"\n'
                           '"cyborg:arq:delete": "role:reader"\n')
    policy.reset()
    policy.get_enforcer(service.conf)  # registers [oslo_policy]
    service.conf.set_override('policy_file', str(policy_file),
                              group='oslo_policy')
    policy.reset()
    yield
    service.conf.clear_override('policy_file', group='oslo_policy')
    policy.reset()


@pytest.mark.parametrize('method, path', [
    ('GET', '/v2/accelerator_requests'),
    ('GET', '/v2/accelerator_requests/{arq}'),
    ('DELETE', '/v2/accelerator_requests?arqs={arq}'),
])
def test_a_policy_letting_no_project_in_still_shows_no_arq(
        service, arqs, readers_may_list, method, path):
    """The ARQs a caller sees are its project's: with none, none, even
    where the policy lets it in (it was every project's)."""
    before = _left(service)
    resp = _call(service, method, path.format(arq=sorted(arqs)[0]),
                 NO_PROJECT)
    assert resp.status_int == 403, resp.text
    assert 'the request names no project' in _fault(resp)
    assert _left(service) == before
    # A reader of a project still sees that project's ARQs.
    mine = _listed(_call(service, 'GET', '/v2/accelerator_requests',
                         dict(NO_PROJECT, **{'X-Project-Id': 'p-one'})))
    assert mine and mine < arqs


@pytest.mark.parametrize('headers', [
    {'X-Tenant-Id': 'p-three', 'X-Role': 'reader', 'X-User': 'bob'},
    {'X-Tenant': 'p-three', 'X-Role': 'reader'},
    {'X-Role': 'reader'},
    {'OpenStack-System-Scope': 'all', 'X-Role': 'reader'},
], ids=['tenant-id', 'tenant', 'role-only', 'system-scope'])
def test_older_identity_header_names_are_no_operator(service, arqs,
                                                     headers):
    """oslo.context reads X-Tenant-Id, X-Tenant, X-User and X-Role too; a
    request naming its identity only with those was taken for one naming
    none, the all-in-one's operator: an admin of project 'admin'."""
    before = _left(service)
    resp = _call(service, 'POST', '/v2/device_profiles', headers,
                 [{'name': 'by-a-reader', 'groups': [
                     {'resources:FPGA': '1'}]}])
    assert resp.status_int == 403, resp.text
    assert _fault(resp).endswith('cyborg:device_profile:create')
    listed = _call(service, 'GET', '/v2/accelerator_requests', headers)
    assert listed.status_int == 403 or not (_listed(listed) & arqs)
    assert _left(service) == before
