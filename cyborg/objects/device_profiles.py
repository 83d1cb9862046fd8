"""Device profiles: named lists of groups an ARQ request is made from.

Readers take ``visible_to``: the project whose view to read (public
profiles, its own, those shared with it), or None for every profile (an
admin's view).  ``visible_to(context)`` says which a request gets.
"""

import dataclasses
import datetime
import json

from oslo_utils import uuidutils

from cyborg.common import exception
from cyborg.common import states
from cyborg.db.api import device_profiles as profile_db
from cyborg.objects import base
from cyborg.objects import inventory


# A group key naming a resource class, whose value is how many units of
# it the group asks for: one ARQ each.
RESOURCES_PREFIX = 'resources:'
# The group key naming the FPGA function its accelerators must run.
FUNCTION_ID = 'accel:function_id'


def resource_amounts(group):
    """{resource class: units} a profile group asks for (its
    ``resources:<class>`` keys)."""
    return {key[len(RESOURCES_PREFIX):]: int(amount)
            for key, amount in group.items()
            if key.startswith(RESOURCES_PREFIX)}


# The most accelerators (ARQs) one profile may ask for, in all its
# groups: what one group may ask for (its schema allows 3 digits), so a
# profile of many groups cannot make tens of thousands of ARQs at once.
MAX_ARQS = 999


def group_size(group):
    """How many accelerators (ARQs) a profile group asks for."""
    return sum(resource_amounts(group).values())


def check(values, path=''):
    """Refuse (400) what the schema cannot say of a profile's ``values``
    (its create body): a group asking for no accelerator, projects listed
    for a profile that is not private.  ``path`` prefixes the JSON paths
    in the message (the API's body holds the profile at ``0/``)."""
    if uuidutils.is_uuid_like(values['name']):
        # Shown and deleted by name or uuid, it would be taken for a uuid.
        raise exception.Invalid(
            reason=f"{path}name: {values['name']!r} looks like a uuid; a "
                   f"profile is found by name or by uuid, so its name may "
                   f"not be one")
    visibility = values.get('visibility') or states.PUBLIC
    if visibility not in states.PROFILE_VISIBILITIES:
        raise exception.Invalid(reason='%svisibility: %r is not one of %s'
                                % (path, visibility,
                                   ', '.join(states.PROFILE_VISIBILITIES)))
    for index, group in enumerate(values['groups']):
        function_id = group.get(FUNCTION_ID)
        problem = (None if function_id is None
                   else inventory.function_trait_problem(function_id))
        if problem is not None:
            raise exception.Invalid(
                reason=f'{path}groups/{index}/{FUNCTION_ID}: {problem}')
        if not group_size(group):
            # No ARQ would come of it, and Placement refuses a request
            # group with no resources.
            raise exception.Invalid(
                reason=f'{path}groups/{index}: requests no accelerator: a '
                       f'group needs a {RESOURCES_PREFIX}<resource class> '
                       f'key')
    total = sum(group_size(group) for group in values['groups'])
    if total > MAX_ARQS:
        raise exception.Invalid(
            reason=f'{path}groups: ask for {total} accelerators in all; a '
                   f'profile asks for at most {MAX_ARQS}')
    if values.get('projects') and visibility != states.PRIVATE:
        raise exception.Invalid(
            reason=f'{path}projects: only a private profile lists '
                   f'projects (a public one is seen by every project)')
    return visibility


def visible_to(context):
    """The project whose profiles ``context`` sees, or None for all.

    Only an admin sees every profile.  A service does not: Nova asks with
    the user's token (and its own service token) on the user's behalf, so
    the user's project decides what it may use.  A caller with no project
    sees the public profiles only.
    """
    if context.is_admin:
        return None
    return context.project_id or ''


@dataclasses.dataclass
class DeviceProfile:
    id: int
    uuid: str
    name: str
    description: str
    profile_json: str
    created_at: datetime.datetime
    updated_at: datetime.datetime
    # The project that created it; 'public' or 'private'; the projects a
    # private profile is shared with (microversion 2.5).
    project_id: str = None
    visibility: str = states.PUBLIC
    projects: list = dataclasses.field(default_factory=list)

    @property
    def groups(self):
        """The groups: a list of {str: str} dicts."""
        return json.loads(self.profile_json or '[]')

    @classmethod
    def _with_projects(cls, context, rows):
        profiles = base.many(cls, rows)
        private = [p.id for p in profiles
                   if p.visibility != states.PUBLIC]
        shares = profile_db.shared_with(context, private) if private else {}
        for profile in profiles:
            profile.projects = shares.get(profile.id, [])
        return profiles

    @classmethod
    def get_by_uuid(cls, context, uuid, visible_to=None):
        row = profile_db.get(context, uuid=uuid, visible_to=visible_to)
        return cls._with_projects(context, [row])[0] if row else None

    @classmethod
    def get_by_name(cls, context, name, visible_to=None):
        row = profile_db.get(context, name=name, visible_to=visible_to)
        return cls._with_projects(context, [row])[0] if row else None

    @classmethod
    def list(cls, context, names=None, visible_to=None, limit=None,
             marker=None):
        """The profiles ``visible_to`` sees (with one of ``names``): at
        most ``limit`` after the one whose uuid is ``marker``; None when
        that names none it sees."""
        rows = profile_db.get_all(context, names, visible_to, limit, marker)
        return None if rows is None else cls._with_projects(context, rows)
