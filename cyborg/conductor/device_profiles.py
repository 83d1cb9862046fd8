"""Device profile writes (conductor side of POST/DELETE /device_profiles).

Both are one transaction: a request answered with an error writes nothing.
"""

import json

from oslo_db import exception as db_exc
from oslo_utils import uuidutils

from cyborg.common import exception
from cyborg.conductor import awaited
from cyborg.db.api import device_profiles as profile_db
from cyborg.objects import device_profiles as profile_objects


def create(context, values):
    """Create a profile from API-validated ``values`` (name, groups,
    optional uuid and description; from RPC 1.2 optional ``project_id``
    (the owner), ``visibility`` and ``projects``); returns it as a dict.

    A duplicate name or uuid is a 409, decided by the unique keys so that
    two concurrent creates cannot both succeed.
    """
    visibility = profile_objects.check(values)
    projects = sorted(set(values.get('projects') or ()))
    row_values = {'uuid': values.get('uuid') or uuidutils.generate_uuid(),
                  'name': values['name'],
                  'description': values.get('description'),
                  'profile_json': json.dumps(values['groups']),
                  'project_id': values.get('project_id'),
                  'visibility': visibility}
    try:
        return awaited.write(context, _create_in, context, row_values,
                             projects)
    except db_exc.DBDuplicateEntry as e:
        if 'name' in (e.columns or []):
            raise exception.DuplicateName(resource='Device profile',
                                          name=row_values['name'])
        raise exception.DuplicateUUID(resource='Device profile',
                                      uuid=row_values['uuid'])


def _create_in(context, row_values, projects):
    row = profile_db.insert(context, row_values, projects)
    return dict(_as_dict(row), projects=projects)


def delete(context, uuids):
    """Delete all the profiles ``uuids`` or none: 409 if ARQs use any, 404
    if any is gone."""
    uuids = sorted(set(uuids))
    try:
        awaited.write(context, _delete_in, context, uuids)
    except db_exc.DBReferenceError:
        # An ARQ was made from one of them since the check above.
        raise _in_use(uuids)


def _delete_in(context, uuids):
    used = profile_db.in_use(context, uuids)
    if used:
        raise _in_use(used)
    deleted = profile_db.delete_many(context, uuids)
    if deleted != len(uuids):
        # Rolls back the ones that were there.
        raise exception.ResourceNotFound(resource='Device profile',
                                         id=', '.join(uuids))


def _in_use(uuids):
    return exception.InUse(resource='Device profile', id=', '.join(
        sorted(uuids)), reason='accelerator requests use it')


def _as_dict(row):
    return {'uuid': row.uuid, 'name': row.name,
            'description': row.description,
            'groups': json.loads(row.profile_json),
            'project_id': row.project_id, 'visibility': row.visibility,
            'created_at': row.created_at, 'updated_at': row.updated_at}
