"""Every public method of openstacksdk's accelerator proxy against the
cloud, authenticated by the real Keystone (a user's session; Nova's, with
a service token, for binding), error paths included.

``STATUS`` says what each method does here; a method the proxy defines
without a line in ``STATUS`` fails ``test_every_method_has_a_status``,
and doc/source/clients.rst must list every one.
"""

import uuid as uuidlib
import warnings

from keystoneauth1 import service_token
from keystoneauth1 import session as ks_session
import openstack
from openstack.accelerator.v2 import _proxy
from openstack import exceptions as sdk_exc
from openstack import warnings as os_warnings
import pytest

from tests.fixtures import deployment as deployment_fixture

WORKS = 'works'
STATUS = {
    'accelerator_requests': WORKS,
    'create_accelerator_request': WORKS,
    'delete_accelerator_request': WORKS,
    'get_accelerator_request': WORKS,
    'patch_accelerator_request': (
        'works for a service only (a session with a service token); a user '
        'gets 403 "requires a service token"'),
    'update_accelerator_request': 'works (deprecated alias of '
                                  'patch_accelerator_request)',
    'deployables': WORKS,
    'get_deployable': WORKS,
    'patch_deployable': ('cannot work: it PATCHes '
                         '/deployables/{uuid}/program/{uuid}, which answers '
                         '404'),
    'update_deployable': ('cannot work: it calls itself until Python\'s '
                          'recursion limit'),
    'devices': WORKS,
    'get_device': WORKS,
    'enable_device': ('works for an admin; anyone else is refused (403) but '
                      'the method does not look at the answer'),
    'disable_device': ('works for an admin; anyone else is refused (403) '
                       'but the method does not look at the answer'),
    'device_profiles': WORKS,
    'create_device_profile': WORKS,
    'delete_device_profile': WORKS,
    'get_device_profile': ('works with a uuid; a name answers 406 (names '
                           'need microversion 2.2, and the SDK sends none)'),
    'attributes': WORKS,
    'create_attribute': WORKS,
    'delete_attribute': WORKS,
    'get_attribute': WORKS,
    'wait_for_status': WORKS,
    'wait_for_delete': WORKS,
}


def public_methods():
    return {name for name, value in vars(_proxy.Proxy).items()
            if callable(value) and not name.startswith('_')}


def connect(cloud, auth):
    session = ks_session.Session(auth=auth)
    return openstack.connection.Connection(
        session=session, region_name=cloud.region, interface='public')


@pytest.fixture(scope='module')
def admin(cloud, keystone):
    conn = connect(cloud, keystone.auth('demo-admin'))
    yield conn.accelerator
    conn.close()


@pytest.fixture(scope='module')
def member(cloud, keystone):
    conn = connect(cloud, keystone.auth('demo-member'))
    yield conn.accelerator
    conn.close()


@pytest.fixture(scope='module')
def as_nova(cloud, keystone):
    """Nova's session: the user's token plus a service token of nova's."""
    auth = service_token.ServiceTokenAuthWrapper(
        user_auth=keystone.auth('demo-member'),
        service_auth=keystone.auth('nova'))
    conn = connect(cloud, auth)
    yield conn.accelerator
    conn.close()


def unique(prefix):
    return '%s-%s' % (prefix, uuidlib.uuid4().hex[:8])


def test_every_method_has_a_status():
    assert public_methods() == set(STATUS)


def test_devices(admin, member):
    devices = list(admin.devices())
    assert [(d.type, d.vendor) for d in devices] == [('FPGA', '0xABCD')]
    device = admin.get_device(devices[0].uuid)
    assert device.hostname == deployment_fixture.AGENT_HOST
    with pytest.raises(sdk_exc.NotFoundException):
        admin.get_device(str(uuidlib.uuid4()))
    admin.disable_device(device.uuid)
    admin.enable_device(device.uuid)
    # Refused (403), and the SDK does not say so.
    member.disable_device(device.uuid)
    member.enable_device(device.uuid)
    with pytest.raises(sdk_exc.ForbiddenException):
        member.get_device(device.uuid)


def test_deployables(admin, glance):
    deployables = list(admin.deployables())
    assert [d.name for d in deployables] == [
        deployment_fixture.FAKE_DEPLOYABLE]
    deployable = admin.get_deployable(deployables[0].id)
    assert deployable.num_accelerators == 16
    with pytest.raises(sdk_exc.NotFoundException):
        admin.get_deployable(str(uuidlib.uuid4()))

    image = glance.add_image(b'sdk-bitstream' * 50)
    patch = [{'path': '/program', 'op': 'replace',
              'value': [{'image_uuid': image}]}]
    with pytest.raises(sdk_exc.NotFoundException) as wrong_url:
        admin.patch_deployable(deployable.id, patch)
    assert '/program/%s' % deployable.id in str(wrong_url.value)
    with warnings.catch_warnings():
        # One deprecation warning per call it makes of itself.
        warnings.simplefilter('ignore', os_warnings.RemovedInSDK50Warning)
        with pytest.raises(RecursionError):
            admin.update_deployable(deployable.id, patch)


def test_attributes(admin, member):
    attributes = list(admin.attributes())
    rc = [a for a in attributes if a.key == 'rc'][0]
    assert admin.get_attribute(rc.uuid).value == 'FPGA'
    with pytest.raises(sdk_exc.NotFoundException):
        admin.get_attribute(str(uuidlib.uuid4()))
    deployable = list(admin.deployables())[0]
    key = unique('sdk-key')
    created = admin.create_attribute(deployable_id=deployable.id, key=key,
                                     value='sdk-value')
    assert admin.get_attribute(created.uuid).value == 'sdk-value'
    with pytest.raises(sdk_exc.ForbiddenException):
        member.create_attribute(deployable_id=deployable.id,
                                key=unique('sdk-key'), value='v')
    admin.delete_attribute(created.uuid, ignore_missing=False)
    with pytest.raises(sdk_exc.NotFoundException):
        admin.delete_attribute(created.uuid, ignore_missing=False)
    assert admin.delete_attribute(created.uuid) is None


def test_device_profiles(admin, member):
    name = unique('sdk-dp')
    profile = admin.create_device_profile(
        name=name, groups=[{'resources:FPGA': '2'}],
        description='from the SDK')
    assert profile.name == name
    with pytest.raises(sdk_exc.ConflictException):
        admin.create_device_profile(name=name,
                                    groups=[{'resources:FPGA': '1'}])
    with pytest.raises(sdk_exc.ForbiddenException):
        member.create_device_profile(name=unique('sdk-dp'),
                                     groups=[{'resources:FPGA': '1'}])
    assert name in [p.name for p in member.device_profiles()]
    assert member.get_device_profile(profile.uuid).description == \
        'from the SDK'
    with pytest.raises(sdk_exc.HttpException) as by_name:
        member.get_device_profile(name)
    assert by_name.value.status_code == 406
    with pytest.raises(sdk_exc.NotFoundException):
        member.get_device_profile(str(uuidlib.uuid4()))
    admin.delete_device_profile(profile.uuid, ignore_missing=False)
    with pytest.raises(sdk_exc.NotFoundException):
        admin.delete_device_profile(profile.uuid, ignore_missing=False)
    assert admin.delete_device_profile(profile.uuid) is None


def test_arqs_bind_and_unbind(admin, member, as_nova):
    name = unique('sdk-arq')
    admin.create_device_profile(name=name, groups=[{'resources:FPGA': '1'}])
    arq = member.create_accelerator_request(device_profile_name=name)
    assert arq.state == 'Initial'
    with pytest.raises(sdk_exc.NotFoundException):
        member.create_accelerator_request(
            device_profile_name=unique('no-such-dp'))
    assert arq.uuid in [a.uuid for a in member.accelerator_requests()]
    assert member.get_accelerator_request(arq.uuid).device_profile_name == \
        name
    with pytest.raises(sdk_exc.NotFoundException):
        member.get_accelerator_request(str(uuidlib.uuid4()))

    rp_uuid = _rp_uuid(admin)
    instance = str(uuidlib.uuid4())
    bind = [{'path': '/hostname', 'op': 'add',
             'value': deployment_fixture.AGENT_HOST},
            {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
            {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
    with pytest.raises(sdk_exc.ForbiddenException) as refused:
        member.patch_accelerator_request(arq.uuid, bind)
    assert 'requires a service token' in str(refused.value)
    as_nova.patch_accelerator_request(arq.uuid, bind)
    bound = as_nova.wait_for_status(
        as_nova.get_accelerator_request(arq.uuid), 'Bound',
        failures=['BindFailed'], interval=0.1, wait=30, attribute='state')
    assert bound.instance_uuid == instance

    unbind = [{'path': '/hostname', 'op': 'remove'},
              {'path': '/device_rp_uuid', 'op': 'remove'},
              {'path': '/instance_uuid', 'op': 'remove'}]
    with pytest.warns(os_warnings.RemovedInSDK50Warning):
        as_nova.update_accelerator_request(arq.uuid, unbind)
    as_nova.wait_for_status(as_nova.get_accelerator_request(arq.uuid),
                            'Unbound', interval=0.1, wait=30,
                            attribute='state')

    member.delete_accelerator_request(arq.uuid, ignore_missing=False)
    member.wait_for_delete(arq, interval=0.1, wait=30)
    with pytest.raises(sdk_exc.NotFoundException):
        member.delete_accelerator_request(arq.uuid, ignore_missing=False)
    assert member.delete_accelerator_request(arq.uuid) is None


def _rp_uuid(admin):
    """The SDK's Deployable has no rp_uuid: read it as the API shows it."""
    deployable = list(admin.deployables())[0]
    response = admin.get('/deployables/%s' % deployable.id)
    return response.json()['rp_uuid']
