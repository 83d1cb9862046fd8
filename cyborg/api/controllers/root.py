"""The root controller (pecan's entry point) and the version documents."""

import pecan
from webob import exc as webob_exc

from cyborg import version as cyborg_version
from cyborg.api import microversion
from cyborg.api.controllers import base

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
    return base.json_response(200, {'name': 'OpenStack Cyborg API',
                                    'description': DESCRIPTION,
                                    'versions': [version],
                                    'default_version': version,
                                    'service_version':
                                        cyborg_version.version_string()})


def v2_version(r):
    """GET /v2 : the v2 API and its microversion range."""
    return base.json_response(200, _v2(r, 'v2.0'))


def openapi_document(r):
    """GET /v2/openapi.json : the OpenAPI 3 description of this API."""
    from cyborg.api import openapi
    return base.json_response(200, openapi.document())


class RootController:
    """Routes every request through the table in ``cyborg.api.routes``."""

    @pecan.expose()
    def _route(self, args, request):
        from cyborg.api import routes
        handler, path_vars, allowed = routes.match(request.method,
                                                   request.path_info)
        if handler is None:
            if allowed:
                raise webob_exc.HTTPMethodNotAllowed(
                    headers=[('Allow', ', '.join(sorted(allowed)))])
            raise webob_exc.HTTPNotFound()
        request.cyborg_route = (handler, path_vars)
        return self.dispatch, []

    @pecan.expose(content_type='application/json')
    def dispatch(self, *_args, **_params):
        handler, path_vars = pecan.request.cyborg_route
        return handler(base.ApiRequest(pecan.request), **path_vars)
