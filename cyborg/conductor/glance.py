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
(an admin's do), so both look an image up for one project, the ARQ's
(an administrator's own for ``PATCH /deployables/{uuid}/program``), and
take only an image that project may use (``usable``): one Glance itself
shows it (``public`` or ``community``, its own, or ``shared`` with it and
accepted), or one the operator trusts (owned by the project of the
``[glance]`` credentials, or by one of ``[glance]trusted_image_owners``).
Another image is as one Glance does not have: ``get_image`` says it is
not found, and ``find_by_function_id`` does not count it.
"""

import hashlib
import threading
import urllib.parse

import openstack.connection
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from openstack import exceptions as sdk_exc
import requests

from cyborg.common import exception
from cyborg.conf import ksa

FUNCTION_ID_PROPERTY = 'accel:function_id'
# The one image status whose data can be downloaded.
ACTIVE = 'active'
# Glance's visibilities of the images every project sees.
EVERYONE = ('public', 'community')
# The visibility of an image its owner shares with member projects, and
# the status of a member that accepted it (Glance lists it to them).
SHARED = 'shared'
ACCEPTED = 'accepted'

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
    does not have), or has it but not active (being uploaded or imported,
    deactivated): its data cannot be downloaded."""
    conn = _connection(conf)
    try:
        image = conn.image.get_image(image_uuid)
    except sdk_exc.NotFoundException:
        raise _not_found(image_uuid)
    except (sdk_exc.SDKException, ks_exc.ClientException) as e:
        raise _unavailable(e)
    # Before its status, which would tell that it exists.
    if not usable(conf, conn, image.id, image.owner, image.visibility,
                  project_id):
        raise _not_found(image_uuid)
    if image.status and image.status != ACTIVE:
        raise exception.Invalid(
            reason=f'image {image_uuid} is {image.status} in Glance, not '
                   f'{ACTIVE}')
    values = dict(image.properties or {})
    values.update(id=image.id, checksum=image.checksum,
                  os_hash_algo=image.hash_algo,
                  os_hash_value=image.hash_value, size=image.size)
    return values


def _not_found(image_uuid):
    return exception.Invalid(
        reason=f'image {image_uuid} not found in Glance')


def find_by_function_id(conf, function_id, project_id):
    """The one active image whose ``accel:function_id`` property is
    ``function_id`` among those ``project_id`` may use (``usable``: an
    image of another project does not count, so it can neither hide the
    operator's nor stand in for it); a new version still being uploaded,
    or an old one deactivated, does not count either.  Every page of
    Glance's listing is read."""
    conn = _connection(conf)
    images = [i for i in _listed(conn, {FUNCTION_ID_PROPERTY: function_id,
                                        'status': ACTIVE})
              if i.get(FUNCTION_ID_PROPERTY) == function_id
              and i.get('status', ACTIVE) == ACTIVE
              and usable(conf, conn, i.get('id'), i.get('owner'),
                         i.get('visibility'), project_id)]
    if len(images) != 1:
        raise exception.Invalid(
            reason=f'{len(images)} images in Glance have function id '
                   f'{function_id} that project {project_id} may use; '
                   f'want exactly one')
    return get_image(conf, images[0]['id'], project_id)


def _listed(conn, params):
    """Every image Glance lists with ``params``, following its ``next``
    links (a page holds 25 images by default: others' images must not
    push the one wanted off the first)."""
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
    gives them) may program an FPGA for ``project_id``: Glance shows it
    to that project (``public`` or ``community``; its own; ``shared``
    with it, and accepted: Glance is asked for this membership, only of
    such an image), or the operator trusts its owner (the project of the
    ``[glance]`` credentials, or one of
    ``[glance]trusted_image_owners``)."""
    if visibility in EVERYONE:
        return True
    if owner and project_id and owner == project_id:
        return True
    if owner and owner in _trusted_owners(conf, conn):
        return True
    if visibility == SHARED and project_id and image_id:
        return _accepted(conn, image_id, project_id)
    return False


def _trusted_owners(conf, conn):
    owners = set(conf.glance.trusted_image_owners)
    try:
        own = conn.session.get_project_id()
    except ks_exc.ClientException as e:
        raise _unavailable(e)
    if own:
        owners.add(own)
    return owners


def _accepted(conn, image_id, project_id):
    """Whether Glance has ``project_id`` as a member of the image that
    accepted it."""
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
    return response.json().get('status') == ACCEPTED


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
