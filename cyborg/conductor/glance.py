"""FPGA bitstreams from Glance, through openstacksdk and the ``[glance]``
keystoneauth options (no cloud names: the conductor's own config).

``get_image`` and ``find_by_function_id`` return an image's metadata as a
dict (``id``, ``os_hash_algo``, ``os_hash_value``, ``checksum``, ``size``
and the custom properties such as ``accel:function_id``); ``download``
returns its data once the digest Glance advertises has been checked.

A bitstream goes to the agent in one RPC message, which the message
broker refuses beyond its maximum size: one over
``[glance]max_bitstream_size`` is refused (``check_size``) before it is
downloaded where Glance gives its size, and as soon as its download
passes the limit where Glance does not (or gives a wrong one).

The conductor's ``[glance]`` credentials may see every project's images
(an admin's do), so an image is looked up for one project, the ARQ's
(an administrator's own for ``PATCH /deployables/{uuid}/program``):

- by id (``get_image``), an image that project may use (``usable``):
  ``public`` or ``community``, its own, ``shared`` with it (whatever its
  member status: Glance serves a shared image by id to any member), or
  one the operator trusts (owned by the project of the ``[glance]``
  credentials, or by one of ``[glance]trusted_image_owners``).  Another
  is said not to be found, as one Glance does not have (a WARNING tells
  the operator why);
- by function id (``find_by_function_id``), only among images no
  tenant can put there for another project: those of the trusted
  owners, ``public`` ones (Glance's default policy lets only an admin
  publicize an image) and the project's own (they concern it alone).
  A ``community`` image, or one another project shares, never counts.
  One listing per source, filtered by Glance (owner or visibility,
  function id, status), with no question per image.
"""

import hashlib
import threading
import urllib.parse

import openstack.connection
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from openstack import exceptions as sdk_exc
from oslo_log import log as logging
import requests

from cyborg.common import exception
from cyborg.conf import ksa

FUNCTION_ID_PROPERTY = 'accel:function_id'
# The one image status whose data can be downloaded.
ACTIVE = 'active'
# Glance's visibilities of the images every project may use by id.
EVERYONE = ('public', 'community')
# The one visibility that only an admin may set (Glance's default
# policy): the images of it count for a function id.
PUBLIC = 'public'
# The visibility of an image its owner shares with member projects.
SHARED = 'shared'
# Images asked for in one page of a listing (Glance caps it with its
# api_limit_max, 1000 by default; ``next`` links give the rest).
LISTING_LIMIT = 1000

LOG = logging.getLogger(__name__)

_CONNECTIONS = {}
_LOCK = threading.Lock()


def _connection(conf):
    if not ksa.has_credentials(conf.glance):
        raise exception.Invalid(reason='no Glance is configured ([glance] '
                                       'auth_type or auth_section) to fetch '
                                       'bitstreams from')
    with _LOCK:
        conn = _CONNECTIONS.get(_key(conf))
        if conn is None:
            auth = ks_loading.load_auth_from_conf_options(conf, 'glance')
            session = ks_loading.load_session_from_conf_options(
                conf, 'glance', auth=auth)
            conn = openstack.connection.Connection(session=session,
                                                   oslo_conf=conf)
            _CONNECTIONS[_key(conf)] = conn
        return conn


def _unavailable(e):
    return exception.ServiceUnavailable(reason=f'Glance: {e}')


def get_image(conf, image_uuid, project_id):
    """The image's metadata, for an ARQ (or an administrator) of
    ``project_id``; Invalid (400) when Glance has no such image, or has
    one ``project_id`` may not use (``usable``: said as for one Glance
    does not have, the reason in a WARNING), or has it but not active
    (being uploaded or imported, deactivated): its data cannot be
    downloaded."""
    conn = _connection(conf)
    image = _shown(conn, image_uuid)
    # Before its status, which would tell that it exists.
    if not _usable_or_warned(conf, conn, image, project_id):
        raise _not_found(image_uuid)
    return _metadata(image_uuid, image)


def get_image_for_all(conf, image_uuid, project_ids):
    """``get_image`` of one image for several projects at once (the
    holders of a card whose image is restored), read once: Invalid
    naming the first project that may not use it."""
    conn = _connection(conf)
    image = _shown(conn, image_uuid)
    for project_id in project_ids:
        if not _usable_or_warned(conf, conn, image, project_id):
            raise exception.Invalid(
                reason=f'image {image_uuid} is not one project '
                       f'{project_id} may use (see [glance] '
                       f'trusted_image_owners)')
    return _metadata(image_uuid, image)


def _shown(conn, image_uuid):
    try:
        return conn.image.get_image(image_uuid)
    except sdk_exc.NotFoundException:
        raise _not_found(image_uuid)
    except (sdk_exc.SDKException, ks_exc.ClientException) as e:
        raise _unavailable(e)


def _metadata(image_uuid, image):
    if image.status and image.status != ACTIVE:
        raise exception.Invalid(
            reason=f'image {image_uuid} is {image.status} in Glance, not '
                   f'{ACTIVE}')
    values = dict(image.properties or {})
    values.update(id=image.id, checksum=image.checksum,
                  os_hash_algo=image.hash_algo,
                  os_hash_value=image.hash_value, size=image.size)
    return values


def _usable_or_warned(conf, conn, image, project_id):
    if usable(conf, conn, image.id, image.owner, image.visibility,
              project_id):
        return True
    # For the operator only: the caller is told "not found".
    LOG.warning('Glance image %s (owner %s, visibility %s) refused for '
                'project %s: not public or community, not its own, not '
                'shared with it, and its owner is not trusted.  If '
                'operators upload bitstreams to project %s, add it to '
                '[glance]trusted_image_owners (or make the image public)',
                image.id, image.owner, image.visibility, project_id,
                image.owner)
    return False


def _not_found(image_uuid):
    return exception.Invalid(
        reason=f'image {image_uuid} not found in Glance')


def find_by_function_id(conf, function_id, project_id):
    """The one active image whose ``accel:function_id`` property is
    ``function_id`` among the candidates for ``project_id``
    (``function_id_candidates``: the trusted owners', public ones and
    the project's own); a new version still being uploaded, or an old
    one deactivated, does not count either.  Invalid unless there is
    exactly one."""
    return one_by_function_id(
        conf, function_id, project_id,
        function_id_candidates(conf, function_id, project_id))


def one_by_function_id(conf, function_id, project_id, images):
    """The metadata of the one image of ``images`` (candidates found for
    ``project_id``, None: for any project), else Invalid."""
    if len(images) != 1:
        who = (f'project {project_id}' if project_id is not None
               else 'every project')
        raise exception.Invalid(
            reason=f'{len(images)} images in Glance have function id '
                   f'{function_id} that {who} may use; want exactly one')
    return get_image(conf, images[0]['id'], project_id)


def function_id_candidates(conf, function_id, project_id):
    """The active images with ``accel:function_id`` ``function_id`` that
    count for ``project_id`` (None: those that count for every project),
    as Glance lists them, each once: the images of the trusted owners
    (``trusted_owners``), the ``public`` ones and ``project_id``'s own.
    One listing per source, with every page followed; a ``community``
    image, or one shared by another project, is not asked for."""
    conn = _connection(conf)
    trusted = trusted_owners(conf, conn)
    wanted = {FUNCTION_ID_PROPERTY: function_id, 'status': ACTIVE,
              'limit': str(LISTING_LIMIT)}
    sources = [('owner', owner) for owner in sorted(trusted)]
    if project_id is not None and project_id not in trusted:
        sources.append(('owner', project_id))
    sources.append(('visibility', PUBLIC))
    found = {}
    for key, value in sources:
        for image in _listed(conn, dict(wanted, **{key: value})):
            # Glance applies the filters; checked again all the same.
            if (image.get(key) == value
                    and image.get(FUNCTION_ID_PROPERTY) == function_id
                    and image.get('status', ACTIVE) == ACTIVE
                    and image.get('id')):
                found.setdefault(image['id'], image)
    return [found[i] for i in sorted(found)]


def listed_with_function_id(conf, function_id):
    """Every active image Glance lists to the ``[glance]`` credentials
    with ``accel:function_id`` ``function_id``, whoever owns it (what a
    lookup took before owners were checked: ``cyborg-status upgrade
    check`` compares)."""
    return [i for i in _listed(_connection(conf), {
        FUNCTION_ID_PROPERTY: function_id, 'status': ACTIVE,
        'limit': str(LISTING_LIMIT)})
        if i.get(FUNCTION_ID_PROPERTY) == function_id]


def shown(conf, image_uuid):
    """The image's metadata (``id``, ``owner``, ``visibility``...) as
    Glance shows it to the ``[glance]`` credentials, whoever may use it;
    None when Glance has no such image."""
    try:
        image = _shown(_connection(conf), image_uuid)
    except exception.Invalid:
        return None
    return {'id': image.id, 'owner': image.owner,
            'visibility': image.visibility, 'status': image.status}


def _listed(conn, params):
    """Every image Glance lists with ``params``, following its ``next``
    links (a page holds at most ``limit`` images, Glance's api_limit_max
    if that is less)."""
    images = []
    markers = set()
    wanted = dict(params)
    while True:
        try:
            response = conn.image.get('/images', params=params)
        except (sdk_exc.SDKException, ks_exc.ClientException) as e:
            raise _unavailable(e)
        if response.status_code != 200:
            raise _unavailable(
                f'listing images answered {response.status_code}')
        body = response.json()
        page = body.get('images', [])
        images.extend(page)
        following = dict(urllib.parse.parse_qsl(
            urllib.parse.urlsplit(body.get('next') or '').query))
        marker = following.get('marker')
        if not page or not marker or marker in markers:
            return images
        markers.add(marker)
        # The filters kept whether or not the link repeats them.
        params = dict(wanted, **following)


def usable(conf, conn, image_id, owner, visibility, project_id):
    """Whether an image (its id, ``owner`` and ``visibility`` as Glance
    gives them) named by id may program an FPGA for ``project_id``:
    Glance serves it by id to that project (``public`` or
    ``community``; its own; ``shared`` and the project a member, whatever
    its member status: Glance is asked, only of such an image), or the
    operator trusts its owner (``trusted_owners``).  ``conn``: None for
    the ``[glance]`` connection."""
    conn = conn or _connection(conf)
    if visibility in EVERYONE:
        return True
    if owner and project_id and owner == project_id:
        return True
    if owner and owner in trusted_owners(conf, conn):
        return True
    if visibility == SHARED and project_id and image_id:
        return _member(conn, image_id, project_id)
    return False


def trusted_owners(conf, conn=None):
    """The projects whose images program an FPGA for any project: the
    project of the ``[glance]`` credentials, and
    ``[glance]trusted_image_owners``."""
    conn = conn or _connection(conf)
    owners = set(conf.glance.trusted_image_owners)
    try:
        own = conn.session.get_project_id()
    except ks_exc.ClientException as e:
        raise _unavailable(e)
    if own:
        owners.add(own)
    return owners


def _member(conn, image_id, project_id):
    """Whether Glance has ``project_id`` as a member of the image (in
    any member status: pending, accepted or rejected only changes what
    Glance lists to it, not what it serves by id)."""
    path = (f'/images/{urllib.parse.quote(image_id, safe="")}/members/'
            f'{urllib.parse.quote(project_id, safe="")}')
    try:
        response = conn.image.get(path)
    except (sdk_exc.SDKException, ks_exc.ClientException) as e:
        raise _unavailable(e)
    if response.status_code in (403, 404):
        # Not a member (or the image no longer shared).
        return False
    if response.status_code != 200:
        raise _unavailable(f'reading image {image_id}\'s members answered '
                           f'{response.status_code}')
    return True


def check_size(conf, image):
    """BitstreamTooLarge (400) when Glance gives the image's size and it
    is over ``[glance]max_bitstream_size``, before anything downloads
    it."""
    size = image.get('size')
    if size is not None and size > conf.glance.max_bitstream_size:
        raise exception.BitstreamTooLarge(
            image=image['id'], size=f'{size} bytes',
            limit=conf.glance.max_bitstream_size)


def download(conf, image):
    """The image data, checked against ``os_hash_value`` (else the md5
    ``checksum``) before anyone uses it; BitstreamTooLarge before the
    download when Glance's size is over the limit, or as soon as the data
    received passes it."""
    check_size(conf, image)
    algo, expected = _expected_digest(image)
    limit = conf.glance.max_bitstream_size
    digest = hashlib.new(algo)
    chunks = []
    received = 0
    try:
        response = _connection(conf).image.download_image(
            image['id'], stream=True)
        for chunk in response.iter_content(conf.glance.download_chunk_size):
            received += len(chunk)
            if received > limit:
                # Not read to its end: the rest would only be dropped.
                response.close()
                raise exception.BitstreamTooLarge(
                    image=image['id'],
                    size=f'more than {limit} bytes downloaded; Glance '
                         f'gave {_size_given(image)}', limit=limit)
            digest.update(chunk)
            chunks.append(chunk)
    except (sdk_exc.SDKException, ks_exc.ClientException) as e:
        raise _unavailable(e)
    except requests.RequestException as e:
        # Read from requests itself once the answer has begun: Glance
        # stopped sending (``[glance]timeout``) or dropped the connection.
        raise _unavailable(f"downloading image {image['id']}: {e}")
    if digest.hexdigest() != expected:
        raise exception.Invalid(
            reason=f"image {image['id']} failed its {algo} check: Glance "
                   f'says {expected}, the data hashes to '
                   f'{digest.hexdigest()}')
    return b''.join(chunks)


def _size_given(image):
    size = image.get('size')
    return 'no size' if size is None else f'a size of {size} bytes'


def _expected_digest(image):
    if image.get('os_hash_algo') and image.get('os_hash_value'):
        algo = image['os_hash_algo']
        if algo not in hashlib.algorithms_available:
            raise exception.Invalid(reason=f"image {image['id']} uses "
                                           f'unknown hash algorithm {algo}')
        return algo, image['os_hash_value']
    if image.get('checksum'):
        return 'md5', image['checksum']
    raise exception.Invalid(reason=f"image {image['id']} has no checksum "
                                   f'to verify its data against')


def _key(conf):
    # id() alone could name a dead conf's cached client; the endpoint and
    # auth type make a reused id harmless.
    return (id(conf), conf.glance.auth_type, conf.glance.endpoint_override)
