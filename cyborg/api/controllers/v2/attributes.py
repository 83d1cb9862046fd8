"""Attributes: GET/POST /v2/attributes, GET/DELETE /v2/attributes/{uuid}.

A deployable is named by its integer id (what Cyborg shows) or its uuid.
"""

from cyborg.api.controllers import base
from cyborg.api.schemas import attributes as schema
from cyborg.api.views import attributes as view
from cyborg.common import exception
from cyborg.objects.attributes import Attribute
from cyborg.objects.deployables import Deployable

RULE = 'cyborg:attribute:%s'
MAX_ID = 2 ** 31 - 1


def list_attributes(r):
    r.authorize(RULE % 'get_all')
    query = r.query(schema.LIST_QUERY)
    deployable_id = None
    if 'deployable_id' in query:
        deployable = _deployable(r, query['deployable_id'], missing_ok=True)
        if deployable is None:
            return base.json_response(200, {'attributes': []})
        deployable_id = deployable.id
    attributes = Attribute.list(r.context, deployable_id, query.get('key'))
    return base.json_response(
        200, {'attributes': [view.show(r, a) for a in attributes]})


def show_attribute(r, uuid):
    r.authorize(RULE % 'get_one')
    return base.json_response(200, view.show(r, _find(r, uuid)))


def create_attribute(r):
    r.authorize(RULE % 'create')
    values = r.json_body(schema.CREATE)
    deployable = _deployable(r, values['deployable_id'])
    created = r.conductor.attribute_create(
        r.context, deployable_uuid=deployable.uuid, key=values['key'],
        value=values['value'])
    return base.json_response(201, view.show(r, _find(r, created['uuid'])))


def delete_attribute(r, uuid):
    r.authorize(RULE % 'delete')
    _find(r, uuid)
    r.conductor.attribute_delete(r.context, attribute_uuid=uuid)
    return base.empty_response(204)


def _find(r, uuid):
    return base.require(Attribute.get(r.context, uuid), 'Attribute', uuid)


def _deployable(r, ref, missing_ok=False):
    if isinstance(ref, int) or str(ref).isdigit():
        # Ids are 32-bit: a larger one names nothing (and must not reach
        # PostgreSQL, which rejects it).
        deployable = None
        if int(ref) <= MAX_ID:
            deployable = Deployable.get_by_id(r.context, int(ref))
    else:
        deployable = Deployable.get(r.context, ref)
    if deployable is None and not missing_ok:
        raise exception.ResourceNotFound(resource='Deployable', id=ref)
    return deployable
