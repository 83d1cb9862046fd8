from cyborg.api import microversion
from cyborg.api import views


def show(r, device):
    body = {'uuid': device.uuid,
            'type': device.type,
            'vendor': device.vendor,
            'model': device.model,
            'std_board_info': device.std_board_info,
            'vendor_board_info': device.vendor_board_info,
            'hostname': device.hostname,
            'created_at': views.timestamp(device.created_at),
            'updated_at': views.timestamp(device.updated_at),
            'links': views.links(r, 'devices', device.uuid)}
    if r.version.matches(microversion.DEVICE_STATUS):
        body['status'] = device.status
    return views.add_health(r, body, device)
