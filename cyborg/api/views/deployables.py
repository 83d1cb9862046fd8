import json

from cyborg.api import microversion
from cyborg.api import views


def show(r, deployable):
    attributes = [{key: value} for key, value in deployable.attributes]
    body = {'uuid': deployable.uuid,
            'parent_id': deployable.parent_id,
            'root_id': deployable.root_id,
            'name': deployable.name,
            'num_accelerators': deployable.num_accelerators,
            'device_id': deployable.device_id,
            'attributes_list': json.dumps(attributes),
            'rp_uuid': deployable.rp_uuid,
            'driver_name': deployable.driver_name,
            'bitstream_id': deployable.bitstream_id,
            'created_at': views.timestamp(deployable.created_at),
            'updated_at': views.timestamp(deployable.updated_at),
            'links': views.links(r, 'deployables', deployable.uuid)}
    views.add_health(r, body, deployable)
    if r.version.matches(microversion.PROGRAMMING):
        body['programming_until'] = views.timestamp(
            deployable.programming_until)
    return body
