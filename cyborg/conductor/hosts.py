"""Hosts as an operator sees them (``cyborg-manage host``): the list, with
whether each agent reports, and forgetting a retired host.

A host is known from its agent's first report on, and nothing else ends
that: a host taken out of service stays silent (the
``CyborgSilentHosts`` alert) with its devices, deployables, attach
handles and Placement providers.  ``forget`` removes them all, and the
host's row, in this order (doc/source/operations.rst, "Retiring a
compute host"):

1. Refuse, changing nothing, while the host is not silent
   (``silence.is_silent``: its agent would make it again at its next
   report), while an accelerator request holds one of its deployables
   or handles, or while Placement holds allocations against one of its
   providers (an instance still placed there, which Placement would not
   let go of its provider anyway).  Nothing overrides this: what holds
   a device is released where it was taken (the instance deleted or
   moved, the ARQ deleted, a stale allocation deleted in Placement).
2. Delete the host's rows, under its row lock, after checking again that
   no report and no ARQ came meanwhile; the host's row stays, without a
   digest (an agent that reports again is asked for its whole
   inventory) and unsynced.
3. Delete the providers from Placement, deepest first.  With the rows
   gone, a reconcile meanwhile only deletes them too.
4. Delete the host's row, unless a report came meanwhile, and what
   this process remembers of the host (``placement_sync.forget_hosts``;
   the other conductors' reconcile drops theirs).
5. Sync the hosts left on its compute node provider (a host renamed
   before the old name was forgotten records the same one): while two
   host rows recorded it, each kept its providers reserved whole; one
   left alone there offers them from now on (``placement_sync.resync``).
   A sync that fails leaves that host unsynced, for the reconcile.

A step 3 cut short (Placement away, an allocation made since step 1:
that provider is kept, reserved whole) leaves the host's row, without
devices: forgetting it again finishes the job.  A host forgotten whose
agent reports later is a new host.
"""

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import notify
from cyborg.common import wording
from cyborg.conductor import inventory_apply
from cyborg.conductor import placement_sync
from cyborg.conductor import silence
from cyborg.db import api as db_api
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import clock as clock_db
from cyborg.db.api import health as health_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db

LOG = logging.getLogger(__name__)


def list_hosts(conf, context):
    """Every host, by name: [{hostname, compute_node_name,
    last_report_at (ISO 8601, UTC, or None), silent, devices,
    placement_synced}]."""
    now = clock_db.utcnow()
    return [{'hostname': row['hostname'],
             'compute_node_name': row['compute_node_name'],
             'last_report_at': _iso(row['last_report_at']),
             'silent': silence.is_silent(conf, row['last_report_at'], now),
             'devices': int(row['devices']),
             'placement_synced': bool(row['placement_synced'])}
            for row in host_db.overview(context)]


def forget(conf, context, hostname):
    """Forget the retired host ``hostname`` (see the module's docstring);
    returns how many {devices, deployables, attach_handles, providers}
    went.  404 for a host not known; 409, changing nothing, while it
    reports or something holds its devices; 409 or 503 when Placement
    kept providers (the rows are gone then: forget it again)."""
    host = host_db.get(context, hostname)
    # MySQL's binary collation (PAD SPACE) ignores trailing spaces.
    if host is None or host['hostname'] != hostname:
        raise exception.NotFound(
            message=f'No host {hostname!r} is known to cyborg '
                    f'("cyborg-manage host list" lists them).')
    _check_silent(conf, host, clock_db.utcnow())
    stored = inventory_db.load(context, hostname)
    _check_unheld(context, hostname, stored)
    providers, names, held = placement_sync.host_removal(
        conf, context, host, [row['rp_uuid'] for row in
                              stored['deployables']])
    if held:
        raise exception.Conflict(reason=_held_by_allocations(
            hostname, names, held))
    stored, outbox = db_api.write_retrying(
        context, _forget_rows, conf, context, hostname,
        host['last_report_at'])
    if outbox is not None:
        outbox.send()
    done = {'devices': len(stored['devices']),
            'deployables': len(stored['deployables']),
            'attach_handles': len(stored['attach_handles']),
            'providers': len(providers)}
    LOG.info('Forgetting host %s: removed %d device(s), %d deployable(s) '
             'and %d attach handle(s); removing %d Placement '
             'provider(s).', hostname, done['devices'],
             done['deployables'], done['attach_handles'], len(providers))
    try:
        kept = placement_sync.remove_providers(conf, providers)
    except exception.PlacementError as exc:
        raise exception.ServiceUnavailable(
            reason=f'host {hostname}: its devices are removed, but not '
                   f'yet its providers in Placement ({exc}); run '
                   f'"cyborg-manage host forget {hostname}" again once '
                   f'Placement answers') from exc
    if kept:
        raise exception.Conflict(reason=(
            f'host {hostname}: its devices are removed, but allocations '
            f'came to hold provider(s) {wording.some(kept)} meanwhile; '
            f'they are kept, reserved whole.  Release those allocations '
            f'and run "cyborg-manage host forget {hostname}" again'))
    db_api.write_retrying(context, _drop_host, conf, context, hostname,
                          host['last_report_at'])
    # What this process remembers of it (the other conductors' memory
    # goes at their next reconcile).
    placement_sync.forget_hosts(conf, [hostname])
    LOG.info('Forgot host %s.', hostname)
    _offer_sharers(conf, context, host)
    return done


def _offer_sharers(conf, context, host):
    """Step 5: sync the hosts left on the forgotten host's compute node
    provider, every provider compared: one left alone there offers its
    providers from now on.  The host is forgotten whatever
    happens here: a failure is logged, and the host it left unsynced is
    the reconcile's."""
    cn_uuid = host.get('compute_rp_uuid')
    try:
        left = host_db.sharing(context, cn_uuid) if cn_uuid else []
        if left:
            LOG.info('Host %s shared its compute node provider %s with '
                     '%s: syncing them.', host['hostname'], cn_uuid,
                     ', '.join(left))
            placement_sync.resync(conf, context, left)
    except Exception:  # noqa: BLE001 - the forget itself is done
        LOG.exception('Syncing the hosts left on compute node provider %s '
                      'after forgetting %s failed; the reconcile will.',
                      cn_uuid, host['hostname'])


def _check_silent(conf, host, now):
    last = host['last_report_at']
    if silence.is_silent(conf, last, now):
        return
    hostname = host['hostname']
    after = int(silence.silent_after(conf.periodic_interval).total_seconds())
    raise exception.Conflict(reason=(
        f'host {hostname} reported {int((now - last).total_seconds())} s '
        f'ago (at {last:%Y-%m-%d %H:%M:%S} UTC): its agent runs, and '
        f'would make the host again at its next report.  Stop '
        f'cyborg-agent on {hostname} for good, wait until the host is '
        f'silent (no report for {after} s), then forget it'))


def _check_unheld(context, hostname, stored):
    """409 while accelerator requests hold the host's deployables or
    handles."""
    ids = [row['id'] for row in stored['deployables']]
    holding = arq_db.holding(context, ids) if ids else []
    in_use = [row['uuid'] for row in stored['attach_handles']
              if row['in_use']]
    if not holding and not in_use:
        return
    arqs = wording.some(f'{row.uuid} ({row.state}, instance '
                        f'{row.instance_uuid or "none"})' for row in holding)
    raise exception.Conflict(reason=(
        f'host {hostname} still serves accelerator requests: '
        f'{len(holding)} ARQ(s) hold its devices ({arqs or "none"}), '
        f'{len(in_use)} attach handle(s) in use.  Delete or move those '
        f'instances, or delete the ARQs, then forget the host'))


def _held_by_allocations(hostname, names, held):
    described = wording.some(f'{names.get(rp, rp)} ({rp}) by '
                             f'{", ".join(consumers)}'
                             for rp, consumers in sorted(held.items()))
    return (f'host {hostname}: Placement holds allocations against '
            f'{len(held)} of its provider(s): {described}.  Delete or move '
            f'the instances holding them; an allocation whose consumer '
            f'no longer exists is deleted with "openstack resource provider '
            f'allocation delete <consumer>"; then forget the host')


def _forget_rows(conf, context, hostname, last_report_at):
    """Step 2: delete the host's rows, under its lock, if no report came
    since ``last_report_at`` and nothing holds them; returns (the rows
    deleted, the Outbox of their notifications or None)."""
    host = host_db.lock(context, hostname)
    if host is None:
        raise exception.NotFound(
            message=f'Host {hostname} was forgotten meanwhile.')
    _check_reported_since(host, last_report_at)
    stored = inventory_db.load(context, hostname)
    _check_unheld(context, hostname, stored)
    devices = [row['uuid'] for row in stored['devices']]
    if devices:
        inventory_db.write(context, {}, {}, {'devices': devices})
    # The numbers of the health readings applied, per agent monitor.
    health_db.forget_senders(context, hostname)
    # No digest: an agent that reports again is asked for the whole of
    # its inventory.
    host_db.update(context, hostname, report_digest=None,
                   placement_synced=False)
    return stored, _notifications(conf, context, hostname, stored)


def _drop_host(conf, context, hostname, last_report_at):
    """Step 4: delete the host's row, unless a report came since."""
    host = host_db.lock(context, hostname)
    if host is None:
        return
    _check_reported_since(host, last_report_at)
    host_db.delete(context, hostname)


def _check_reported_since(host, last_report_at):
    if host['last_report_at'] != last_report_at:
        raise exception.Conflict(reason=(
            f'the agent on {host["hostname"]} reported while the host '
            f'was being forgotten: it runs again, and the host stays'))


def _notifications(conf, context, hostname, stored):
    """``device.remove`` of each device deleted, as a report that removes
    them sends; None when notifications are off."""
    if not stored['devices'] or not notify.enabled(conf):
        return None
    outbox = notify.Outbox(conf, context)
    for device in stored['devices']:
        outbox.add(notify.DEVICE_REMOVE, inventory_apply.device_payload(
            hostname, device,
            [r for r in stored['controlpath_ids']
             if r['device_id'] == device['id']],
            [r for r in stored['deployables']
             if r['device_id'] == device['id']]))
    return outbox


def _iso(moment):
    return None if moment is None else moment.isoformat()
