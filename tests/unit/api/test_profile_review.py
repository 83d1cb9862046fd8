"""Device profiles: a trait Placement can never know is refused at
create (every boot with the profile failed NoValidHost), a project a
private profile is shared with does not learn which others are, and
DELETE ?value= finds a uuid in any spelling as the path does."""

import json

import pytest
import webob

from tests.fixtures import api as api_fixture

ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin',
         'X-User-Id': 'u1', 'OpenStack-API-Version': 'accelerator latest'}


def _member(project):
    return {'X-Roles': 'member,reader', 'X-Project-Id': project,
            'X-User-Id': 'u', 'OpenStack-API-Version': 'accelerator 2.5'}


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        yield service


def _request(service, method, path, body=None, headers=ADMIN):
    req = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        req.headers['Content-Type'] = 'application/json'
        req.body = json.dumps(body).encode()
    resp = req.get_response(service.app)
    return resp.status_int, resp.json if resp.body else None


@pytest.mark.parametrize('trait, status', [
    ('FPGA_FAST', 400),                 # neither standard nor CUSTOM_
    ('CUSTOM_FPGA_FAST', 201),
    ('HW_CPU_X86_AVX2', 201),           # standard (os-traits)
    ('OWNER_CYBORG', 201)])
def test_a_trait_placement_can_never_know_is_refused(service, trait,
                                                     status):
    got, body = _request(service, 'POST', '/v2/device_profiles', [
        {'name': 'traits-' + trait.lower().replace('_', '-'), 'groups': [
            {'resources:FPGA': '1', f'trait:{trait}': 'required'}]}])
    assert got == status, body
    if status == 400:
        assert f'trait:{trait}' in json.dumps(body), body


def test_a_shared_project_sees_no_other(service):
    got, body = _request(service, 'POST', '/v2/device_profiles', [
        {'name': 'lic', 'visibility': 'private',
         'projects': ['tenant-a', 'tenant-b'],
         'groups': [{'resources:FPGA': '1'}]}])
    assert got == 201, body
    got, body = _request(service, 'GET', '/v2/device_profiles/lic',
                         headers=_member('tenant-a'))
    assert got == 200, body
    assert body['device_profile']['projects'] == ['tenant-a']
    got, body = _request(service, 'GET', '/v2/device_profiles?name=lic',
                         headers=_member('tenant-b'))
    assert [p['projects'] for p in body['device_profiles']] == [
        ['tenant-b']]
    # The owner's project and admins see them all.
    got, body = _request(service, 'GET', '/v2/device_profiles/lic')
    assert sorted(body['device_profile']['projects']) == [
        'tenant-a', 'tenant-b']


def test_delete_by_value_finds_a_uuid_in_any_spelling(service):
    uuid = '0f0e1d2c-3b4a-4958-8776-a5b4c3d2e1f0'
    got, body = _request(service, 'POST', '/v2/device_profiles', [
        {'name': 'spelt', 'uuid': uuid,
         'groups': [{'resources:FPGA': '1'}]}])
    assert got == 201, body
    got, body = _request(service, 'DELETE', '/v2/device_profiles?value='
                         + uuid.replace('-', '').upper())
    assert got == 204, body
    got, _body = _request(service, 'GET', '/v2/device_profiles/' + uuid)
    assert got == 404


def test_a_function_id_too_long_for_a_trait_is_refused(service):
    """An ``accel:function_id`` whose trait Placement would refuse (over
    255 characters with its prefix): every bind with the profile would
    fail once its image downloaded; refused at create, naming the key."""
    from cyborg.objects import inventory

    longest = inventory.MAX_TRAIT_LENGTH - len(
        inventory.FUNCTION_TRAIT_PREFIX)
    for length, status in ((longest, 201), (longest + 1, 400)):
        got, body = _request(service, 'POST', '/v2/device_profiles', [
            {'name': f'function-{length}', 'groups': [
                {'resources:FPGA': '1', 'accel:function_id': 'f' * length}
            ]}])
        assert got == status, body
    assert 'groups/0/accel:function_id' in json.dumps(body), body
    assert 'too long to name a Placement trait' in json.dumps(body), body
