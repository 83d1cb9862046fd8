"""What Nova does with accelerators, over HTTP against real processes:
cyborg-api, cyborg-conductor and cyborg-agent (fake driver) over RabbitMQ,
on MariaDB, with the real Placement; recording endpoints stand in for
Nova's os-server-external-events and for Glance.

Also: the conductor SIGKILLed in the middle of a bind; once it is back the
ARQ ends BindFailed and Nova is told.
"""

import uuid as uuidlib

import pytest
import requests

from cyborg.objects import inventory
from cyborg.placement import embedded
from tests.fixtures import databases, processes, rabbit, recording_http
from tests.fixtures import placement as placement_fixture

COMPUTE = 'compute-arq'
DEVICE_RP = inventory.provider_uuid(COMPUTE + '_FakeDevice')
# Nova sends a user token and a service token, and no microversion.
NOVA = {'X-Project-Id': 'tenant-a', 'X-User-Id': 'nova-user',
        'X-Roles': 'member,reader', 'X-Service-Token': 'nova-service-token'}
ADMIN = {'X-Project-Id': 'admin', 'X-User-Id': 'admin',
         'X-Roles': 'admin,member,reader'}


def _placement(url, method, path, body=None):
    response = requests.request(method, url + path, json=body, headers={
        'x-auth-token': embedded.NOAUTH_TOKEN,
        'OpenStack-API-Version': 'placement 1.39'}, timeout=10)
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


def _wait(check, timeout, what):
    return processes.wait_for(check, timeout, what)


class Deployment:
    def __init__(self, tmp, transport_url, db_url, placement_url, nova,
                 glance):
        self.api_url = f'http://127.0.0.1:{processes.free_port()}'
        self.placement_url = placement_url
        self.nova = nova
        self.glance = glance
        common = {
            'DEFAULT': {'transport_url': transport_url,
                        'state_path': str(tmp / 'state'), 'bind_timeout': 10,
                        'graceful_shutdown_timeout': 1},
            'database': {'connection': db_url},
            'placement': placement_fixture.placement_options(placement_url),
            'nova': {'auth_type': 'none', 'endpoint_override': nova.url},
            'glance': {'auth_type': 'none', 'endpoint_override': glance.url},
            'conductor': {'stuck_arq_check_interval': 1,
                          'nova_event_retry_interval': 1,
                          'reconcile_interval': 0},
        }
        port = self.api_url.rsplit(':', 1)[1]
        self.configs = {
            'api': dict(common, DEFAULT=dict(common['DEFAULT'],
                                             host='api-arq'),
                        api={'auth_strategy': 'noauth', 'port': port,
                             'host_ip': '127.0.0.1'}),
            'conductor': dict(common, DEFAULT=dict(common['DEFAULT'],
                                                   host='conductor-arq')),
            'agent': dict(common, DEFAULT=dict(common['DEFAULT'],
                                               host=COMPUTE),
                          agent={'enabled_drivers': 'fake_driver',
                                 'hotplug': 'false',
                                 'sysfs_root': str(tmp / 'sysfs')}),
        }
        self.tmp = tmp
        self.services = {}

    def start(self, name):
        config = processes.write_config(self.tmp / f'{name}.conf',
                                        self.configs[name])
        service = processes.ServiceProcess(f'cyborg-{name}', config,
                                           self.tmp / f'{name}.log',
                                           env={'PYTHONFAULTHANDLER': '1'})
        self.services[name] = service.start()
        return service

    def call(self, method, path, headers=NOVA, **kwargs):
        return requests.request(method, self.api_url + '/v2' + path,
                                headers=headers, timeout=30, **kwargs)


@pytest.fixture(scope='module')
def deployment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('arq-flow')
    (tmp / 'sysfs').mkdir()
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database('mysql') as db_url, \
            placement_fixture.PlacementProcess(
                log_path=tmp / 'placement.log') as placement_url, \
            recording_http.FakeNova() as nova, \
            recording_http.FakeGlance() as glance:
        databases.create_schema(db_url)
        # nova-compute's provider, under which cyborg nests the device.
        _placement(placement_url, 'POST', '/resource_providers',
                   {'name': COMPUTE, 'uuid': str(uuidlib.uuid4())})
        d = Deployment(tmp, transport_url, db_url, placement_url, nova,
                       glance)
        try:
            # The agent's first report needs the conductor's queue.
            d.start('conductor').wait_for_log('cyborg-conductor started')
            d.start('agent')
            d.start('api')
            _wait(lambda: _ok(d, '/devices?hostname=' + COMPUTE), 60,
                  'the fake device to be reported')
            _wait(lambda: _inventory(placement_url), 30,
                  'the fake device provider in Placement')
            yield d
        finally:
            for service in d.services.values():
                service.kill()


def _ok(d, path):
    try:
        response = d.call('GET', path, headers=ADMIN)
    except requests.ConnectionError:
        return None
    return response.ok and response.json()['devices']


def _inventory(placement_url):
    response = requests.get(
        f'{placement_url}/resource_providers/{DEVICE_RP}/inventories',
        headers={'x-auth-token': embedded.NOAUTH_TOKEN}, timeout=10)
    return response.ok and response.json()['inventories'].get('FPGA')


def _profile(d, name, group):
    response = d.call('POST', '/device_profiles', headers=ADMIN,
                      json=[{'name': name, 'groups': [group]}])
    assert response.status_code == 201, response.text


def _bind(d, arq_uuid, instance):
    return d.call('PATCH', '/accelerator_requests', json={arq_uuid: [
        {'path': '/hostname', 'op': 'add', 'value': COMPUTE},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': DEVICE_RP},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]})


def test_nova_boot_and_delete_flow(deployment):
    d = deployment
    _profile(d, 'fpga-dp', {'resources:FPGA': '1',
                            'trait:CUSTOM_FAKE_DEVICE': 'required'})
    instance = str(uuidlib.uuid4())
    # The scheduler's allocation, against the fake device's provider.
    _placement(d.placement_url, 'PUT', f'/allocations/{instance}', {
        'allocations': {DEVICE_RP: {'resources': {'FPGA': 1}}},
        'project_id': 'tenant-a', 'user_id': 'nova-user',
        'consumer_generation': None, 'consumer_type': 'INSTANCE'})

    profiles = d.call('GET', '/device_profiles?name=fpga-dp').json()
    assert len(profiles['device_profiles']) == 1
    created = d.call('POST', '/accelerator_requests',
                     json={'device_profile_name': 'fpga-dp'})
    assert created.status_code == 201, created.text
    arq, = created.json()['arqs']
    assert arq['state'] == 'Initial'

    bound = _bind(d, arq['uuid'], instance)
    assert bound.status_code == 202, bound.text
    events = d.nova.wait_for_events(1, timeout=30)
    assert events == [{'name': 'accelerator-request-bound',
                       'server_uuid': instance, 'tag': arq['uuid'],
                       'status': 'completed'}]

    resolved = d.call('GET', '/accelerator_requests?instance=' + instance +
                      '&bind_state=resolved')
    assert resolved.status_code == 200, resolved.text
    got, = resolved.json()['arqs']
    assert got['state'] == 'Bound'
    assert got['hostname'] == COMPUTE
    assert got['device_rp_uuid'] == DEVICE_RP
    assert got['attach_handle_type'] == 'TEST_PCI'
    assert set(got['attach_handle_info']) == {'domain', 'bus', 'device',
                                              'function'}

    deleted = d.call('DELETE', '/accelerator_requests?instance=' + instance)
    assert deleted.status_code == 204, deleted.text
    assert d.call('GET', '/accelerator_requests?instance=' +
                  instance).json()['arqs'] == []
    again = d.call('DELETE', '/accelerator_requests?instance=' + instance)
    assert again.status_code == 204


def _traits(placement_url):
    return set(_placement(placement_url, 'GET', f'/resource_providers/'
                          f'{DEVICE_RP}/traits')['traits'])


def test_fpga_programmed_at_bind_and_by_the_admin(deployment):
    d = deployment
    image = d.glance.add_image(b'\x01fpga' * 200,
                               {'accel:function_id': 'crypto-1'})
    _profile(d, 'crypto-fpga', {'resources:FPGA': '1',
                                'accel:function_id': 'crypto-1'})
    arq, = d.call('POST', '/accelerator_requests',
                  json={'device_profile_name': 'crypto-fpga'}).json()['arqs']
    instance = str(uuidlib.uuid4())
    assert _bind(d, arq['uuid'], instance).status_code == 202
    _wait(lambda: [e for e in d.nova.events if e['tag'] == arq['uuid']],
          30, 'the bind event')
    got = d.call('GET', '/accelerator_requests/' + arq['uuid']).json()
    assert got['state'] == 'Bound'
    assert 'CUSTOM_FPGA_FUNCTION_ID_CRYPTO_1' in _traits(d.placement_url)
    deployable, = d.call('GET', f'/deployables?name={COMPUTE}_FakeDevice',
                         headers=ADMIN).json()['deployables']
    assert deployable['bitstream_id'] == image
    assert d.call('DELETE', '/accelerator_requests?instance=' +
                  instance).status_code == 204

    # The admin loads the same image again: nothing to do, no download.
    downloads = len(d.glance.downloads())
    program = [{'path': '/program', 'op': 'replace',
                'value': [{'image_uuid': image}]}]
    response = d.call('PATCH', f'/deployables/{deployable["uuid"]}/program',
                      headers=ADMIN, json=program)
    assert response.status_code == 200, response.text
    assert response.json()['bitstream_id'] == image
    assert len(d.glance.downloads()) == downloads


def test_conductor_killed_mid_bind_fails_the_arq_and_tells_nova(deployment):
    d = deployment
    # A slow Glance keeps the bind in BindStarted while we kill.
    d.glance.delay = 60
    image = d.glance.add_image(b'bitstream' * 100)
    _profile(d, 'slow-fpga', {'resources:FPGA': '1',
                              'accel:bitstream_id': image})
    arq, = d.call('POST', '/accelerator_requests',
                  json={'device_profile_name': 'slow-fpga'}).json()['arqs']
    instance = str(uuidlib.uuid4())
    assert _bind(d, arq['uuid'], instance).status_code == 202
    d.glance.wait_for(lambda requests: any(
        r.path.endswith('/file') for r in requests), timeout=30)
    assert d.call('GET', '/accelerator_requests/' + arq['uuid']).json()[
        'state'] == 'BindStarted'

    d.services['conductor'].kill()
    d.glance.delay = 0
    d.start('conductor')

    def failed_event():
        return [e for e in d.nova.events if e['tag'] == arq['uuid']]
    event, = _wait(failed_event, 40, 'the failed event')
    assert event['status'] == 'failed'
    assert event['server_uuid'] == instance
    after = d.call('GET', '/accelerator_requests/' + arq['uuid']).json()
    assert after['state'] == 'BindFailed'
    assert d.call('DELETE', '/accelerator_requests?instance=' +
                  instance).status_code == 204


def test_a_vendor_tool_that_fails_takes_the_card_out(deployment):
    """Real processes over RabbitMQ, where the agent's FPGAToolFailed
    reaches the conductor as a RemoteError: the admin gets the 409 with
    the tool's reason, and the card is out of the schedule (unhealthy,
    image forgotten, reserved in Placement) until a re-probe."""
    d = deployment
    image = d.glance.add_image(b'\x02fpga' * 200)
    injection = d.tmp / 'state' / 'fake_driver_health.json'
    injection.write_text('{"program": "fail"}')
    try:
        deployable, = d.call('GET', f'/deployables?name={COMPUTE}_FakeDevice',
                             headers=ADMIN).json()['deployables']
        response = d.call(
            'PATCH', f'/deployables/{deployable["uuid"]}/program',
            headers=ADMIN, json=[{'path': '/program', 'op': 'replace',
                                  'value': [{'image_uuid': image}]}])
        assert response.status_code == 409, response.text
        assert 'the fake tool failed' in response.text
        shown = d.call('GET', f'/deployables/{deployable["uuid"]}',
                       headers=dict(ADMIN, **{
                           'OpenStack-API-Version': 'accelerator 2.10'}))
        got = shown.json()
        assert got['health'] == 'unhealthy', got
        assert got['health_reason'].startswith(
            f'programming with image {image} failed: ')
        assert got['bitstream_id'] is None
        assert got['programming_until'] is None
        inventory = _placement(d.placement_url, 'GET',
                               f'/resource_providers/{DEVICE_RP}/'
                               f'inventories')['inventories']['FPGA']
        assert inventory['reserved'] == inventory['total']
    finally:
        injection.unlink()
