"""An image programs an FPGA for a project only when that project may use
it: the conductor's [glance] credentials (an admin's, in most clouds)
see every project's images, and programming took any of them.  A
tenant's private image with an operator's function id either failed
every bind asking for that function ("2 images ... want exactly one"),
or, the operator's image gone, was the one written onto another
tenant's card; a profile's accel:bitstream_id naming another project's
private image had that image programmed, though its owner never shared
it.

By id (``glance.usable``): public and community images, the project's
own, images shared with it whatever its member status (Glance serves
them by id), and the images of the projects the operator trusts
([glance]trusted_image_owners, and the project of the [glance]
credentials).  Any other is as one Glance does not have, the reason in
a WARNING for the operator.

By function id (``glance.function_id_candidates``): only the trusted
owners' images, public ones and the project's own.  A community image
(any project member may make one), or one another project shares,
never counts; a tenant's shared images cost no request each (they
made a lookup ask Glance once per image, past the bind timeout).

A recording Glance that lists and shows every image to the conductor,
as Glance does to an admin (and a real Keystone for the [glance]
credentials' project); the bind and the administrator's program through
a real agent endpoint (the fake driver) and the real Placement, on
SQLite, MariaDB and PostgreSQL."""

import logging
import uuid as uuidlib

import pytest
from keystoneauth1 import loading as ks_loading

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import glance as glance_client
from cyborg.conductor import programming
from cyborg.drivers import fake
from tests.fixtures import arqs as seed
from tests.fixtures import keystone as keystone_fixture
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
    return glance.member_asks()


def _refusals(caplog):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING
            and r.name == 'cyborg.conductor.glance']


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


def test_every_page_of_a_listing_is_read(gconf, glance):
    """Glance lists a page at a time (its api_limit_max at most)."""
    glance.page_size = 2
    for n in range(3):
        _image(glance, VICTIM, 'private', data=b'mine%d' % n)
    with pytest.raises(exception.Invalid, match='3 images in Glance'):
        glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    mine = [r for r in glance.listings() if r.query.get('owner') == VICTIM]
    assert len(mine) == 2


def test_a_community_image_never_counts_for_a_function_id(gconf, glance):
    """Any project member may make its image community: it would fail
    every bind by the operator's function id (2 images), or, the
    operator's image deactivated, be programmed for every project."""
    operator = _image(glance, OPERATOR, 'public')
    evil = _image(glance, ATTACKER, 'community', data=b'evil')
    found = glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    assert found['id'] == operator
    glance.images[operator]['status'] = 'deactivated'
    with pytest.raises(exception.Invalid, match='0 images in Glance'):
        glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    # By id, Glance serves it to every project: so does this.
    assert glance_client.get_image(gconf, evil, VICTIM)['id'] == evil


def test_a_tenants_shared_images_cost_no_request_each(gconf, glance):
    """300 shared images with the operator's function id asked Glance
    once each for a membership, and listed 25 a page: 315 requests a
    lookup.  One listing per source now, whatever their number."""
    glance.page_size = 25
    operator = _image(glance, OPERATOR, 'public')
    for n in range(300):
        _image(glance, ATTACKER, 'shared', data=b'evil%d' % n)
    found = glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    assert found['id'] == operator
    # owner=VICTIM, visibility=public, then the image found (besides
    # the client's version discovery).
    asked = [(r.path, r.query) for r in glance.requests
             if r.path.startswith('/v2/images')]
    assert len(asked) == 3, asked
    assert not _member_asks(glance)
    for listing in glance.listings():
        assert listing.query[glance_client.FUNCTION_ID_PROPERTY] == FUNCTION
        assert listing.query['status'] == 'active'
        assert int(listing.query['limit']) >= 1000


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


def test_public_community_and_own_images_are_usable_by_id(gconf, glance):
    for owner, visibility in ((ATTACKER, 'public'), (ATTACKER, 'community'),
                              (VICTIM, 'private'), (VICTIM, 'shared')):
        image = _image(glance, owner, visibility, function=visibility)
        assert glance_client.get_image(gconf, image, VICTIM)['id'] == image
        found = (visibility != 'community')
        if found:
            assert glance_client.find_by_function_id(
                gconf, visibility, VICTIM)['id'] == image
        else:
            with pytest.raises(exception.Invalid, match='0 images'):
                glance_client.find_by_function_id(gconf, visibility, VICTIM)
    assert not _member_asks(glance)


@pytest.mark.parametrize('member', ['accepted', 'pending', 'rejected', None])
def test_a_shared_image_is_usable_by_id_by_any_member(
        gconf, glance, member, caplog):
    """Glance serves a shared image by id to a member whatever its
    status (pending or rejected only keeps it out of the member's
    listing); by function id, another project's shared image never
    counts, and costs no membership request."""
    image = _image(glance, ATTACKER, 'shared')
    if member is not None:
        glance.members[image] = {VICTIM: member}
    with caplog.at_level(logging.WARNING):
        if member is not None:
            assert glance_client.get_image(gconf, image, VICTIM)['id'] == \
                image
        else:
            with pytest.raises(exception.Invalid,
                               match='not found in Glance'):
                glance_client.get_image(gconf, image, VICTIM)
    assert bool(_refusals(caplog)) == (member is None)
    assert set(_member_asks(glance)) == {
        f'/v2/images/{image}/members/{VICTIM}'}
    asked = len(_member_asks(glance))
    with pytest.raises(exception.Invalid, match='0 images in Glance'):
        glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    assert len(_member_asks(glance)) == asked


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


def test_an_admin_projects_image_is_refused_with_a_warning_until_trusted(
        gconf, glance, caplog):
    """The usual upload: as admin, into the admin project, visibility
    shared (Glance's default), while the [glance] credentials are the
    service project's.  Refused (not found, for the caller) with a
    WARNING telling the operator what to do; usable once the admin
    project is a trusted owner."""
    admin = 'admin-project'
    image = _image(glance, admin, 'shared')
    with caplog.at_level(logging.WARNING):
        with pytest.raises(exception.Invalid) as caught:
            glance_client.get_image(gconf, image, VICTIM)
    assert f'image {image} not found in Glance' in str(caught.value)
    assert 'trusted_image_owners' not in str(caught.value)
    warned = _refusals(caplog)
    assert len(warned) == 1, warned
    for word in (image, admin, 'shared', VICTIM,
                 '[glance]trusted_image_owners', 'public'):
        assert word in warned[0], (word, warned[0])
    with pytest.raises(exception.Invalid, match='0 images in Glance'):
        glance_client.find_by_function_id(gconf, FUNCTION, VICTIM)
    gconf.set_override('trusted_image_owners', [admin], group='glance')
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert glance_client.get_image(gconf, image, VICTIM)['id'] == image
        assert glance_client.find_by_function_id(
            gconf, FUNCTION, VICTIM)['id'] == image
    assert not _refusals(caplog)
    # Only the first (refused) read by id asked for a membership.
    assert len(_member_asks(glance)) == 1


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
    conf.set_override('send_events', False, group='nova')
    return tp.programming_conf(conf, placement_url, glance, tmp_path)


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
