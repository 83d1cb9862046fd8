"""Devices: list, show; POST /v2/devices/{uuid}/enable and /disable."""

from cyborg.api.controllers import base
from cyborg.api.views import devices as view
from cyborg.common import states
from cyborg.objects.devices import Device

# The query parameters that filter (?health= exists from 2.4).
_FILTERS = ('type', 'vendor', 'hostname', 'health')


def list_devices(r):
    filters = {k: r.query[k] for k in _FILTERS if k in r.query}
    devices = base.read_page(r, 'device', lambda limit, marker: Device.list(
        r.context, filters, limit, marker))
    return base.paged(r, 'devices', 'devices', devices, view.show)


def show_device(r, uuid):
    return view.show(r, _find(r, uuid))


def disable_device(r, uuid):
    """Take the device out of service: Placement reserves all of it."""
    return _set_status(r, uuid, states.MAINTAINING)


def enable_device(r, uuid):
    """Put the device back in service.

    An admin enabling a device vouches for it: if it, or a deployable of
    it, is unhealthy it is re-probed at once instead of at the end of its
    hold-down, and re-admitted if the probe reads it well."""
    return _set_status(r, uuid, states.ENABLED)


def _set_status(r, uuid, status):
    _find(r, uuid)
    r.conductor.device_set_status(r.context, device_uuid=uuid, status=status,
                                  wait=r.conf.api.conductor_timeout)
    return view.show(r, _find(r, uuid))


def _find(r, uuid):
    return base.require(Device.get(r.context, uuid), 'Device', uuid)
