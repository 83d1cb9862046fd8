"""Deployables: GET /v2/deployables[/{uuid}], PATCH .../{uuid}/program."""

from cyborg.api.controllers import base
from cyborg.api.schemas import deployables as schema
from cyborg.api.views import deployables as view
from cyborg.common import exception
from cyborg.objects.deployables import Deployable

RULE = 'cyborg:deployable:%s'


def list_deployables(r):
    r.authorize(RULE % 'get_all')
    query = r.query(schema.LIST_QUERY)
    max_limit = r.conf.api.max_limit
    limit = min(int(query.get('limit', max_limit)), max_limit)
    deployables = Deployable.list(r.context, name=query.get('name'),
                                  limit=limit, marker=query.get('marker'),
                                  sort_key=query.get('sort_key', 'id'),
                                  sort_dir=query.get('sort_dir', 'asc'))
    if deployables is None:
        raise exception.ResourceNotFound(resource='Marker deployable',
                                         id=query['marker'])
    return base.json_response(
        200, {'deployables': [view.show(r, d) for d in deployables]})


def show_deployable(r, uuid):
    r.authorize(RULE % 'get_one')
    return base.json_response(200, view.show(r, _find(r, uuid)))


def program_deployable(r, uuid):
    """Program an FPGA deployable with the Glance image named."""
    r.authorize(RULE % 'program')
    patch = r.json_body(schema.PROGRAM)
    _find(r, uuid)
    image_uuid = patch[0]['value'][0]['image_uuid']
    r.conductor.deployable_program(r.context, deployable_uuid=uuid,
                                   image_uuid=image_uuid)
    return base.json_response(200, view.show(r, _find(r, uuid)))


def _find(r, uuid):
    return base.require(Deployable.get(r.context, uuid), 'Deployable', uuid)
