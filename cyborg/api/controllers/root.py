"""The version documents: GET /, GET /v2 and the OpenAPI document."""

from cyborg import version as cyborg_version
from cyborg.api import microversion

DESCRIPTION = ('Cyborg (previously known as Nomad) is an OpenStack project '
               'that aims to provide a general purpose management framework '
               'for acceleration resources (i.e. various types of '
               'accelerators such as GPU, FPGA, NP, SODC, DPDK/SPDK and so '
               'on).')


def _v2(r, doc_id):
    return {'id': doc_id,
            'status': 'CURRENT',
            'min_version': str(microversion.MIN_VERSION),
            'max_version': str(microversion.MAX_VERSION),
            'links': [{'href': r.url('v2'), 'rel': 'self'}]}


def root_versions(r):
    """GET / : the versions this API serves.

    Cyborg's document (name, description, versions, default_version) plus
    ``service_version``, the release of this server: clients read only
    the keys they know (keystoneauth's discovery reads ``versions``).
    """
    version = _v2(r, 'v2')
    return {'name': 'OpenStack Cyborg API',
            'description': DESCRIPTION,
            'versions': [version],
            'default_version': version,
            'service_version': cyborg_version.version_string()}


def v2_version(r):
    """GET /v2 : the v2 API and its microversion range."""
    return _v2(r, 'v2.0')


def openapi_document(r):
    """GET /v2/openapi.json : the OpenAPI 3 description of this API."""
    from cyborg.api import openapi
    return openapi.document()

