from cyborg.api import views


def show(r, attribute):
    return {'uuid': attribute.uuid,
            'deployable_id': attribute.deployable_id,
            'key': attribute.key,
            'value': attribute.value,
            'created_at': views.timestamp(attribute.created_at),
            'updated_at': views.timestamp(attribute.updated_at),
            'links': views.links(r, 'attributes', attribute.uuid)}
