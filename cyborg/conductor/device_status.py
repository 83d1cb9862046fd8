"""Enabling and disabling a device (``POST /devices/{uuid}/enable|disable``).

The device's status is conductor state (never reported by the agent).
While a device is ``maintaining`` every provider of ITS deployables (found
through the device's own id, which OpenStack Cyborg got wrong) has
``reserved = total``, so nothing new is scheduled on it; ``enabled`` puts
``reserved`` back to 0 unless the device's health keeps it out.
Allocations already held are left alone.

With ``[conductor]new_device_status = maintaining`` (new devices wait for
an admin), enabling a device that was ``maintaining`` first asks its agent
to run the driver's preparation step (``AgentAPI.prepare_device``; a no-op for
drivers without one).  Only when that succeeds is the device enabled: an
agent that fails is a 409, one that does not answer in time a 503, and the
status stays ``maintaining`` either way.  Devices a report discovers start
in ``[conductor]new_device_status`` (``inventory_plan``).

Enabling is also how an admin vouches for a device that failed (it was
repaired, reseated or replaced): whatever its status was, an unhealthy
device, or deployable of it, is re-probed at once instead of at the end
of its hold-down (``health.vouch``); the probe's verdict decides.
"""

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_log import log as logging

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import exception
from cyborg.common import notify
from cyborg.common import rpc
from cyborg.common import states
from cyborg.conductor import health
from cyborg.conductor import placement_sync
from cyborg.db import api as db_api
from cyborg.db.api import devices as device_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

# Longest the agent has to prepare a device, in seconds.
PREPARE_TIMEOUT = 30

def set_status(conf, context, device_uuid, status, wait=None):
    """Set the device's status and its providers' reserved; returns the
    device's columns as a dict.  The database change stands even if
    Placement cannot be reached: the host is left unsynced and the next
    report or the reconcile applies it.  ``wait``: the seconds the caller
    waits for our answer (see ``prepare_timeout``)."""
    if status not in states.DEVICE_STATUSES:
        raise exception.Invalid(
            reason=f'device status must be one of '
                   f'{", ".join(states.DEVICE_STATUSES)}, not {status!r}')
    target = device_db.lifecycle_target(context, device_uuid)
    if target is None:
        raise exception.ResourceNotFound(resource='Device', id=device_uuid)
    if (target['status'] == states.MAINTAINING and
            status == states.ENABLED and
            conf.conductor.new_device_status == states.MAINTAINING):
        # Devices wait for an admin to be prepared only in this lifecycle;
        # otherwise enable/disable is plain maintenance and must work
        # while the host's agent is down.
        _prepare(conf, context, target, wait)
    device, host, serial = db_api.write_retrying(
        context, _set_in, context, target['hostname'], device_uuid, status)
    if target['status'] != status:
        _notify(conf, context, target, status)
    _sync(conf, context, device, device_uuid, host, serial)
    if status == states.ENABLED:
        _vouch(conf, context, target['hostname'], device_uuid)
    return device


def _vouch(conf, context, hostname, device_uuid):
    """Re-probe the device now if it is unhealthy.  The status change
    stands if this fails: the device then waits out its hold-down, and
    enabling it again retries."""
    try:
        health.vouch(conf, context, hostname, device_uuid)
    except Exception:
        LOG.exception('Could not start the re-probe of device %s on %s; '
                      'it is re-probed after its hold-down.', device_uuid,
                      hostname)


def _set_in(context, hostname, device_uuid, status):
    # The host's row first, as reports and health writes lock it before
    # the host's device rows: locked after the device's, a health write
    # holding it and writing this device deadlocked with us.  Locked:
    # whether it was synced and the serial after our bump are read with
    # no change of another writer between them.
    host = host_db.lock(context, hostname)
    device = device_db.set_status(context, device_uuid, status)
    if device is None:
        raise exception.ResourceNotFound(resource='Device', id=device_uuid)
    host_db.update(context, hostname, placement_synced=False)
    return device, host, host_db.sync_serial(context, hostname)


def _prepare(conf, context, target, wait):
    """Run the driver's preparation step on the device's host, or raise
    the CyborgException the API answers with."""
    hostname = target['hostname']
    key = f"{target['cpid_type']}:{target['cpid_info']}"
    timeout = prepare_timeout(conf, wait)
    agent = agent_rpcapi.AgentAPI(conf, timeout=timeout)
    try:
        agent.prepare_device(context, hostname, key)
    except messaging.MessagingTimeout:
        raise exception.ServiceUnavailable(
            reason=f'the agent on {hostname} did not prepare device {key} '
                   f'within {timeout} s; the device stays maintaining')
    except Exception as exc:
        if rpc.peer_too_old(exc):
            # An agent too old to know prepare_device (RPC 1.0): it has
            # no preparation step to run.
            LOG.warning('The agent on %s cannot prepare devices (too old); '
                        'enabling %s without it.', hostname, key)
            return
        unreached = agent_rpcapi.not_reached(exc, hostname)
        if unreached is not None:
            raise exception.ServiceUnavailable(
                reason=f'{unreached}; the device stays maintaining') from exc
        reason = agent_rpcapi.refusal(exc)
        if reason is None:
            raise exception.ServiceUnavailable(
                reason=f'cannot reach the agent on {hostname} ({exc}); the '
                       f'device stays maintaining') from exc
        raise exception.Conflict(
            reason=f'the agent on {hostname} could not prepare device '
                   f'{key}: {reason}; the device stays maintaining') from exc


def prepare_timeout(conf, wait=None):
    """Seconds to wait for the agent: at most PREPARE_TIMEOUT and half of
    what our caller waits for us, so that the caller gets our clear 503
    (and the time to write the status and sync Placement is left) rather
    than a timeout of its own.  The caller is the API, which sends how
    long it waits (``wait``, RPC 1.6; its ``[api]conductor_timeout``); an
    older API sends nothing and our own ``[api]conductor_timeout`` stands
    in for it.  Half the RPC timeout bounds it too, for callers that use
    that."""
    waits = [PREPARE_TIMEOUT, _option(conf, None, 'rpc_response_timeout',
                                      60) // 2]   # oslo.messaging's default
    if wait is None:
        wait = _option(conf, 'api', 'conductor_timeout', None)
    if wait is not None:
        waits.append(int(wait) // 2)
    return max(1, min(waits))


def _option(conf, group, name, default):
    """An option's value, or ``default`` where it is not registered."""
    try:
        return int(getattr(conf if group is None else getattr(conf, group),
                           name))
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError, AttributeError):
        return default


def _notify(conf, context, target, status):
    if not notify.enabled(conf):
        return
    notify.send(conf, context, notify.DEVICE_STATUS_CHANGE, {
        'host': target['hostname'], 'device_uuid': target['uuid'],
        'type': target['type'], 'vendor': target['vendor'],
        'model': target['model'], 'cpid_type': target['cpid_type'],
        'cpid_info': target['cpid_info'],
        'old_status': target['status'], 'status': status,
        'deployables': target['deployables']})


def _sync(conf, context, device, device_uuid, host, serial):
    providers = {row['rp_uuid'] or inventory.provider_uuid(row['name'])
                 for row in inventory_db.host_providers(
                     context, device['hostname'])
                 if row['device_uuid'] == device_uuid}
    placement_sync.sync_providers(conf, context, device['hostname'],
                                  providers, host=host, serial=serial)

