"""Handling an agent's inventory report (interface 4): the entry point.

1. An unchanged report (a delta with nothing in it, whose digests equal
   the stored one, for a host in sync with Placement) costs one UPDATE
   and no Placement call.
2. Otherwise, in ONE writer transaction: lock the host row; refuse a delta
   whose ``base_digest`` is not the stored digest (``need_full``, nothing
   written); load the rows the report concerns (five queries); plan
   (``inventory_plan``, pure); write the plan (one executemany per table
   and kind of change); store the new digest.
3. After commit, sync Placement (``placement_sync``); a failed sync leaves
   the host marked unsynced for the next report or the reconcile.

Several conductors may handle reports of the same host at once: the host
row lock serialises them where the database has row locks, and the
deterministic row uuids make a racing insert fail on a unique key, in
which case the report is planned again from the new state.
"""

from oslo_db import exception as db_exc
from oslo_log import log as logging
from oslo_utils import timeutils

from cyborg.conductor import inventory_plan, placement_sync
from cyborg.db import api as db_api

LOG = logging.getLogger(__name__)

# Attempts at writing a report that races another conductor.
MAX_ATTEMPTS = 5


class _Outcome:
    def __init__(self, digest, need_full=False, plan=None, synced=False,
                 was_synced=False):
        self.digest = digest
        self.need_full = need_full
        self.plan = plan
        self.synced = synced
        # Whether Placement matched the database before this report.
        self.was_synced = was_synced


def handle_report(conf, context, hostname, report):
    """Store ``report`` for ``hostname`` and sync Placement.

    Returns ``{'digest': <digest now stored>, 'need_full': bool}``; raises
    ``Invalid`` for a malformed report (nothing written).
    """
    devices, removed = inventory_plan.parse_report(report)
    digest = report['digest']
    if _looks_unchanged(report) and db_api.inventory_host_touch(
            context, hostname, digest):
        return {'digest': digest, 'need_full': False}
    outcome = _write_with_retries(conf, context, hostname, report, devices,
                                  removed)
    if outcome.need_full:
        LOG.info('Report of %s is based on %s, not on the stored %s: asking '
                 'for a full report.', hostname, report.get('base_digest'),
                 outcome.digest)
        return {'digest': outcome.digest, 'need_full': True}
    if not outcome.synced:
        placement_sync.sync_after_report(
            conf, context, hostname, outcome.plan, digest,
            rp_name=report.get('resource_provider_name'),
            trust_memory=outcome.was_synced)
    return {'digest': digest, 'need_full': False}


def _looks_unchanged(report):
    return (not report['full'] and not report['devices'] and
            not report['removed'] and
            report.get('base_digest') == report['digest'])


def _write_with_retries(conf, context, hostname, report, devices, removed):
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return _write(conf, context, hostname, report, devices, removed)
        except (db_exc.DBDuplicateEntry, db_exc.DBDeadlock) as exc:
            if attempt == MAX_ATTEMPTS:
                raise
            LOG.info('Report of %s raced another writer (%s); planning '
                     'again.', hostname, type(exc).__name__)


def _write(conf, context, hostname, report, devices, removed):
    with db_api.writer.using(context):
        host = db_api.inventory_host_lock(context, hostname)
        stored_digest = host['report_digest']
        if not report['full'] and (stored_digest is None or
                                   report.get('base_digest') !=
                                   stored_digest):
            return _Outcome(stored_digest, need_full=True)
        plan = _plan(conf, context, hostname, report['full'], devices,
                     removed)
        db_api.inventory_write(context, plan.add, plan.update, plan.delete)
        was_synced = bool(host['placement_synced'])
        synced = was_synced and plan.empty
        db_api.inventory_host_update(
            context, hostname, report_digest=report['digest'],
            placement_synced=synced, last_report_at=timeutils.utcnow())
        return _Outcome(report['digest'], plan=plan, synced=synced,
                        was_synced=was_synced)


def _plan(conf, context, hostname, full, devices, removed):
    if full:
        uuids = None
    else:
        uuids = [inventory_plan.device_uuid(hostname, key) for key in
                 [d.key() for d in devices] + list(removed)]
    stored = db_api.inventory_load(context, hostname, uuids)
    plan = inventory_plan.make_plan(hostname, stored, devices, removed, full)
    if plan.removal_candidates:
        # Asked inside the transaction (the host row stays locked for a few
        # HTTP calls) so that what is deleted matches what was checked;
        # hardware vanishing is rare enough for that to be cheap.
        held = placement_sync.held_providers(conf, plan.removal_candidates)
        if held:
            plan = inventory_plan.make_plan(hostname, stored, devices,
                                            removed, full, held)
    return plan
