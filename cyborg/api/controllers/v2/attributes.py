"""Attributes: GET/POST /v2/attributes, GET/DELETE /v2/attributes/{uuid}.

A deployable is named by its integer id (what Cyborg shows) or its uuid.
"""

import re

from cyborg.api.controllers import base
from cyborg.api.schemas import attributes as schema
from cyborg.api.views import attributes as view
from cyborg.common import exception
from cyborg.objects.attributes import Attribute
from cyborg.objects.deployables import Deployable
from cyborg.objects import inventory
MAX_ID = 2 ** 31 - 1
# An integer id as a query string may spell it (ASCII digits; more than
# ten cannot be a 32-bit id, nor be given to int() unbounded).
_ID = re.compile(r'[0-9]{1,10}')


def list_attributes(r):
    query = r.query
    deployable_id = None
    if 'deployable_id' in query:
        deployable = _deployable(r, query['deployable_id'], missing_ok=True)
        if deployable is None:
            return {'attributes': []}
        deployable_id = deployable.id
    attributes = base.read_page(
        r, 'attribute', lambda limit, marker: Attribute.list(
            r.context, deployable_id, query.get('key'), limit, marker))
    return base.paged(r, 'attributes', 'attributes', attributes, view.show)


def show_attribute(r, uuid):
    return view.show(r, _find(r, uuid))


def create_attribute(r):
    """POST {deployable_id, key, value}, bare or wrapped in "attribute"
    (what openstacksdk sends)."""
    values = r.body.get(schema.WRAPPER, r.body)
    problem = inventory.attribute_problem(values['key'], values['value'])
    if problem:
        raise exception.Invalid(reason=problem)
    deployable = _deployable(r, values['deployable_id'])
    created = r.conductor.attribute_create(
        r.context, deployable_uuid=deployable.uuid, key=values['key'],
        value=values['value'])
    return view.show(r, _find(r, created['uuid']))


def delete_attribute(r, uuid):
    _find(r, uuid)
    r.conductor.attribute_delete(r.context, attribute_uuid=uuid)


def _find(r, uuid):
    return base.require(Attribute.get(r.context, uuid), 'Attribute', uuid)


def _deployable(r, ref, missing_ok=False):
    """The deployable named by integer id or uuid ``ref``, or (with
    ``missing_ok``) None when it names none."""
    # A body's integer may come as 2406.0 (an integer to JSON Schema, a
    # float to Python): an id too, never compared with the uuid column
    # (PostgreSQL refuses varchar = numeric; MariaDB would cast every
    # uuid to a number).
    if isinstance(ref, (int, float)) or _ID.fullmatch(str(ref)):
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
