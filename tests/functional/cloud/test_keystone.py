"""keystonemiddleware in cyborg-api with the real Keystone: real tokens,
Nova's service tokens, and the service token we send Nova ourselves."""

import json
import uuid as uuidlib

from oslo_config import cfg
import pytest
import requests

import cyborg.conf
from cyborg.conductor import nova as nova_events
from tests.fixtures import deployment as deployment_fixture
from tests.fixtures import processes
from tests.fixtures import recording_http


def call(cloud, method, path, token=None, service_token=None, body=None,
         version=None):
    headers = {}
    if token:
        headers['X-Auth-Token'] = token
    if service_token:
        headers['X-Service-Token'] = service_token
    if version:
        headers['OpenStack-API-Version'] = 'accelerator ' + version
    return requests.request(method, cloud.url() + path, json=body,
                            headers=headers, timeout=30)


def fault(response):
    """The faultstring of a §2 error body."""
    return json.loads(response.json()['error_message'])['faultstring']


def test_version_documents_answer_without_a_token(cloud):
    root = requests.get(cloud.url().rsplit('/v2', 1)[0] + '/', timeout=10)
    assert root.status_code == 200
    assert root.json()['versions'][0]['id'] == 'v2'
    assert requests.get(cloud.url(), timeout=10).status_code == 200


def test_no_token_or_a_bad_one_is_401(cloud, keystone):
    for token in (None, 'not-a-token', keystone.token('demo-admin')[:-4]):
        response = call(cloud, 'GET', '/devices', token)
        assert response.status_code == 401, (token, response.text)
        # Where to get a token, as keystonemiddleware says it.
        assert keystone.auth_url in response.headers['WWW-Authenticate']
        assert fault(response)     # the error body clients parse


def test_a_real_token_is_accepted(cloud, keystone):
    response = call(cloud, 'GET', '/devices', keystone.token('demo-admin'))
    assert response.status_code == 200, response.text
    assert [d['hostname'] for d in response.json()['devices']] == [
        deployment_fixture.AGENT_HOST]


def test_the_token_decides_the_project(cloud, keystone):
    """ARQs belong to the project of the token, not of a header sent."""
    token = keystone.token('demo-member')
    profile = _profile(cloud, keystone)
    created = requests.post(
        cloud.url() + '/accelerator_requests', timeout=30,
        json={'device_profile_name': profile},
        headers={'X-Auth-Token': token,
                 'X-Project-Id': keystone.project_id('alt')})
    assert created.status_code == 201, created.text
    arq = created.json()['arqs'][0]
    assert arq['project_id'] == keystone.project_id('demo')


def _profile(cloud, keystone):
    name = 'ks-%s' % uuidlib.uuid4().hex[:8]
    created = call(cloud, 'POST', '/device_profiles',
                   keystone.token('demo-admin'),
                   body=[{'name': name, 'groups': [{'resources:FPGA': '1'}]}])
    assert created.status_code == 201, created.text
    return name


def _arq(cloud, keystone, user='demo-member'):
    created = call(cloud, 'POST', '/accelerator_requests',
                   keystone.token(user),
                   body={'device_profile_name': _profile(cloud, keystone)})
    assert created.status_code == 201, created.text
    return created.json()['arqs'][0]['uuid']


def _bind_body(cloud, keystone, arq, instance):
    deployable = call(cloud, 'GET', '/deployables',
                      keystone.token('demo-admin')).json()['deployables'][0]
    return {arq: [
        {'path': '/hostname', 'op': 'add',
         'value': deployment_fixture.AGENT_HOST},
        {'path': '/device_rp_uuid', 'op': 'add',
         'value': deployable['rp_uuid']},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]}


def _state(cloud, keystone, arq):
    return call(cloud, 'GET', '/accelerator_requests/' + arq,
                keystone.token('demo-member')).json()['state']


def test_a_service_token_without_the_service_role_is_401(cloud, keystone):
    """service_token_roles_required: a user's token is no service token."""
    arq = _arq(cloud, keystone)
    response = call(cloud, 'PATCH', '/accelerator_requests',
                    keystone.token('demo-member'),
                    service_token=keystone.token('demo-admin'),
                    body=_bind_body(cloud, keystone, arq,
                                    str(uuidlib.uuid4())))
    assert response.status_code == 401, response.text
    assert _state(cloud, keystone, arq) == 'Initial'


def test_nova_binds_with_its_service_token_and_hears_back(cloud, keystone,
                                                          nova):
    """Nova's request: the user's token plus a real service token of the
    nova user.  The bind goes through; the conductor then tells Nova, as
    the cyborg user, with a service token of its own ([service_user]),
    and Keystone says both tokens it sent are good."""
    arq = _arq(cloud, keystone)
    instance = str(uuidlib.uuid4())
    body = _bind_body(cloud, keystone, arq, instance)

    refused = call(cloud, 'PATCH', '/accelerator_requests',
                   keystone.token('demo-member'), body=body)
    assert refused.status_code == 403, refused.text
    assert 'requires a service token' in fault(refused)

    accepted = call(cloud, 'PATCH', '/accelerator_requests',
                    keystone.token('demo-member'),
                    service_token=keystone.token('nova'), body=body)
    assert accepted.status_code == 202, accepted.text
    processes.wait_for(lambda: _state(cloud, keystone, arq) == 'Bound',
                       timeout=30, what='the ARQ bound')

    posts = nova.wait_for(lambda requests_: any(
        r.json() and any(e['server_uuid'] == instance
                         for e in r.json().get('events', []))
        for r in requests_))
    post = [r for r in posts if r.json() and any(
        e['server_uuid'] == instance for e in r.json()['events'])][0]
    assert post.json()['events'] == [{
        'name': 'accelerator-request-bound', 'server_uuid': instance,
        'tag': arq, 'status': 'completed'}]
    headers = {k.lower(): v for k, v in post.headers.items()}
    assert headers['x-openstack-nova-api-version'] == '2.82'
    user = keystone.validate(headers['x-auth-token'])
    service = keystone.validate(headers['x-service-token'])
    assert user is not None and service is not None
    assert service['user']['name'] == 'cyborg'
    assert service['project']['name'] == 'service'
    assert 'service' in {r['name'] for r in service['roles']}
    assert user['user']['name'] == 'cyborg'

    # Free the handle: programming the device needs all of them free.
    deleted = call(cloud, 'DELETE', '/accelerator_requests/' + arq,
                   keystone.token('demo-member'),
                   service_token=keystone.token('nova'))
    assert deleted.status_code == 204, deleted.text


@pytest.mark.parametrize('send_service_token', [True, False])
def test_service_user_decides_the_service_token_we_send(tmp_path, keystone,
                                                        send_service_token):
    """[service_user]send_service_user_token alone decides whether our
    events to Nova carry a service token, which Keystone then accepts."""
    with recording_http.FakeNova() as fake:
        config = processes.write_config(tmp_path / 'conductor.conf', {
            'nova': dict(keystone.client_options('cyborg'),
                         endpoint_override=fake.url),
            'service_user': dict(
                keystone.client_options('cyborg'),
                send_service_user_token=str(send_service_token).lower())})
        conf = cfg.ConfigOpts()
        cyborg.conf.register_opts(conf)
        conf(['--config-file', str(config)], project='cyborg',
             default_config_files=[], default_config_dirs=[])
        instance, arq = str(uuidlib.uuid4()), str(uuidlib.uuid4())
        assert nova_events.send(conf, [(instance, arq, 'completed')])
        post, = fake.event_posts()
    headers = {k.lower(): v for k, v in post.headers.items()}
    assert keystone.validate(headers['x-auth-token'])['user']['name'] == \
        'cyborg'
    if send_service_token:
        service = keystone.validate(headers['x-service-token'])
        assert 'service' in {r['name'] for r in service['roles']}
    else:
        assert 'x-service-token' not in headers
