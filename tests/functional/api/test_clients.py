"""The real clients against real processes: cyborg-api and
cyborg-conductor (and one cyborg-agent with the fake driver) over the
machine's RabbitMQ, on MariaDB, with the real Placement as a process.

``openstack accelerator ...`` (python-openstackclient's own accelerator
commands, which win over python-cyborgclient's where both are installed,
as in the test virtualenv) and the openstacksdk ``accelerator`` proxy talk
to the API with no Keystone
(``--os-auth-type none --os-endpoint <api>/v2``), so noauth's default
identity (admin of project 'admin') is theirs.
"""

import contextlib
import io
import json
import re

import openstack
from openstackclient import shell
import pytest
import requests

from cyborg.cmd import aio
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import processes
from tests.fixtures import rabbit

AGENT_HOST = 'clients-agent'
FAKE_DEPLOYABLE = AGENT_HOST + '_FakeDevice'


def _api_url(api):
    found = re.search(r'cyborg-api listening on (http://\S+)', api.log())
    return found.group(1) if found else None


@pytest.fixture(scope='module')
def endpoint(tmp_path_factory):
    """The running API's /v2 URL, once the agent's device is visible."""
    tmp = tmp_path_factory.mktemp('clients')
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database('mysql') as db_url, \
            placement_fixture.PlacementProcess() as placement_url:
        databases.create_schema(db_url)
        aio.ensure_compute_node(placement_url, AGENT_HOST)
        common = {'transport_url': transport_url, 'state_path': tmp}
        services = []
        for name, sections in (
                ('cyborg-conductor', {
                    'DEFAULT': dict(common, host='clients-conductor'),
                    'database': {'connection': db_url},
                    'placement': placement_fixture.placement_options(
                        placement_url),
                    'nova': {'send_events': False}}),
                ('cyborg-agent', {
                    'DEFAULT': dict(common, host=AGENT_HOST),
                    'agent': {'enabled_drivers': 'fake_driver',
                              'hotplug': False,
                              'resource_provider_name': AGENT_HOST}}),
                ('cyborg-api', {
                    'DEFAULT': dict(common, host='clients-api'),
                    'database': {'connection': db_url},
                    'api': {'host_ip': '127.0.0.1', 'port': 0,
                            'auth_strategy': 'noauth'}})):
            config = processes.write_config(tmp / (name + '.conf'), sections)
            process = processes.ServiceProcess(name, config,
                                               tmp / (name + '.log'))
            services.append(process.start())
            process.wait_for_log('started' if name != 'cyborg-api'
                                 else 'listening on', timeout=60)
        try:
            url = _api_url(services[-1]) + '/v2'
            processes.wait_for(lambda: requests.get(url + '/deployables',
                                           timeout=5).json()['deployables'],
                      timeout=60, what="the agent's deployable")
            yield url
            for process in reversed(services):
                process.stop()
        finally:
            for process in services:
                process.kill()


def osc(endpoint, *args):
    """``openstack <args>`` with no Keystone; its parsed JSON output.

    The real python-openstackclient shell with its own accelerator
    commands (no python-cyborgclient in this virtualenv), run in this
    process: the same code as the console script without
    paying its start-up (plugin discovery) for every command.
    """
    argv = ['--os-auth-type', 'none', '--os-endpoint', endpoint, *args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = shell.main(argv)
    assert status == 0, (argv, out.getvalue(), err.getvalue())
    text = out.getvalue()
    return json.loads(text) if text.strip().startswith(('{', '[')) else text


def test_cli_devices_and_deployables(endpoint):
    devices = osc(endpoint, 'accelerator', 'device', 'list', '-f', 'json')
    assert [d['type'] for d in devices] == ['FPGA']
    uuid = devices[0]['uuid']
    device = osc(endpoint, 'accelerator', 'device', 'show', uuid,
                 '-f', 'json')
    assert device['vendor'] == '0xABCD'
    assert device['hostname'] == AGENT_HOST

    deployables = osc(endpoint, 'accelerator', 'deployable', 'list',
                      '-f', 'json')
    assert [d['name'] for d in deployables] == [FAKE_DEPLOYABLE]
    deployable = osc(endpoint, 'accelerator', 'deployable', 'show',
                     deployables[0]['uuid'], '-f', 'json')
    assert deployable['name'] == FAKE_DEPLOYABLE


def test_cli_device_profiles_and_arqs(endpoint):
    groups = json.dumps([{'resources:FPGA': '1',
                          'trait:CUSTOM_FAKE_DEVICE': 'required'}])
    created = osc(endpoint, 'accelerator', 'device', 'profile', 'create',
                  'cli-dp', groups, '--description', 'from the CLI',
                  '-f', 'json')
    assert created['name'] == 'cli-dp'
    listed = osc(endpoint, 'accelerator', 'device', 'profile', 'list',
                 '-f', 'json')
    assert [p['name'] for p in listed] == ['cli-dp']
    shown = osc(endpoint, 'accelerator', 'device', 'profile', 'show',
                created['uuid'], '-f', 'json')
    assert shown['description'] == 'from the CLI'

    arq = osc(endpoint, 'accelerator', 'arq', 'create', 'cli-dp',
              '-f', 'json')
    assert arq['state'] == 'Initial'
    arqs = osc(endpoint, 'accelerator', 'arq', 'list', '-f', 'json')
    assert [a['uuid'] for a in arqs] == [arq['uuid']]
    shown = osc(endpoint, 'accelerator', 'arq', 'show', arq['uuid'],
                '-f', 'json')
    assert shown['device_profile_name'] == 'cli-dp'
    osc(endpoint, 'accelerator', 'arq', 'delete', arq['uuid'])
    assert osc(endpoint, 'accelerator', 'arq', 'list', '-f', 'json') == []

    osc(endpoint, 'accelerator', 'device', 'profile', 'delete',
        created['uuid'])
    assert osc(endpoint, 'accelerator', 'device', 'profile', 'list',
               '-f', 'json') == []


def test_cli_attributes(endpoint):
    attributes = osc(endpoint, 'accelerator', 'device', 'attribute',
                     'list', '-f', 'json')
    assert {a['key'] for a in attributes} >= {'rc', 'trait0'}
    rc = [a for a in attributes if a['key'] == 'rc'][0]
    shown = osc(endpoint, 'accelerator', 'device', 'attribute', 'show',
                rc['uuid'], '-f', 'json')
    assert shown['value'] == 'FPGA'


@pytest.fixture
def sdk(endpoint):
    """openstacksdk's accelerator proxy with no Keystone."""
    conn = openstack.connection.Connection(
        auth_type='none', auth={'endpoint': endpoint},
        accelerator_endpoint_override=endpoint)
    yield conn.accelerator
    conn.close()


def test_sdk_reads(sdk):
    devices = list(sdk.devices())
    assert [d.type for d in devices] == ['FPGA']
    assert sdk.get_device(devices[0].uuid).hostname == AGENT_HOST
    deployables = list(sdk.deployables())
    assert [d.name for d in deployables] == [FAKE_DEPLOYABLE]
    assert sdk.get_deployable(deployables[0].id).num_accelerators == 16
    attributes = list(sdk.attributes())
    rc = [a for a in attributes if a.key == 'rc'][0]
    assert sdk.get_attribute(rc.uuid).value == 'FPGA'


def test_sdk_follows_the_pages_of_a_list(endpoint, sdk):
    """From microversion 2.11 lists are paged: openstacksdk, asking for
    it, follows each page's ``<key>_links`` to the next one."""
    names = ['paged-a', 'paged-b', 'paged-c']
    created = [sdk.create_device_profile(
        name=name, groups=[{'resources:FPGA': '1'}]) for name in names]
    conn = openstack.connection.Connection(
        auth_type='none', auth={'endpoint': endpoint},
        accelerator_endpoint_override=endpoint,
        accelerator_default_microversion='2.11')
    try:
        page = conn.accelerator.get('/device_profiles?limit=1').json()
        assert len(page['device_profiles']) == 1
        assert page['device_profiles_links'][0]['rel'] == 'next'
        everything = [p.name for p in sdk.device_profiles()]
        assert set(names) <= set(everything)
        assert [p.name for p in conn.accelerator.device_profiles(
            limit=1)] == everything
    finally:
        conn.close()
        for profile in created:
            sdk.delete_device_profile(profile.uuid)


def test_sdk_device_profiles_and_arqs(sdk):
    profile = sdk.create_device_profile(
        name='sdk-dp', groups=[{'resources:FPGA': '2'}],
        description='from the SDK')
    assert profile.name == 'sdk-dp'
    assert [p.name for p in sdk.device_profiles()] == ['sdk-dp']
    assert sdk.get_device_profile(profile.uuid).description == 'from the SDK'

    arq = sdk.create_accelerator_request(device_profile_name='sdk-dp')
    assert arq.state == 'Initial'
    arqs = list(sdk.accelerator_requests())
    assert len(arqs) == 2
    assert sdk.get_accelerator_request(arq.uuid).device_profile_name == \
        'sdk-dp'
    for each in arqs:
        sdk.delete_accelerator_request(each.uuid, ignore_missing=False)
    assert list(sdk.accelerator_requests()) == []

    sdk.delete_device_profile(profile.uuid, ignore_missing=False)
    assert list(sdk.device_profiles()) == []


def test_sdk_device_disable_enable(sdk, endpoint):
    device = list(sdk.devices())[0]
    sdk.disable_device(device.uuid)
    shown = requests.get('%s/devices/%s' % (endpoint, device.uuid),
                         headers={'OpenStack-API-Version': 'accelerator 2.3'},
                         timeout=10).json()
    assert shown['status'] == 'maintaining'
    sdk.enable_device(device.uuid)
    shown = requests.get('%s/devices/%s' % (endpoint, device.uuid),
                         headers={'OpenStack-API-Version': 'accelerator 2.3'},
                         timeout=10).json()
    assert shown['status'] == 'enabled'


def test_deployable_program_over_http(endpoint):
    """The SDK's update_deployable calls itself forever (openstacksdk
    bug), and cyborgclient goes through it, so program is driven over
    HTTP: the request is validated and reaches the conductor, which has
    no Glance here and says so with a 4xx/5xx of the §2 format, never a
    hang."""
    deployable = requests.get(endpoint + '/deployables',
                              timeout=10).json()['deployables'][0]
    bad = requests.patch(
        '%s/deployables/%s/program' % (endpoint, deployable['uuid']),
        json=[{'path': '/program', 'op': 'replace',
               'value': [{'image_uuid': 'not-a-uuid'}]}], timeout=10)
    assert bad.status_code == 400
    assert 'image_uuid' in json.loads(bad.json()['error_message'])[
        'faultstring']


def osc_fails(endpoint, *args):
    """``openstack <args>`` that must fail; its output and errors."""
    argv = ['--os-auth-type', 'none', '--os-endpoint', endpoint, *args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = shell.main(argv)
    assert status != 0, (argv, out.getvalue())
    return out.getvalue() + err.getvalue()


def _arq_state(endpoint, uuid, wanted):
    processes.wait_for(
        lambda: requests.get('%s/accelerator_requests/%s' % (endpoint, uuid),
                             timeout=5).json()['state'] == wanted,
        timeout=30, what='ARQ %s %s' % (uuid, wanted))


def test_cli_arq_unbind_reaches_the_api(endpoint):
    """`arq unbind` PATCHes the ARQ's own URL (it was a 405): without a
    service token, which the CLI cannot send, the API refuses it as it
    refuses any user's unbind."""
    osc(endpoint, 'accelerator', 'device', 'profile', 'create', 'unbind-dp',
        json.dumps([{'resources:FPGA': '1'}]), '-f', 'json')
    arq = osc(endpoint, 'accelerator', 'arq', 'create', 'unbind-dp',
              '-f', 'json')
    try:
        output = osc_fails(endpoint, 'accelerator', 'arq', 'unbind',
                           arq['uuid'])
        assert 'requires a service token' in output, output
        # The status, not a '405' inside the ARQ's uuid.
        assert '403:' in output and '405:' not in output, output
    finally:
        osc(endpoint, 'accelerator', 'arq', 'delete', arq['uuid'])
        osc(endpoint, 'accelerator', 'device', 'profile', 'delete',
            'unbind-dp')


def test_sdk_arq_bind_and_unbind(sdk, endpoint):
    """openstacksdk's patch_accelerator_request (PATCH on the item URL)
    binds and unbinds, as a service (the service token it is given)."""
    sdk.additional_headers = {'X-Service-Token': 'nova'}
    profile = sdk.create_device_profile(
        name='sdk-bind-dp', groups=[{'resources:FPGA': '1'}])
    arq = sdk.create_accelerator_request(device_profile_name='sdk-bind-dp')
    # The SDK's Deployable has no rp_uuid.
    rp_uuid = requests.get(endpoint + '/deployables', timeout=10).json()[
        'deployables'][0]['rp_uuid']
    instance = 'a7c1f0e2-5b7d-4d8e-9c3a-0e1f2a3b4c5d'
    try:
        sdk.patch_accelerator_request(arq.uuid, [
            {'path': '/hostname', 'op': 'add', 'value': AGENT_HOST},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
            {'path': '/instance_uuid', 'op': 'add', 'value': instance}])
        _arq_state(endpoint, arq.uuid, 'Bound')
        bound = requests.get(
            '%s/accelerator_requests/%s' % (endpoint, arq.uuid),
            headers={'OpenStack-API-Version': 'accelerator 2.4'},
            timeout=10).json()
        assert bound['device_health'] == 'healthy'
        sdk.patch_accelerator_request(arq.uuid, [
            {'path': '/hostname', 'op': 'remove'},
            {'path': '/device_rp_uuid', 'op': 'remove'},
            {'path': '/instance_uuid', 'op': 'remove'}])
        _arq_state(endpoint, arq.uuid, 'Unbound')
    finally:
        sdk.delete_accelerator_request(arq.uuid, ignore_missing=False)
        sdk.delete_device_profile(profile.uuid, ignore_missing=False)


def test_sdk_create_attribute(sdk):
    """openstacksdk wraps the attribute in {"attribute": ...}."""
    deployable = list(sdk.deployables())[0]
    created = sdk.create_attribute(deployable_id=deployable.id,
                                   key='sdk-key', value='sdk-value')
    try:
        assert created.key == 'sdk-key'
        assert sdk.get_attribute(created.uuid).value == 'sdk-value'
    finally:
        sdk.delete_attribute(created.uuid, ignore_missing=False)
