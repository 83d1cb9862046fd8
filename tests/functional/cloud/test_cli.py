"""Every ``openstack accelerator`` command of both CLI plugins against the
cloud (real processes, the real Keystone; tests/functional/cloud), with
the microversions each plugin sends by itself, error paths included.

``STATUS`` says, per plugin, what each command does here; a command a
plugin declares (its entry points) without a line in ``STATUS`` fails
``test_every_command_has_a_status``, and doc/source/clients.rst must list
every one (tests/functional/cloud/test_clients_doc.py).
"""

import json
import uuid as uuidlib

import pytest
import requests

from tests.fixtures import deployment as deployment_fixture
from tests.fixtures import processes
from tests.functional.cloud import clients

WORKS = 'works'
SERVICE_ONLY = ('works for a service only: a user gets 403 "requires a '
                'service token" (no openstack option sends one)')
ADMIN_ONLY_SILENT = ('works for an admin; anyone else is refused (403) '
                     'but openstacksdk ignores the answer: the command '
                     'exits 0 and nothing changes')
ALLOCATE = ('works for an admin or a service (ours, cyborg_osc: it asks '
            'for microversion 2.6 itself); anyone else gets 403')
STATUS = {
    'osc': {
        'accelerator arq allocate': ALLOCATE,
        'accelerator arq bind': SERVICE_ONLY + '; <server> is looked up '
                                'in Nova',
        'accelerator arq create': WORKS,
        'accelerator arq delete': WORKS,
        'accelerator arq list': WORKS,
        'accelerator arq show': WORKS,
        'accelerator arq unbind': SERVICE_ONLY,
        'accelerator deployable list': WORKS,
        'accelerator deployable program': (
            'cannot work: openstacksdk PATCHes '
            '/deployables/{uuid}/program/{uuid}, which answers 404'),
        'accelerator deployable show': WORKS,
        'accelerator device attribute create': WORKS,
        'accelerator device attribute delete': WORKS,
        'accelerator device attribute list': WORKS,
        'accelerator device attribute show': WORKS,
        'accelerator device disable': ADMIN_ONLY_SILENT,
        'accelerator device enable': ADMIN_ONLY_SILENT,
        'accelerator device list': WORKS,
        'accelerator device show': WORKS,
        'accelerator device profile create': WORKS,
        'accelerator device profile delete': WORKS,
        'accelerator device profile list': WORKS,
        'accelerator device profile show': (
            'works with a uuid; a name answers 406 (names need microversion '
            '2.2, and openstacksdk sends none)'),
    },
    'cyborgclient': {
        'accelerator arq allocate': ALLOCATE,
        'accelerator arq bind': SERVICE_ONLY + '; its <project_id> '
                                'argument is required but never sent',
        'accelerator arq create': WORKS,
        'accelerator arq delete': WORKS,
        'accelerator arq list': WORKS,
        'accelerator arq show': WORKS,
        'accelerator arq unbind': SERVICE_ONLY,
        'accelerator deployable list': WORKS,
        'accelerator deployable program': (
            'cannot work: it calls openstacksdk\'s update_deployable, which '
            'calls itself until Python\'s recursion limit'),
        'accelerator deployable show': WORKS,
        'accelerator device attribute create': WORKS,
        'accelerator device attribute delete': WORKS,
        'accelerator device attribute list': WORKS,
        'accelerator device attribute show': WORKS,
        'accelerator device disable': ADMIN_ONLY_SILENT,
        'accelerator device enable': ADMIN_ONLY_SILENT,
        'accelerator device list': WORKS,
        'accelerator device show': WORKS,
        'accelerator device profile create': WORKS,
        'accelerator device profile delete': WORKS,
        'accelerator device profile list': WORKS,
        'accelerator device profile show': WORKS,
    },
}


@pytest.fixture(scope='module', params=sorted(clients.PLUGINS))
def cli(request, cloud, keystone):
    runner = clients.Cli(request.param, cloud, keystone)
    yield runner
    runner.close()


def api(cloud, keystone, method, path, version=None, user='demo-admin',
        **kwargs):
    headers = {'X-Auth-Token': keystone.token(user)}
    if version:
        headers['OpenStack-API-Version'] = 'accelerator ' + version
    response = requests.request(method, cloud.url() + path, timeout=30,
                                headers=headers, **kwargs)
    response.raise_for_status()
    return response.json() if response.content else None


def unique(prefix):
    return '%s-%s' % (prefix, uuidlib.uuid4().hex[:8])


def test_every_command_has_a_status(cli):
    commands = cli.commands()
    assert {c['dist'] for c in commands.values()} == {
        cli.dist, clients.OWN_DIST}, commands
    assert set(commands) == set(STATUS[cli.plugin])


def _state(cloud, keystone, arq):
    return api(cloud, keystone, 'GET', '/accelerator_requests/' + arq)[
        'state']


def _device_status(cloud, keystone, uuid):
    return api(cloud, keystone, 'GET', '/devices/' + uuid, '2.3')['status']


def test_devices(cli, cloud, keystone):
    devices = cli.ok('device', 'list', '-f', 'json', catalog=True)
    assert [(d['type'], d['vendor']) for d in devices] == [('FPGA',
                                                            '0xABCD')]
    long = cli.ok('device', 'list', '--long', '-f', 'json')
    assert [d['uuid'] for d in long] == [devices[0]['uuid']]
    uuid = devices[0]['uuid']
    shown = cli.ok('device', 'show', uuid, '-f', 'json')
    assert shown['hostname'] == deployment_fixture.AGENT_HOST
    # cyborgclient asks for 2.3 and gets the status; osc's commands send
    # no microversion (2.0) and show an empty status column.
    assert shown['status'] == ('enabled' if cli.plugin == 'cyborgclient'
                               else None)
    missing = str(uuidlib.uuid4())
    assert missing in cli.fails('device', 'show', missing)

    cli.ok('device', 'disable', uuid)
    assert _device_status(cloud, keystone, uuid) == 'maintaining'
    cli.ok('device', 'enable', uuid)
    assert _device_status(cloud, keystone, uuid) == 'enabled'
    # Refused, but openstacksdk does not look at the answer.
    silent = cli('device', 'disable', uuid, user='demo-member')
    assert silent.status == 0, silent
    assert _device_status(cloud, keystone, uuid) == 'enabled'


def test_deployables(cli, glance):
    deployables = cli.ok('deployable', 'list', '-f', 'json', catalog=True)
    assert [d['name'] for d in deployables] == [
        deployment_fixture.FAKE_DEPLOYABLE]
    assert cli.ok('deployable', 'list', '--long', '-f', 'json')
    uuid = deployables[0]['uuid']
    shown = cli.ok('deployable', 'show', uuid, '-f', 'json')
    assert shown['name'] == deployment_fixture.FAKE_DEPLOYABLE
    missing = str(uuidlib.uuid4())
    assert missing in cli.fails('deployable', 'show', missing)

    image = glance.add_image(b'cli-bitstream' * 50)
    output = cli.fails('deployable', 'program', uuid, image, catalog=True)
    if cli.plugin == 'osc':
        assert '/program/%s' % uuid in output and '404' in output, output
    else:
        assert 'maximum recursion depth' in output, output


def test_attributes(cli):
    attributes = cli.ok('device', 'attribute', 'list', '-f', 'json',
                        catalog=True)
    assert cli.ok('device', 'attribute', 'list', '--long', '-f', 'json')
    rc = [a for a in attributes if a['key'] == 'rc'][0]
    shown = cli.ok('device', 'attribute', 'show', rc['uuid'], '-f', 'json')
    assert shown['value'] == 'FPGA'
    missing = str(uuidlib.uuid4())
    assert missing in cli.fails('device', 'attribute', 'show', missing)

    deployable = cli.ok('deployable', 'list', '-f', 'json')[0]
    key = unique('key')
    created = cli.ok('device', 'attribute', 'create', deployable['uuid'],
                     key, 'value', '-f', 'json')
    assert (created['key'], created['value']) == (key, 'value')
    listed = cli.ok('device', 'attribute', 'list', '-f', 'json')
    assert created['uuid'] in [a['uuid'] for a in listed]
    cli.ok('device', 'attribute', 'delete', created['uuid'])
    assert created['uuid'] in cli.fails('device', 'attribute', 'show',
                                        created['uuid'])
    assert created['uuid'] in cli.fails('device', 'attribute', 'delete',
                                        created['uuid'])
    refused = cli.fails('device', 'attribute', 'create', deployable['uuid'],
                        unique('key'), 'value', user='demo-member')
    assert '403' in refused or 'denied' in refused, refused


def test_device_profiles(cli):
    name = unique('cli-dp')
    if cli.plugin == 'osc':
        create = ['device', 'profile', 'create', name, '--group',
                  'resources:FPGA=1,trait:CUSTOM_FAKE_DEVICE=required']
    else:
        create = ['device', 'profile', 'create', name, json.dumps([{
            'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}])]
    created = cli.ok(*create, '--description', 'from the CLI', '-f', 'json',
                     catalog=True)
    assert created['groups'] == [{'resources:FPGA': '1',
                                  'trait:CUSTOM_FAKE_DEVICE': 'required'}]
    duplicate = cli.fails(*create)
    assert '409' in duplicate and 'already exists' in duplicate, duplicate
    listed = cli.ok('device', 'profile', 'list', '-f', 'json')
    assert name in [p['name'] for p in listed]
    assert cli.ok('device', 'profile', 'list', '--long', '-f', 'json')
    shown = cli.ok('device', 'profile', 'show', created['uuid'], '-f', 'json')
    assert shown['description'] == 'from the CLI'
    if cli.plugin == 'osc':
        by_name = cli.fails('device', 'profile', 'show', name)
        assert 'needs microversion 2.2' in by_name, by_name
    else:
        assert cli.ok('device', 'profile', 'show', name, '-f', 'json')[
            'uuid'] == created['uuid']
    missing = str(uuidlib.uuid4())
    assert missing in cli.fails('device', 'profile', 'show', missing)
    refused = cli.fails(*create[:3], unique('cli-dp'), *create[4:],
                        user='demo-member')
    assert '403' in refused or 'denied' in refused, refused
    cli.ok('device', 'profile', 'delete', created['uuid'])
    assert created['uuid'] in cli.fails('device', 'profile', 'delete',
                                        created['uuid'])


def test_arqs_bind_and_unbind(cli, cloud, keystone, nova):
    name = unique('cli-arq')
    api(cloud, keystone, 'POST', '/device_profiles',
        json=[{'name': name, 'groups': [{'resources:FPGA': '1'}]}])
    member = {'user': 'demo-member'}
    arq = cli.ok('arq', 'create', name, '-f', 'json', catalog=True,
                 **member)
    assert (arq['state'], arq['device_profile_name']) == ('Initial', name)
    listed = cli.ok('arq', 'list', '-f', 'json', **member)
    assert arq['uuid'] in [a['uuid'] for a in listed]
    assert cli.ok('arq', 'list', '--long', '-f', 'json', **member)
    shown = cli.ok('arq', 'show', arq['uuid'], '-f', 'json', **member)
    assert shown['device_profile_name'] == name
    missing = str(uuidlib.uuid4())
    assert missing in cli.fails('arq', 'show', missing, **member)
    unknown = cli.fails('arq', 'create', unique('no-such-dp'), **member)
    assert '404' in unknown, unknown

    rp = api(cloud, keystone, 'GET', '/deployables')['deployables'][0][
        'rp_uuid']
    server = nova.add_server(unique('vm'))
    bind = ['arq', 'bind', arq['uuid'], deployment_fixture.AGENT_HOST,
            server, rp]
    if cli.plugin == 'cyborgclient':
        bind.append(keystone.project_id('demo'))    # required, not sent
    # By password: osc's bind looks the server up in Nova's catalog entry.
    assert 'requires a service token' in cli.fails(*bind, catalog=True,
                                                   **member)
    assert _state(cloud, keystone, arq['uuid']) == 'Initial'
    nova_token = keystone.token('nova')
    if cli.plugin == 'osc':
        # The server is looked up in Nova first.
        no_server = str(uuidlib.uuid4())
        unknown = cli.fails(*bind[:4], no_server, rp, catalog=True,
                            service_token=nova_token, **member)
        assert 'No Server found for %s' % no_server in unknown, unknown
    bound = cli(*bind, service_token=nova_token, catalog=True, **member)
    assert bound.status == 0, bound
    processes.wait_for(lambda: _state(cloud, keystone, arq['uuid']) ==
                       'Bound', timeout=30, what='the ARQ bound')
    shown = api(cloud, keystone, 'GET', '/accelerator_requests/' +
                arq['uuid'])
    assert (shown['instance_uuid'], shown['hostname']) == (
        server, deployment_fixture.AGENT_HOST)

    unbind = ['arq', 'unbind', arq['uuid']]
    assert 'requires a service token' in cli.fails(*unbind, **member)
    unbound = cli(*unbind, service_token=nova_token, **member)
    assert unbound.status == 0, unbound
    processes.wait_for(lambda: _state(cloud, keystone, arq['uuid']) ==
                       'Unbound', timeout=30, what='the ARQ unbound')

    cli.ok('arq', 'delete', arq['uuid'], **member)
    assert arq['uuid'] in cli.fails('arq', 'delete', arq['uuid'], **member)


def test_arq_allocate(cli, cloud, keystone):
    """Our own command (cyborg_osc), beside either plugin's: a standalone
    allocation through the real CLI, the SDK's session and the catalog."""
    name = unique('cli-alloc')
    api(cloud, keystone, 'POST', '/device_profiles',
        json=[{'name': name, 'groups': [{'resources:FPGA': '1'}]}])
    member = {'user': 'demo-member'}
    arq = cli.ok('arq', 'create', name, '-f', 'json', **member)
    allocate = ['arq', 'allocate', arq['uuid'], '--consumer-id', 'pod-cli',
                '--consumer-type', 'k8s-pod', '-f', 'json']
    refused = cli.fails(*allocate, catalog=True, **member)
    assert 'HTTP 403' in refused and 'cyborg:arq:allocate' in refused
    unknown_host = cli.fails(*allocate, '--host', 'nowhere')
    assert 'host nowhere has no accelerators in Placement' in unknown_host
    # An empty host is sent, and refused: dropped, it allocated anywhere.
    empty_host = cli.fails(*allocate, '--host', '')
    assert 'HTTP 400' in empty_host and 'hostname' in empty_host
    allocated = cli.ok(*allocate, '--host', deployment_fixture.AGENT_HOST,
                       catalog=True)
    assert allocated['state'] == 'Bound'
    assert (allocated['consumer_id'], allocated['consumer_type']) == (
        'pod-cli', 'k8s-pod')
    assert allocated['hostname'] == deployment_fixture.AGENT_HOST
    again = cli.fails(*allocate)
    assert 'HTTP 409' in again and 'is Bound' in again
    # The admin that allocated it deletes it; the allocation goes too.
    cli.ok('arq', 'delete', arq['uuid'])
    assert arq['uuid'] in cli.fails('arq', 'show', arq['uuid'])
