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
"""

import hashlib
import threading

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


def get_image(conf, image_uuid):
    """The image's metadata; Invalid (400) when Glance has no such image,
    or has it but not active (being uploaded or imported, deactivated):
    its data cannot be downloaded."""
    try:
        image = _connection(conf).image.get_image(image_uuid)
    except sdk_exc.NotFoundException:
        raise exception.Invalid(
            reason=f'image {image_uuid} not found in Glance')
    except (sdk_exc.SDKException, ks_exc.ClientException) as e:
        raise _unavailable(e)
    if image.status and image.status != ACTIVE:
        raise exception.Invalid(
            reason=f'image {image_uuid} is {image.status} in Glance, not '
                   f'{ACTIVE}')
    values = dict(image.properties or {})
    values.update(id=image.id, checksum=image.checksum,
                  os_hash_algo=image.hash_algo,
                  os_hash_value=image.hash_value, size=image.size)
    return values


def find_by_function_id(conf, function_id):
    """The one active image whose ``accel:function_id`` property is
    ``function_id`` (a new version still being uploaded, or an old one
    deactivated, does not count)."""
    try:
        response = _connection(conf).image.get(
            '/images', params={FUNCTION_ID_PROPERTY: function_id,
                               'status': ACTIVE})
    except (sdk_exc.SDKException, ks_exc.ClientException) as e:
        raise _unavailable(e)
    if response.status_code != 200:
        raise _unavailable(f'listing images answered {response.status_code}')
    images = [i for i in response.json().get('images', [])
              if i.get(FUNCTION_ID_PROPERTY) == function_id
              and i.get('status', ACTIVE) == ACTIVE]
    if len(images) != 1:
        raise exception.Invalid(
            reason=f'{len(images)} images in Glance have function id '
                   f'{function_id}; want exactly one')
    return get_image(conf, images[0]['id'])


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
