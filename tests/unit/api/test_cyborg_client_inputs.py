"""What OpenStack Cyborg took from its clients and we must take too:
python-cyborgclient's string group id and integer resource amounts, a
list of deployables longer than ``[api]max_limit`` at the clients'
microversion, and ``?bind_state=resolved`` without ``?instance=``."""

import json

import pytest
import webob

from tests.fixtures import api as api_fixture

ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin',
         'X-User-Id': 'u1'}
MEMBER = {'X-Roles': 'member,reader', 'X-Project-Id': 'p1',
          'X-User-Id': 'u2'}


def _call(service, method, path, body=None, version='2.0', headers=ADMIN):
    req = webob.Request.blank(path, method=method)
    req.headers.update(headers)
    req.headers['OpenStack-API-Version'] = 'accelerator ' + version
    if body is not None:
        req.body = json.dumps(body).encode()
        req.content_type = 'application/json'
    resp = req.get_response(service.app)
    body = resp.json if resp.body else None
    if resp.status_int >= 400:
        body = json.loads(body['error_message'])['faultstring']
    return resp.status_int, body


@pytest.fixture
def service():
    with api_fixture.api_service({('api', 'max_limit'): 1}) as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_FakeDevice')
        api_fixture.seed_device(
            service.engine, 'host2', 'host2_0000:3b:00.0',
            device_type='GPU', vendor='10de', handles=1,
            attributes={'rc': 'PGPU', 'trait0': 'CUSTOM_GPU_NVIDIA'})
        yield service


def _profile(service, groups, name='dp'):
    return _call(service, 'POST', '/v2/device_profiles',
                 [{'name': name, 'groups': groups}])


@pytest.mark.parametrize('group_id', ['0', '7', 0, None])
def test_arq_create_takes_the_group_id_cyborgclient_sends(service,
                                                          group_id):
    # cyborgclient 3.0.0's `arq create --group-id 0` sends "0".
    assert _profile(service, [{'resources:FPGA': '1'}])[0] == 201
    status, body = _call(service, 'POST', '/v2/accelerator_requests',
                         {'device_profile_name': 'dp',
                          'device_profile_group_id': group_id})
    assert status == 201, body
    assert [a['device_profile_group_id'] for a in body['arqs']] == [0]


@pytest.mark.parametrize('group_id', ['one', '-1', '', '0x1', '12345678901',
                                      -1, 1.5, True])
def test_arq_create_refuses_a_malformed_group_id(service, group_id):
    status, reason = _call(service, 'POST', '/v2/accelerator_requests',
                           {'device_profile_name': 'dp',
                            'device_profile_group_id': group_id})
    assert status == 400 and 'device_profile_group_id' in reason, reason


def test_an_integer_amount_is_stored_and_shown_as_its_string(service):
    status, body = _profile(service, [{'resources:FPGA': 2,
                                       'trait:CUSTOM_FAKE_DEVICE':
                                           'required'}])
    assert status == 201, body
    groups = [{'resources:FPGA': '2',
               'trait:CUSTOM_FAKE_DEVICE': 'required'}]
    assert body['groups'] == groups
    status, body = _call(service, 'GET', '/v2/device_profiles/dp',
                         version='2.2')
    assert body['device_profile']['groups'] == groups
    # Downstream sees the amount as before: two units, two ARQs.
    status, body = _call(service, 'POST', '/v2/accelerator_requests',
                         {'device_profile_name': 'dp'})
    assert status == 201 and len(body['arqs']) == 2


@pytest.mark.parametrize('amount', [0, -1, 1000, 1.5, True, '01', 'x'])
def test_an_amount_out_of_the_string_forms_range_is_refused(service,
                                                            amount):
    status, reason = _profile(service, [{'resources:FPGA': amount}])
    assert status == 400 and 'resources:FPGA' in reason, reason


def _names(body):
    return [d['name'] for d in body['deployables']]


@pytest.mark.parametrize('version', ['2.0', '2.3', '2.10'])
def test_below_2_11_every_deployable_is_listed(service, version):
    # [api]max_limit is 1: the clients ask 2.0 and follow no link.
    status, body = _call(service, 'GET', '/v2/deployables', version=version)
    assert status == 200 and len(_names(body)) == 2, body
    # A page when asked for, still capped by max_limit.
    status, body = _call(service, 'GET', '/v2/deployables?limit=5',
                         version=version)
    assert len(_names(body)) == 1 and 'deployables_links' not in body


def test_from_2_11_deployables_are_paged_and_linked(service):
    status, body = _call(service, 'GET', '/v2/deployables', version='2.11')
    assert len(_names(body)) == 1 and body['deployables_links'], body


@pytest.mark.parametrize('version', ['2.0', '2.11'])
def test_bind_state_alone_lists_the_resolved_arqs(service, version):
    ids = api_fixture.seed_binding_arqs(service.engine, 'p1')
    status, body = _call(service, 'GET',
                         '/v2/accelerator_requests?bind_state=resolved',
                         version=version, headers=MEMBER)
    assert status == 200, body
    # Bound only: the BindStarted one is not resolved.
    assert [a['uuid'] for a in body['arqs']] == [ids['bound_arq']]
    # Another project's resolved ARQs are not the caller's.
    status, body = _call(service, 'GET',
                         '/v2/accelerator_requests?bind_state=resolved',
                         version=version,
                         headers=dict(MEMBER, **{'X-Project-Id': 'p2'}))
    assert (status, body) == (200, {'arqs': []})
