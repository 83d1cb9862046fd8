"""Attribute writes (conductor side of POST/DELETE /attributes)."""

from oslo_db import exception as db_exc
from oslo_utils import uuidutils

from cyborg.common import exception
from cyborg.conductor import awaited
from cyborg.db.api import attributes as attribute_db
from cyborg.db.api import deployables as deployable_db


def create(conf, context, deployable_uuid, key, value):
    """Add ``key`` = ``value`` to a deployable; 409 if it has that key."""
    try:
        return awaited.write(context, _create_in, context,
                             deployable_uuid, key, value)
    except db_exc.DBDuplicateEntry:
        raise exception.Conflict(
            reason='deployable %s already has attribute %s' % (
                deployable_uuid, key))
    except db_exc.DBReferenceError:
        raise exception.ResourceNotFound(resource='Deployable',
                                         id=deployable_uuid)


def _create_in(context, deployable_uuid, key, value):
    deployable = deployable_db.get(context, uuid=deployable_uuid)
    if deployable is None:
        raise exception.ResourceNotFound(resource='Deployable',
                                         id=deployable_uuid)
    row = attribute_db.insert(
        context, {'uuid': uuidutils.generate_uuid(),
                  'deployable_id': deployable.id, 'key': key,
                  'value': value})
    return _as_dict(row)


def delete(conf, context, attribute_uuid):
    awaited.write(context, _delete_in, context, attribute_uuid)


def _delete_in(context, attribute_uuid):
    if not attribute_db.delete(context, attribute_uuid):
        raise exception.ResourceNotFound(resource='Attribute',
                                         id=attribute_uuid)


def _as_dict(row):
    return {'uuid': row.uuid, 'deployable_id': row.deployable_id,
            'key': row.key, 'value': row.value,
            'created_at': row.created_at, 'updated_at': row.updated_at}
