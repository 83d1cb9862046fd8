from cyborg.api import views


def show(r, profile):
    return {'uuid': profile.uuid,
            'name': profile.name,
            'description': profile.description,
            'groups': profile.groups,
            'created_at': views.timestamp(profile.created_at),
            'updated_at': views.timestamp(profile.updated_at),
            'links': views.links(r, 'device_profiles', profile.uuid)}
