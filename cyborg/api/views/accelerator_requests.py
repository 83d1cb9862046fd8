from cyborg.api import microversion
from cyborg.api import views


def show(r, arq):
    body = {'uuid': arq.uuid,
            'state': arq.state,
            'device_profile_name': arq.device_profile_name,
            'device_profile_group_id': arq.device_profile_group_id,
            'hostname': arq.hostname,
            'device_rp_uuid': arq.device_rp_uuid,
            'instance_uuid': arq.instance_uuid,
            'project_id': arq.project_id,
            'attach_handle_type': arq.attach_handle_type or '',
            'attach_handle_uuid': arq.attach_handle_uuid,
            'attach_handle_info': arq.attach_handle_info or {},
            'created_at': views.timestamp(arq.created_at),
            'updated_at': views.timestamp(arq.updated_at),
            'links': views.links(r, 'accelerator_requests', arq.uuid)}
    if r.version.matches(microversion.HEALTH):
        body['device_health'] = arq.device_health
        body['device_health_reason'] = arq.device_health_reason
    if r.version.matches(microversion.STANDALONE):
        body['consumer_id'] = arq.consumer_id
        body['consumer_type'] = arq.consumer_type
    return body
