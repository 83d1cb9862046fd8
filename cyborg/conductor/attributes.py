"""Attribute writes (conductor side of POST/DELETE /attributes).

A deployable's attributes make its provider in Placement (its resource
class, ``rc``, and traits, ``trait*``): each write marks the host no
longer synced in its transaction and then syncs the provider, as a
device's status change does; a sync that fails is the next report's or
the reconcile's to finish.
"""

from oslo_db import exception as db_exc
from oslo_utils import uuidutils

from cyborg.common import exception
from cyborg.conductor import awaited
from cyborg.conductor import placement_sync
from cyborg.db.api import attributes as attribute_db
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory


def create(conf, context, deployable_uuid, key, value):
    """Add ``key`` = ``value`` to a deployable; 409 if it has that key."""
    try:
        attribute, target = awaited.write(context, _create_in, context,
                                          deployable_uuid, key, value)
    except db_exc.DBDuplicateEntry:
        raise exception.Conflict(
            reason='deployable %s already has attribute %s' % (
                deployable_uuid, key))
    except db_exc.DBReferenceError:
        raise exception.ResourceNotFound(resource='Deployable',
                                         id=deployable_uuid)
    _sync(conf, context, target)
    return attribute


def _create_in(context, deployable_uuid, key, value):
    target = deployable_db.program_target(context, deployable_uuid)
    if target is None:
        raise exception.ResourceNotFound(resource='Deployable',
                                         id=deployable_uuid)
    _unsynced(context, target)
    row = attribute_db.insert(
        context, {'uuid': uuidutils.generate_uuid(),
                  'deployable_id': target.deployable_id, 'key': key,
                  'value': value})
    return _as_dict(row), target


def delete(conf, context, attribute_uuid):
    target = awaited.write(context, _delete_in, context, attribute_uuid)
    _sync(conf, context, target)


def _delete_in(context, attribute_uuid):
    attribute = attribute_db.get(context, attribute_uuid)
    if attribute is None:
        raise exception.ResourceNotFound(resource='Attribute',
                                         id=attribute_uuid)
    target = deployable_db.program_target_by_id(context,
                                                attribute.deployable_id)
    _unsynced(context, target)
    if not attribute_db.delete(context, attribute_uuid):
        raise exception.ResourceNotFound(resource='Attribute',
                                         id=attribute_uuid)
    return target


def _unsynced(context, target):
    """The host of the deployable ``target`` (``program_target``) no
    longer taken as synced.  Its row is written (locked) before the
    attribute's: reports and health writes lock it before the host's
    other rows, and an attribute's insert share-locks its deployable
    (MariaDB's foreign key check), which a health write holding the
    host's row then waited for while we waited for the host's row."""
    if target is not None:
        host_db.update(context, target.hostname, placement_synced=False)


def _sync(conf, context, target):
    if target is not None:
        placement_sync.sync_providers(
            conf, context, target.hostname,
            {target.rp_uuid or inventory.provider_uuid(target.name)})


def _as_dict(row):
    return {'uuid': row.uuid, 'deployable_id': row.deployable_id,
            'key': row.key, 'value': row.value,
            'created_at': row.created_at, 'updated_at': row.updated_at}
