"""Enabling and disabling a device (``POST /devices/{uuid}/enable|disable``).

The device's status is conductor state (never reported by the agent).
While a device is ``maintaining`` every provider of ITS deployables (found
through the device's own id, which OpenStack Cyborg got wrong) has
``reserved = total``, so nothing new is scheduled on it; ``enabled`` puts
``reserved`` back to 0.  Allocations already held are left alone.
"""

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.conductor import placement_sync
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)


def set_status(conf, context, device_uuid, status):
    """Set the device's status and its providers' reserved; returns the
    device's columns as a dict.  The database change stands even if
    Placement cannot be reached: the host is left unsynced and the next
    report or the reconcile applies it."""
    if status not in models.DEVICE_STATUSES:
        raise exception.Invalid(
            reason=f'device status must be one of '
                   f'{", ".join(models.DEVICE_STATUSES)}, not {status!r}')
    with db_api.writer.using(context):
        device = db_api.device_set_status(context, device_uuid, status)
        if device is None:
            raise exception.ResourceNotFound(resource='Device',
                                             id=device_uuid)
        host = db_api.inventory_host_get(context, device['hostname'])
        db_api.inventory_host_update(context, device['hostname'],
                                     placement_synced=False)
    providers = {row['rp_uuid'] or inventory.provider_uuid(row['name'])
                 for row in db_api.inventory_host_providers(
                     context, device['hostname'])
                 if row['device_uuid'] == device_uuid}
    plan = _Touched(providers)
    digest = host['report_digest'] if host else None
    was_synced = bool(host and host['placement_synced'])
    placement_sync.sync_after_report(conf, context, device['hostname'],
                                     plan, digest, trust_memory=was_synced)
    return device


class _Touched:
    """The part of a plan a sync needs: which providers to rewrite."""

    def __init__(self, providers):
        self.touched_providers = providers
        self.removed_providers = ()
