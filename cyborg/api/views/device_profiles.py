from cyborg.api import microversion
from cyborg.api import views
from cyborg.objects import device_profiles as profile_objects


def show(r, profile):
    body = {'uuid': profile.uuid,
            'name': profile.name,
            'description': profile.description,
            'groups': profile.groups,
            'created_at': views.timestamp(profile.created_at),
            'updated_at': views.timestamp(profile.updated_at),
            'links': views.links(r, 'device_profiles', profile.uuid)}
    if r.version.matches(microversion.PROFILE_VISIBILITY):
        body['project_id'] = profile.project_id
        body['visibility'] = profile.visibility
        body['projects'] = _projects_shown(r, profile)
    return body


def _projects_shown(r, profile):
    """The projects a private profile is shared with, as the caller may
    see them: all of them for an admin or the owner's project; else only
    the caller's own (a project it is shared with does not learn which
    others are, as with Glance's image members)."""
    viewer = profile_objects.visible_to(r.context)
    if viewer is None or viewer == profile.project_id:
        return list(profile.projects)
    return [project for project in profile.projects if project == viewer]
