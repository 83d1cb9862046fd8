from cyborg.api import microversion
from cyborg.api import views


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
        body['projects'] = list(profile.projects)
    return body
