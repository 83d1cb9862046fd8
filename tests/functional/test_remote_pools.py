"""Remote (fabric-attached) accelerator pools, end to end, over HTTP
against real processes (cyborg-api and cyborg-conductor over RabbitMQ, on
MariaDB and on PostgreSQL) and the real Placement; a recording endpoint
stands in for Nova's os-server-external-events, the fake fabric driver
records what the conductor asks of the fabric in a directory this test
reads.

Nova's part is played as Nova plays it: Placement's allocation candidates
for the flavor plus the profile's request group, the first candidate for
the chosen host claimed for the instance, the bind PATCH with that
host and the pool's provider, DELETE by instance, then the allocation
deleted (doc/source/remote-pools.rst).
"""

import os
import uuid as uuidlib

import pytest
import requests

from cyborg.fabric import fake as fake_fabric
from cyborg.placement import embedded
from tests.fixtures import databases, processes, rabbit, recording_http
from tests.fixtures import placement as placement_fixture

NOVA = {'X-Project-Id': 'tenant-a', 'X-User-Id': 'nova-user',
        'X-Roles': 'member,reader', 'X-Service-Token': 'nova-service-token'}
ADMIN = {'X-Project-Id': 'admin', 'X-User-Id': 'admin',
         'X-Roles': 'admin,member,reader',
         'OpenStack-API-Version': 'accelerator 2.8'}
MEMBER_28 = {'X-Project-Id': 'tenant-a', 'X-User-Id': 'u',
             'X-Roles': 'member,reader',
             'OpenStack-API-Version': 'accelerator 2.8'}
AGGREGATE = str(uuidlib.uuid4())
# Two compute nodes of the pool's aggregate, one outside it.
IN_AGGREGATE = ('compute-fab-a', 'compute-fab-b')
OUTSIDE = 'compute-fab-c'
RC = 'CUSTOM_REMOTE_NVME'
TRAIT = 'CUSTOM_NVMEOF_TCP'
ADDRESSES = ['nqn.2026-01.org.example:pool1:ns1',
             'nqn.2026-01.org.example:pool1:ns2']


def _placement(url, method, path, body=None, ok=True):
    response = requests.request(method, url + path, json=body, headers={
        'x-auth-token': embedded.NOAUTH_TOKEN,
        'OpenStack-API-Version': 'placement 1.39'}, timeout=10)
    if ok:
        assert response.status_code < 300, response.text
    return response


def _wait(check, timeout, what):
    return processes.wait_for(check, timeout, what)


class Deployment:
    def __init__(self, tmp, transport_url, db_url, placement_url, nova):
        self.api_url = f'http://127.0.0.1:{processes.free_port()}'
        self.placement_url = placement_url
        self.nova = nova
        self.fabric_dir = str(tmp / 'fabric')
        common = {
            'DEFAULT': {'transport_url': transport_url,
                        'state_path': str(tmp / 'state'), 'bind_timeout': 10,
                        'graceful_shutdown_timeout': 1},
            'database': {'connection': db_url},
            'placement': placement_fixture.placement_options(placement_url),
            'nova': {'auth_type': 'none', 'endpoint_override': nova.url},
            'conductor': {'stuck_arq_check_interval': 1,
                          'nova_event_retry_interval': 1,
                          'reconcile_interval': 0},
            'fabric': {'fake_state_dir': self.fabric_dir},
        }
        port = self.api_url.rsplit(':', 1)[1]
        self.configs = {
            'api': dict(common, DEFAULT=dict(common['DEFAULT'],
                                             host='api-fab'),
                        api={'auth_strategy': 'noauth', 'port': port,
                             'host_ip': '127.0.0.1'}),
            'conductor': dict(common, DEFAULT=dict(common['DEFAULT'],
                                                   host='conductor-fab')),
        }
        self.tmp = tmp
        self.services = {}
        self.nodes = {}

    def start(self, name):
        config = processes.write_config(self.tmp / f'{name}.conf',
                                        self.configs[name])
        service = processes.ServiceProcess(f'cyborg-{name}', config,
                                           self.tmp / f'{name}.log')
        self.services[name] = service.start()
        return service

    def call(self, method, path, headers=NOVA, **kwargs):
        return requests.request(method, self.api_url + '/v2' + path,
                                headers=headers, timeout=30, **kwargs)

    def journal(self):
        return fake_fabric.journal(self.fabric_dir)


def _compute_node(d, name, aggregates):
    """A compute node provider as nova-compute makes it, with VCPU, in
    ``aggregates`` (as Nova's host aggregates mirror them)."""
    node = str(uuidlib.uuid4())
    _placement(d.placement_url, 'POST', '/resource_providers',
               {'name': name, 'uuid': node})
    _placement(d.placement_url, 'PUT', f'/resource_providers/{node}/'
               'inventories', {'resource_provider_generation': 0,
                               'inventories': {'VCPU': {'total': 8}}})
    generation = _placement(d.placement_url, 'GET', '/resource_providers/'
                            f'{node}').json()['generation']
    _placement(d.placement_url, 'PUT', f'/resource_providers/{node}/'
               'aggregates', {'aggregates': aggregates,
                              'resource_provider_generation': generation})
    d.nodes[name] = node


# On both database servers: the ARQ reads join a remote handle in SQL
# (a CASE over an enum on PostgreSQL) and binds lock the pool's row.
@pytest.fixture(scope='module', params=['mysql', 'postgresql'])
def deployment(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp('remote-pools')
    (tmp / 'fabric').mkdir()
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database(request.param) as db_url, \
            placement_fixture.PlacementProcess(
                log_path=tmp / 'placement.log') as placement_url, \
            recording_http.FakeNova() as nova:
        databases.create_schema(db_url)
        d = Deployment(tmp, transport_url, db_url, placement_url, nova)
        for name in IN_AGGREGATE:
            _compute_node(d, name, [AGGREGATE])
        _compute_node(d, OUTSIDE, [str(uuidlib.uuid4())])
        try:
            d.start('conductor').wait_for_log('cyborg-conductor started')
            d.start('api')
            _wait(lambda: _up(d), 60, 'the API')
            yield d
        finally:
            for service in d.services.values():
                service.kill()


def _up(d):
    try:
        return d.call('GET', '/remote_pools', headers=ADMIN).ok
    except requests.ConnectionError:
        return False


def _register(d, name='nvme-pool', addresses=ADDRESSES):
    return d.call('POST', '/remote_pools', headers=ADMIN, json={
        'name': name, 'resource_class': RC, 'traits': [TRAIT],
        'aggregates': [AGGREGATE], 'fabric_driver': 'fake',
        'handles': [{'fabric_address': a} for a in addresses]})


def _candidates(d):
    """Placement's allocation requests for a 1-VCPU flavor plus the
    profile's group, as Nova asks for them."""
    query = ('/allocation_candidates?resources=VCPU:1'
             f'&resources_device_profile_0={RC}:1'
             f'&required_device_profile_0={TRAIT}&group_policy=none')
    return _placement(d.placement_url, 'GET', query).json()[
        'allocation_requests']


def _claim(d, instance, host, pool_rp):
    """Nova's scheduler: the candidate on ``host``, claimed."""
    for request in _candidates(d):
        allocations = request['allocations']
        if d.nodes[host] in allocations and pool_rp in allocations:
            _placement(d.placement_url, 'PUT', f'/allocations/{instance}', {
                'allocations': allocations, 'project_id': 'tenant-a',
                'user_id': 'nova-user', 'consumer_generation': None,
                'consumer_type': 'INSTANCE'})
            return allocations
    raise AssertionError(f'no allocation candidate on {host}')


def _new_arq(d, profile):
    created = d.call('POST', '/accelerator_requests',
                     json={'device_profile_name': profile})
    assert created.status_code == 201, created.text
    arq, = created.json()['arqs']
    return arq


def _bind(d, arq_uuid, host, rp, instance):
    return d.call('PATCH', '/accelerator_requests', json={arq_uuid: [
        {'path': '/hostname', 'op': 'add', 'value': host},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]})


def _pool(d, name):
    response = d.call('GET', '/remote_pools/' + name, headers=ADMIN)
    assert response.status_code == 200, response.text
    return response.json()


def test_remote_pool_allocated_bound_and_released(deployment):
    d = deployment
    # Below 2.8 the collection does not exist; only admins register.
    assert d.call('GET', '/remote_pools', headers=dict(
        ADMIN, **{'OpenStack-API-Version': 'accelerator 2.4'})
    ).status_code == 404
    refused = d.call('POST', '/remote_pools', headers=MEMBER_28, json={
        'name': 'x', 'resource_class': RC, 'aggregates': [AGGREGATE],
        'fabric_driver': 'fake', 'handles': [{'fabric_address': 'a'}]})
    assert refused.status_code == 403, refused.text

    created = _register(d)
    assert created.status_code == 201, created.text
    pool = created.json()
    rp = pool['resource_provider_uuid']
    assert pool['placement_synced'] is True
    assert [h['in_use'] for h in pool['handles']] == [False, False]

    # Placement holds it as a sharing provider of the aggregate.
    inventory = _placement(d.placement_url, 'GET', f'/resource_providers/'
                           f'{rp}/inventories').json()['inventories']
    assert inventory[RC]['total'] == 2
    traits = set(_placement(d.placement_url, 'GET', f'/resource_providers/'
                            f'{rp}/traits').json()['traits'])
    assert {'MISC_SHARES_VIA_AGGREGATE', TRAIT} <= traits
    assert _placement(d.placement_url, 'GET', f'/resource_providers/{rp}/'
                      'aggregates').json()['aggregates'] == [AGGREGATE]

    # Offered with every compute node of the aggregate, never with others.
    paired = {node for request in _candidates(d)
              for node in request['allocations'] if node != rp}
    assert paired == {d.nodes[n] for n in IN_AGGREGATE}

    response = d.call('POST', '/device_profiles', headers=ADMIN, json=[{
        'name': 'remote-nvme', 'groups': [{f'resources:{RC}': '1',
                                           f'trait:{TRAIT}': 'required'}]}])
    assert response.status_code == 201, response.text

    # An instance scheduled to the second host of the aggregate.
    host = IN_AGGREGATE[1]
    instance = str(uuidlib.uuid4())
    allocations = _claim(d, instance, host, rp)
    assert allocations[rp]['resources'] == {RC: 1}
    arq = _new_arq(d, 'remote-nvme')
    bound = _bind(d, arq['uuid'], host, rp, instance)
    assert bound.status_code == 202, bound.text
    event, = d.nova.wait_for_events(1, timeout=30)
    assert event == {'name': 'accelerator-request-bound',
                     'server_uuid': instance, 'tag': arq['uuid'],
                     'status': 'completed'}
    got, = d.call('GET', '/accelerator_requests?instance=' + instance +
                  '&bind_state=resolved').json()['arqs']
    assert got['state'] == 'Bound'
    assert (got['hostname'], got['device_rp_uuid']) == (host, rp)
    assert got['attach_handle_type'] == 'FABRIC'
    info = got['attach_handle_info']
    assert info['fabric_address'] == ADDRESSES[0]
    assert (info['host'], info['instance_uuid']) == (host, instance)

    # The fabric attached that address to that host for that instance.
    attach, = d.journal()
    assert (attach['op'], attach['fabric_address'], attach['hostname'],
            attach['instance_uuid']) == ('attach', ADDRESSES[0], host,
                                         instance)
    assert attach['handle'] == got['attach_handle_uuid']
    shown = _pool(d, 'nvme-pool')
    assert [(h['in_use'], h['hostname']) for h in shown['handles']] == [
        (True, host), (False, None)]

    # In use: the pool cannot be deleted.
    busy = d.call('DELETE', '/remote_pools/nvme-pool', headers=ADMIN)
    assert busy.status_code == 409, busy.text

    # A host outside the pool's aggregates cannot bind to it; nothing is
    # written.
    stray = _new_arq(d, 'remote-nvme')
    refused = _bind(d, stray['uuid'], OUTSIDE, rp, str(uuidlib.uuid4()))
    assert refused.status_code == 400, refused.text
    assert 'no aggregate' in refused.text
    assert d.call('GET', '/accelerator_requests/' + stray['uuid']).json()[
        'state'] == 'Initial'
    assert d.call('DELETE', '/accelerator_requests/' +
                  stray['uuid']).status_code == 204

    # Nova deletes the instance: the ARQs, then the allocation.
    deleted = d.call('DELETE', '/accelerator_requests?instance=' + instance)
    assert deleted.status_code == 204, deleted.text
    detach = d.journal()[-1]
    assert (detach['op'], detach['fabric_address'], detach['hostname'],
            detach['instance_uuid']) == ('detach', ADDRESSES[0], host,
                                         instance)
    assert fake_fabric.attached(d.fabric_dir) == {}
    assert [h['in_use'] for h in _pool(d, 'nvme-pool')['handles']] == [
        False, False]
    # Placement still holds Nova's allocation until Nova deletes it.
    busy = d.call('DELETE', '/remote_pools/nvme-pool', headers=ADMIN)
    assert busy.status_code == 409 and 'allocations' in busy.text
    _placement(d.placement_url, 'DELETE', f'/allocations/{instance}')
    usages = _placement(d.placement_url, 'GET', f'/resource_providers/{rp}/'
                        'usages').json()['usages']
    assert usages == {RC: 0}

    # Free, the pool goes, and its provider with it.
    gone = d.call('DELETE', '/remote_pools/nvme-pool', headers=ADMIN)
    assert gone.status_code == 204, gone.text
    assert _placement(d.placement_url, 'GET', f'/resource_providers/{rp}',
                      ok=False).status_code == 404
    assert d.call('GET', '/remote_pools/nvme-pool',
                  headers=ADMIN).status_code == 404


def test_refused_registrations_leave_nothing(deployment):
    d = deployment
    unknown = d.call('POST', '/remote_pools', headers=ADMIN, json={
        'name': 'no-driver', 'resource_class': RC, 'aggregates': [AGGREGATE],
        'fabric_driver': 'no-such-fabric',
        'handles': [{'fabric_address': 'x'}]})
    assert unknown.status_code == 400, unknown.text
    assert 'no fabric driver named' in unknown.text
    twice = d.call('POST', '/remote_pools', headers=ADMIN, json={
        'name': 'twice', 'resource_class': RC, 'aggregates': [AGGREGATE],
        'fabric_driver': 'fake',
        'handles': [{'fabric_address': 'x'}, {'fabric_address': 'x'}]})
    assert twice.status_code == 400, twice.text
    # A standard trait Placement does not know: refused by Placement, and
    # the provider made before it is removed again.
    bad_trait = d.call('POST', '/remote_pools', headers=ADMIN, json={
        'name': 'bad-trait', 'resource_class': RC, 'traits': ['HW_NO_SUCH'],
        'aggregates': [AGGREGATE], 'fabric_driver': 'fake',
        'handles': [{'fabric_address': 'x'}]})
    assert bad_trait.status_code == 400, bad_trait.text
    assert d.call('GET', '/remote_pools', headers=ADMIN).json() == {
        'remote_pools': []}
    providers = _placement(d.placement_url, 'GET', '/resource_providers?'
                           'name=remote_pool_bad-trait').json()
    assert providers['resource_providers'] == []

    assert _register(d, 'dup').status_code == 201
    again = _register(d, 'dup')
    assert again.status_code == 409, again.text
    assert d.call('DELETE', '/remote_pools/dup',
                  headers=ADMIN).status_code == 204


def test_a_pool_s_uuids_are_stored_as_every_uuid_is(deployment):
    """Registered with uuids in upper case and without dashes, the pool is
    found by any spelling and shows them lower case and dashed; a name
    that looks like a uuid is refused (it would be taken for one)."""
    d = deployment
    pool, handle = uuidlib.uuid4(), uuidlib.uuid4()
    created = d.call('POST', '/remote_pools', headers=ADMIN, json={
        'name': 'spelled', 'uuid': pool.hex.upper(), 'resource_class': RC,
        'aggregates': [AGGREGATE.upper()], 'fabric_driver': 'fake',
        'handles': [{'fabric_address': 'spelled-1',
                     'uuid': handle.hex.upper()}]})
    assert created.status_code == 201, created.text
    shown = _pool(d, pool.hex)
    assert shown['uuid'] == str(pool)
    assert shown['aggregates'] == [AGGREGATE]
    assert [h['uuid'] for h in shown['handles']] == [str(handle)]
    assert _pool(d, str(pool).upper())['name'] == 'spelled'

    named = d.call('POST', '/remote_pools', headers=ADMIN, json={
        'name': uuidlib.uuid4().hex, 'resource_class': RC,
        'aggregates': [AGGREGATE], 'fabric_driver': 'fake',
        'handles': [{'fabric_address': 'named-1'}]})
    assert named.status_code == 400, named.text
    assert 'looks like a uuid' in named.text
    assert d.call('DELETE', '/remote_pools/' + pool.hex.upper(),
                  headers=ADMIN).status_code == 204


def test_fabric_refusing_to_attach_fails_the_bind(deployment):
    d = deployment
    pool = _register(d, 'flaky', ['nqn.2026-01.org.example:flaky:1'])
    assert pool.status_code == 201, pool.text
    rp = pool.json()['resource_provider_uuid']
    response = d.call('POST', '/device_profiles', headers=ADMIN, json=[{
        'name': 'flaky-nvme', 'groups': [{f'resources:{RC}': '1'}]}])
    assert response.status_code == 201, response.text
    host = IN_AGGREGATE[0]
    instance = str(uuidlib.uuid4())
    _claim(d, instance, host, rp)
    arq = _new_arq(d, 'flaky-nvme')
    flag = os.path.join(d.fabric_dir, fake_fabric.FAIL_ATTACH)
    with open(flag, 'w'):
        pass
    try:
        assert _bind(d, arq['uuid'], host, rp, instance).status_code == 202
        event, = _wait(lambda: [e for e in d.nova.events
                                if e['tag'] == arq['uuid']], 30,
                       'the failed event')
    finally:
        os.unlink(flag)
    assert event['status'] == 'failed'
    got = d.call('GET', '/accelerator_requests/' + arq['uuid']).json()
    assert got['state'] == 'BindFailed'
    assert got['attach_handle_type'] == ''
    # The failed attach was undone, and the handle is free again.
    ops = [(e['op'], e['instance_uuid']) for e in d.journal()
           if e['pool'] == 'flaky']
    assert ops == [('attach', instance), ('detach', instance)]
    assert [h['in_use'] for h in _pool(d, 'flaky')['handles']] == [False]

    # Bound again once the fabric accepts.
    unbound = d.call('PATCH', '/accelerator_requests', json={arq['uuid']: [
        {'path': '/hostname', 'op': 'remove'},
        {'path': '/device_rp_uuid', 'op': 'remove'},
        {'path': '/instance_uuid', 'op': 'remove'}]})
    assert unbound.status_code == 202, unbound.text
    assert _bind(d, arq['uuid'], host, rp, instance).status_code == 202
    _wait(lambda: d.call('GET', '/accelerator_requests/' + arq['uuid'])
          .json()['state'] == 'Bound', 30, 'the second bind')
    assert d.call('DELETE', '/accelerator_requests?instance=' +
                  instance).status_code == 204
    _placement(d.placement_url, 'DELETE', f'/allocations/{instance}')
    assert d.call('DELETE', '/remote_pools/flaky',
                  headers=ADMIN).status_code == 204
