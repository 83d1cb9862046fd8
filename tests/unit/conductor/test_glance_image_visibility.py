"""An image programs an FPGA for a project only when that project may use
it: the conductor's [glance] credentials (an admin's, in most clouds)
see every project's images, and programming took any of them.  A
tenant's private image with an operator's function id either failed
every bind asking for that function ("2 images ... want exactly one"),
or, the operator's image gone, was the one written onto another
tenant's card; a profile's accel:bitstream_id naming another project's
private image had that image programmed, though its owner never shared
it.

Usable (``glance.usable``): public and community images, the project's
own, images shared with it that it accepted (Glance asked for that
membership of shared images only), and the images of the projects the
operator trusts ([glance]trusted_image_owners, and the project of the
[glance] credentials).  Any other is as one Glance does not have.

A recording Glance that lists and shows every image to the conductor,
as Glance does to an admin (and a real Keystone for the [glance]
credentials' project); the bind and the administrator's program through
a real agent endpoint (the fake driver) and the real Placement, on
SQLite, MariaDB and PostgreSQL."""

import uuid as uuidlib

import pytest
from keystoneauth1 import loading as ks_loading

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import glance as glance_client
from cyborg.conductor import programming
from cyborg.drivers import fake
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import keystone as keystone_fixture
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http
from tests.unit.conductor import test_programming as tp
from tests.unit.conductor import test_programming_take_out_race as tor

glance = recording_http.fake_glance
keystone = keystone_fixture.keystone
placement_url = tp.placement_url
ctx = tp.ctx
# SQLite, MariaDB and PostgreSQL.
engine = tor.engine

OPERATOR = 'operator-project'
VICTIM = 'p1'
ATTACKER = 'tenant-attacker'
FUNCTION = 'fn-crypto'


@pytest.fixture
def gconf(conf, glance):
    conf.set_override('auth_type', 'none', group='glance')
    conf.set_override('endpoint_override', glance.url, group='glance')
    return conf


def _image(glance, owner, visibility, function=FUNCTION, data=b'bits'):
    return glance.add_image(data * 10, {'accel:function_id': function},
                            owner=owner, visibility=visibility)


def _member_asks(glance):
    return [r.path for r in glance.requests if '/members/' in r.path]


def test_a_tenants_private_image_does_not_count_for_another_project(
        gconf, glance):
    operator = _image(glance, OPERATOR, 'public')
    _image(glance, ATTACKER, 'private', data=b'evil')
    found = glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    assert found['id'] == operator
    # Its owner sees both (its own problem, no one else's).
    with pytest.raises(exception.Invalid,
                       match='2 images in Glance have function id '
                             f'{FUNCTION} that project {ATTACKER} may use'):
        glance_client.find_by_function_id(gconf, FUNCTION, ATTACKER)
    # The operator's image deactivated: none, never the tenant's.
    glance.images[operator]['status'] = 'deactivated'
    with pytest.raises(exception.Invalid,
                       match=f'0 images in Glance have function id '
                             f'{FUNCTION}'):
        glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    assert not _member_asks(glance)


def test_others_images_do_not_push_the_usable_one_off_the_first_page(
        gconf, glance):
    """Glance lists a page at a time (25 images by default)."""
    glance.page_size = 2
    for n in range(5):
        _image(glance, ATTACKER, 'private', data=b'evil%d' % n)
    operator = _image(glance, OPERATOR, 'public')
    found = glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    assert found['id'] == operator
    listings = [r for r in glance.requests if r.path == '/v2/images']
    assert len(listings) == 3


@pytest.mark.parametrize('status', ['active', 'deactivated'])
def test_another_projects_image_by_id_is_not_found(gconf, glance, status):
    """Said as for an image Glance does not have, even its status."""
    image = _image(glance, ATTACKER, 'private')
    glance.images[image]['status'] = status
    with pytest.raises(exception.Invalid) as caught:
        glance_client.get_image(gconf, image, VICTIM)
    missing = str(uuidlib.uuid4())
    with pytest.raises(exception.Invalid) as absent:
        glance_client.get_image(gconf, missing, VICTIM)
    assert str(caught.value) == str(absent.value).replace(missing, image)
    assert 'not found in Glance' in str(caught.value)
    if status == 'active':
        assert glance_client.get_image(gconf, image, ATTACKER)['id'] == image
    else:
        with pytest.raises(exception.Invalid, match='is deactivated'):
            glance_client.get_image(gconf, image, ATTACKER)


def test_public_community_and_own_images_are_usable(gconf, glance):
    for owner, visibility in ((ATTACKER, 'public'), (ATTACKER, 'community'),
                              (VICTIM, 'private'), (VICTIM, 'shared')):
        image = _image(glance, owner, visibility, function=visibility)
        assert glance_client.get_image(gconf, image, VICTIM)['id'] == image
        assert glance_client.find_by_function_id(
            gconf, visibility, VICTIM)['id'] == image
    assert not _member_asks(glance)


@pytest.mark.parametrize('member, usable', [
    ('accepted', True), ('pending', False), ('rejected', False),
    (None, False)])
def test_a_shared_image_is_usable_once_its_member_accepted(
        gconf, glance, member, usable):
    image = _image(glance, ATTACKER, 'shared')
    if member is not None:
        glance.members[image] = {VICTIM: member}
    if usable:
        assert glance_client.get_image(gconf, image, VICTIM)['id'] == image
        assert glance_client.find_by_function_id(
            gconf, FUNCTION, VICTIM)['id'] == image
    else:
        with pytest.raises(exception.Invalid, match='not found in Glance'):
            glance_client.get_image(gconf, image, VICTIM)
        with pytest.raises(exception.Invalid, match='0 images in Glance'):
            glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    assert set(_member_asks(glance)) == {
        f'/v2/images/{image}/members/{VICTIM}'}


def test_a_trusted_owners_private_image_is_usable(gconf, glance):
    image = _image(glance, OPERATOR, 'private')
    with pytest.raises(exception.Invalid, match='not found in Glance'):
        glance_client.get_image(gconf, image, VICTIM)
    gconf.set_override('trusted_image_owners', ['other', OPERATOR],
                       group='glance')
    assert glance_client.get_image(gconf, image, VICTIM)['id'] == image
    assert glance_client.find_by_function_id(
        gconf, FUNCTION, VICTIM)['id'] == image
    # Also where the ARQ has no project.
    assert glance_client.get_image(gconf, image, None)['id'] == image


def test_the_credentials_projects_private_image_is_usable(
        conf, glance, keystone):
    """Where operators upload bitstreams: the project the [glance]
    credentials are scoped to (a real Keystone's token: user cyborg in
    project service)."""
    conf.register_opts(ks_loading.get_auth_plugin_conf_options('password'),
                       group='glance')
    for key, value in keystone.client_options('cyborg', 'service').items():
        conf.set_override(key, value, group='glance')
    conf.set_override('endpoint_override', glance.url, group='glance')
    service = keystone.project_id('service')
    image = _image(glance, service, 'private')
    assert glance_client.get_image(conf, image, VICTIM)['id'] == image
    assert glance_client.find_by_function_id(
        conf, FUNCTION, VICTIM)['id'] == image
    # Another project's private image is not.
    other = _image(glance, keystone.project_id('demo'), 'private',
                   function='other')
    with pytest.raises(exception.Invalid, match='not found in Glance'):
        glance_client.get_image(conf, other, VICTIM)


# -- at bind and by an administrator -----------------------------------------

@pytest.fixture
def pconf(conf, engine, placement_url, glance, tmp_path):
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('auth_type', 'none', group='glance')
    conf.set_override('endpoint_override', glance.url, group='glance')
    conf.set_override('state_path', str(tmp_path))
    conf.set_override('send_events', False, group='nova')
    placement_client.reset_clients()
    return conf


@pytest.fixture
def agent(pconf):
    """The agent's RPC endpoint with the fake driver, in this process."""
    driver = fake.FakeDriver(pconf, tp.HOST)
    with seed.agent_endpoint(pconf, tp.HOST, {'fake_driver': driver}):
        yield driver


@pytest.fixture
def device(pconf, engine):
    return tp._reported(pconf, engine, handles=4,
                        traits={programming.TRAIT_ATTRIBUTE: tp.OLD_TRAIT})


def test_a_bind_programs_the_operators_image_not_a_tenants(
        pconf, ctx, engine, agent, device, glance):
    operator = _image(glance, OPERATOR, 'public')
    _image(glance, ATTACKER, 'private', data=b'evil')
    row = tp._bind(pconf, ctx, engine, device, {'accel:function_id': FUNCTION})
    assert row.state == 'Bound', row.bind_failure_reason
    assert tp._loaded(agent) == operator


def test_a_bind_naming_another_projects_image_fails_as_not_found(
        pconf, ctx, engine, agent, device, glance):
    image = _image(glance, ATTACKER, 'private')
    row = tp._bind(pconf, ctx, engine, device, {'accel:bitstream_id': image})
    assert row.state == 'BindFailed'
    assert f'image {image} not found in Glance' in row.bind_failure_reason
    assert tp._loaded(agent) is None
    assert glance.downloads() == []


def test_a_bind_uses_the_arqs_projects_own_image(
        pconf, ctx, engine, agent, device, glance):
    """The ARQ's project (its row's), not the caller's (Nova's service
    context)."""
    image = _image(glance, VICTIM, 'private')
    nova = cyborg_context.RequestContext(project_id='service',
                                         is_service=True)
    row = tp._bind(pconf, nova, engine, device, {'accel:bitstream_id': image})
    assert row.state == 'Bound', row.bind_failure_reason
    assert tp._loaded(agent) == image


def test_an_administrators_program_uses_the_administrators_project(
        pconf, ctx, engine, agent, device, glance):
    image = _image(glance, ATTACKER, 'private')
    with pytest.raises(exception.Invalid, match='not found in Glance'):
        programming.program_deployable(pconf, ctx, device.deployable_uuid,
                                       image)
    assert tp._loaded(agent) is None
    mine = _image(glance, VICTIM, 'private', data=b'mine')
    programming.program_deployable(pconf, ctx, device.deployable_uuid, mine)
    assert tp._loaded(agent) == mine
