"""Device profiles: GET/POST/DELETE /v2/device_profiles[/{name_or_uuid}].

Visibility (microversion 2.5): a profile is public (every project sees and
uses it, as in Cyborg) or private (its creator's project and the projects
it is shared with).  Every read here is of the profiles the caller's
project may see (``device_profiles.visible_to``): another project's
private profile is "not found", exactly like one that does not exist.
Admins see every profile.
"""

import datetime
import json

from oslo_utils import uuidutils

from cyborg.api import microversion
from cyborg.api.controllers import base
from cyborg.api.schemas import device_profiles as schema
from cyborg.api.views import device_profiles as view
from cyborg.common import exception
from cyborg.common import states
from cyborg.objects import device_profiles as profile_objects
from cyborg.objects.device_profiles import DeviceProfile


def list_device_profiles(r):
    names = None
    if 'name' in r.query:
        names = base.split_csv(r.query['name'])
    visible_to = profile_objects.visible_to(r.context)
    profiles = base.read_page(
        r, 'device profile', lambda limit, marker: DeviceProfile.list(
            r.context, names, visible_to, limit, marker))
    return base.paged(r, 'device_profiles', 'device_profiles', profiles,
                      view.show)


def show_device_profile(r, name_or_uuid):
    if not uuidutils.is_uuid_like(name_or_uuid) and not r.version.matches(
            microversion.PROFILE_BY_NAME):
        raise exception.NotAcceptable(
            reason='showing a device profile by name needs microversion '
                   '2.2 or later')
    profile = _find(r, name_or_uuid)
    return {'device_profile': view.show(r, profile)}


def create_device_profile(r):
    values = r.body[0]
    values = dict(values, groups=[_amounts_as_text(group)
                                  for group in values['groups']])
    if len(json.dumps(values['groups']).encode()) > schema.MAX_GROUPS_BYTES:
        raise exception.Invalid(reason='0/groups: longer than %d bytes as '
                                       'JSON' % schema.MAX_GROUPS_BYTES)
    profile_objects.check(values, path='0/')
    values = dict(values, project_id=r.context.project_id)
    if values.get('uuid'):
        # Stored as every uuid is, so that any spelling of it finds it.
        values['uuid'] = base.canonical_uuid(values['uuid'])
    created = r.conductor.device_profile_create(r.context, values=values)
    # The conductor returns the profile it wrote: rendered, not read
    # again (a delete in between would leave nothing to read).
    return view.show(r, _from_created(created))


def _amounts_as_text(group):
    """``group`` with its ``resources:`` amounts as strings: the schema
    also takes an integer (as Cyborg did), but a profile stores and shows
    the string, so that answers, quotas and allocation see one form."""
    return {key: str(int(value))
            if key.startswith(profile_objects.RESOURCES_PREFIX) else value
            for key, value in group.items()}


def delete_device_profile(r, name_or_uuid):
    """DELETE /device_profiles/{name_or_uuid}: one profile, or several
    separated by commas (``/device_profiles/n1,n2``), all of them or
    none, as with ``?value=``: Cyborg splits the value on commas
    wherever it comes from.  Names work here at every microversion (as
    in Cyborg; the clients rely on it)."""
    _delete(r, name_or_uuid, 'the path')


def delete_device_profiles(r):
    """DELETE /device_profiles?value=n1,n2: all of them or none."""
    _delete(r, r.query['value'], 'value')


def _delete(r, value, where):
    """Delete the profiles ``value`` names (names or uuids separated by
    commas): all of them, or none when one is not found."""
    wanted = base.split_csv(value)
    if not wanted:
        raise exception.Invalid(reason='%s: no device profile named'
                                       % where)
    # An item is a name or a uuid, in any spelling (base.canonical_uuid).
    uuids = sorted({_find(r, base.canonical_uuid(item)).uuid
                    for item in wanted})
    r.conductor.device_profile_delete(r.context, uuids=uuids)


def _from_created(created):
    """The profile the conductor's create returned (timestamps as ISO
    text once over RPC)."""
    times = {name: created.get(name) for name in ('created_at',
                                                  'updated_at')}
    for name, value in times.items():
        if isinstance(value, str):
            times[name] = datetime.datetime.fromisoformat(value)
    return DeviceProfile(
        id=None, uuid=created['uuid'], name=created['name'],
        description=created.get('description'),
        profile_json=json.dumps(created['groups']),
        project_id=created.get('project_id'),
        visibility=created.get('visibility') or states.PUBLIC,
        projects=list(created.get('projects') or ()), **times)


def _find(r, name_or_uuid):
    viewer = profile_objects.visible_to(r.context)
    if uuidutils.is_uuid_like(name_or_uuid):
        profile = DeviceProfile.get_by_uuid(r.context, name_or_uuid, viewer)
    else:
        profile = DeviceProfile.get_by_name(r.context, name_or_uuid, viewer)
    if profile is None:
        raise exception.DeviceProfileNotFound(name=name_or_uuid)
    return profile
