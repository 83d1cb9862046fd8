"""Devices: list, show; POST /v2/devices/{uuid}/enable and /disable."""

from cyborg.api import views
from cyborg.api.controllers import base
from cyborg.api.schemas import devices as schema
from cyborg.api.views import devices as view
from cyborg.objects.devices import Device

RULE = 'cyborg:device:%s'
_FILTERS = ('type', 'vendor', 'hostname')


def list_devices(r):
    r.authorize(RULE % 'get_all')
    if r.version.matches(views.HEALTH_VERSION):
        query = r.query(schema.LIST_QUERY_2_4)
        names = _FILTERS + ('health',)
    else:
        query = r.query(schema.LIST_QUERY)
        names = _FILTERS
    filters = {k: query[k] for k in names if k in query}
    devices = Device.list(r.context, filters)
    return base.json_response(
        200, {'devices': [view.show(r, d) for d in devices]})


def show_device(r, uuid):
    r.authorize(RULE % 'get_one')
    return base.json_response(200, view.show(r, _find(r, uuid)))


def disable_device(r, uuid):
    """Take the device out of service: Placement reserves all of it."""
    return _set_status(r, uuid, 'disable', 'maintaining')


def enable_device(r, uuid):
    return _set_status(r, uuid, 'enable', 'enabled')


def _set_status(r, uuid, action, status):
    r.authorize(RULE % action)
    _find(r, uuid)
    r.conductor.device_set_status(r.context, device_uuid=uuid, status=status)
    return base.json_response(200, view.show(r, _find(r, uuid)))


def _find(r, uuid):
    return base.require(Device.get(r.context, uuid), 'Device', uuid)
