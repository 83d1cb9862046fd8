"""Remote (fabric-attached) accelerator pools: registration, deletion,
their Placement providers, and the fabric side of binding and releasing
one of their handles.

A pool is accelerators that no agent discovers (NVMe-oF namespaces, GPUs
behind a composable-infrastructure fabric manager), registered by an admin
(``POST /v2/remote_pools``, microversion 2.8).  Placement holds it as one
*sharing* provider (doc/source/remote-pools.rst):

- a root provider named ``remote_pool_<name>``, uuid derived from that
  name (so a registration retried after a failure adopts its provider);
- inventory of the pool's resource class, one unit per handle;
- the pool's traits plus ``MISC_SHARES_VIA_AGGREGATE`` and
  ``OWNER_CYBORG``;
- membership of the pool's aggregates, so that Placement offers it in
  allocation candidates to every compute node of those aggregates.

Binding (cyborg.conductor.arq_binding) takes a free handle of the pool
and calls the pool's fabric driver (cyborg.fabric) to attach it to the
instance's host; unbinding and deleting the ARQ detach it before the
handle is freed.  A detach the fabric refuses leaves the handle out of use
(``detach_failed`` in its attach_info, with the host it stays attached
to) until the periodic ``reconcile_remote_pools`` succeeds in detaching
it.  The stuck-bind check fails a bind before it detaches the bind's
handle (a bind only slow may end Bound until then, and keeps its
attachment), the handle kept out of use that way meanwhile
(``detach_kept``).  An unbind or delete of an ARQ whose bind is still
under way keeps its handle out of use without detaching it (the attach
may land after any detach): the bind's undo frees it, or the reconcile
once that attach can no longer land (``Landing``).  A bind's undo that
cannot detach a handle another bind holds now records the detach as
owed on it, and whoever lets the handle go keeps it out of use for the
reconcile (``owe_detach``).  Every driver call has a deadline
(``cyborg.fabric.calls``): one the fabric does not answer in time counts
as refused, an attach as done.
The reconcile also removes the providers of pools that are gone
(``remove_orphans``).

Like every Placement write of the conductor, none happens inside a
database transaction: registration writes the rows, syncs the provider,
then records the sync; deletion marks the pool ``deleting`` (no new binds)
while its provider goes.  A deletion cut short (its conductor died, or
could not write the database after Placement) leaves the pool
``deleting``: the reconcile finishes it once it has been so for
``deletion_abandoned_after`` seconds (``_finish_deletion``).
"""

import collections
import datetime
import json
import uuid as uuidlib

from oslo_db import exception as db_exc
from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import states
from cyborg.db import api as db_api
from cyborg.db.api import clock as clock_db
from cyborg.db.api import remote_pools as pool_db
from cyborg.fabric import base as fabric_base
from cyborg.fabric import calls as fabric_calls
from cyborg.fabric import loader as fabric_loader
from cyborg.objects import clock as objects_clock
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from cyborg.placement import provider_tree

LOG = logging.getLogger(__name__)

PROVIDER_PREFIX = 'remote_pool_'
# What attach_info says (besides pool_db.DETACH_FAILED and
# ATTACHED_HOST) of a handle kept by a release while its bind's attach
# may still land (``Landing``): the bind it is kept for, whose undo frees
# it, and the time (naive UTC, ISO) after which that attach can no longer
# land, before which the reconcile leaves it.
KEPT_FOR_BIND = 'kept_for_bind'
ATTACH_UNTIL = 'attach_until'

# A handle a release keeps out of use while its bind's attach may still
# land (``detach_for_release``).
Landing = collections.namedtuple('Landing', 'host bind_id until')

# A pool as a fabric call needs it (``job_pool``).
_PoolRef = collections.namedtuple('_PoolRef', 'name fabric_driver')

# Seconds a pool may stay 'deleting', beyond what the Placement call of
# its deletion may take (``deletion_abandoned_after``), before the
# reconcile takes the deletion for one cut short and finishes it: a
# deletion running marks the pool, deletes its provider (that one call)
# and then its rows, in well under this.
DELETION_MARGIN = 300
# keystoneauth's longest pause between two retries of one request.
_RETRY_PAUSE = 60


def provider_name(pool_name):
    return PROVIDER_PREFIX + pool_name


# -- registration and deletion -----------------------------------------

def create(conf, context, values):
    """Register a pool from validated ``values`` (the API's body): write
    it, then make Placement hold its provider.  Returns its uuid.

    400 for an unknown fabric driver, a repeated fabric address or handle
    uuid, or what Placement refuses (an unknown standard trait); 409 for
    a name or uuid taken.  When Placement cannot be written the rows are
    removed again: a refused registration leaves nothing behind.
    """
    fabric_loader.get(conf, values['fabric_driver'])
    addresses = [h['fabric_address'] for h in values['handles']]
    repeated = sorted({a for a in addresses if addresses.count(a) > 1})
    if repeated:
        raise exception.Invalid(reason='handles: fabric address %s is '
                                       'given twice' % repeated[0])
    uuids = [h['uuid'] for h in values['handles'] if h.get('uuid')]
    repeated = sorted({u for u in uuids if uuids.count(u) > 1})
    if repeated:
        raise exception.Invalid(reason='handles: uuid %s is given twice'
                                       % repeated[0])
    pool_values = {
        'uuid': values.get('uuid') or str(uuidlib.uuid4()),
        'name': values['name'], 'description': values.get('description'),
        'resource_class': values['resource_class'],
        'traits': json.dumps(sorted(set(values.get('traits', ())))),
        'aggregates': json.dumps(sorted(set(values['aggregates']))),
        'fabric_driver': values['fabric_driver'],
        'rp_uuid': inventory.provider_uuid(provider_name(values['name'])),
        'state': states.POOL_ACTIVE, 'placement_synced': False}
    handle_values = [{'uuid': h.get('uuid') or str(uuidlib.uuid4()),
                      'fabric_address': h['fabric_address'], 'in_use': False,
                      'attach_info': pool_db.resting_info(
                          h['fabric_address'])}
                     for h in values['handles']]
    try:
        pool = db_api.write_retrying(context, pool_db.insert, context,
                                     pool_values, handle_values)
    except db_exc.DBDuplicateEntry as e:
        raise exception.Conflict(
            reason='a remote pool (or handle) with this %s already exists'
                   % ', '.join(e.columns or ['name or uuid']))
    try:
        sync(conf, context, pool)
    except exception.PlacementError as e:
        _undo_create(conf, context, pool)
        status = getattr(e, 'status_code', None)
        if status == 400:
            raise exception.Invalid(reason='Placement refused the pool: %s'
                                           % e)
        if status == 409:
            # Another provider holds the name (one made by hand, or by
            # another service): the operator's to resolve, not an outage.
            raise exception.Conflict(
                reason='Placement refused the pool\'s resource provider %s: '
                       '%s' % (provider_name(pool.name), e))
        raise
    LOG.info('Remote pool %s (%s) registered: %d %s handles, fabric '
             'driver %s, aggregates %s', pool.name, pool.uuid,
             len(handle_values), pool.resource_class, pool.fabric_driver,
             pool.aggregates)
    return pool.uuid


def _undo_create(conf, context, pool):
    try:
        placement_client.get_client(conf).delete_provider(pool.rp_uuid)
    except exception.PlacementError as e:
        LOG.warning('Could not remove the provider %s of the remote pool %s '
                    'that could not be registered: %s', pool.rp_uuid,
                    pool.name, e)
    db_api.write_retrying(context, pool_db.delete, context, pool.id)


def delete(conf, context, pool_uuid):
    """Delete a pool that nothing uses: 409 while an ARQ binds or holds
    one of its handles, a handle awaits its detach, or Placement still
    holds allocations against its provider (Nova's, until it deletes
    them).  The first two are checked as the pool is marked ``deleting``,
    in one transaction (``start_deleting``): a handle kept out of use by
    a release between a check and the mark would go with the pool while
    the fabric still has it attached.  A pool already 'deleting' (a
    deletion cut short) is deleted again so; the reconcile finishes one
    left so for ``deletion_abandoned_after`` seconds itself."""
    pool = pool_db.get(context, uuid=pool_uuid)
    if pool is None:
        raise exception.ResourceNotFound(resource='Remote pool',
                                         id=pool_uuid)
    if not db_api.write_retrying(context, pool_db.start_deleting, context,
                                 pool.id):
        raise exception.InUse(
            resource='Remote pool', id=pool.name,
            reason='accelerator requests hold or are binding its handles, '
                   'or a handle awaits a detach the fabric refused')
    try:
        placement_client.get_client(conf).delete_provider(pool.rp_uuid)
    except placement_client.ProviderInUse as e:
        db_api.write_retrying(context, pool_db.set_state, context, pool.id,
                              states.POOL_ACTIVE)
        raise exception.InUse(resource='Remote pool', id=pool.name,
                              reason='Placement holds allocations against '
                                     'its provider: %s' % e)
    except exception.PlacementError:
        db_api.write_retrying(context, pool_db.set_state, context, pool.id,
                              states.POOL_ACTIVE)
        raise
    db_api.write_retrying(context, pool_db.delete, context, pool.id)
    LOG.info('Remote pool %s (%s) deleted', pool.name, pool.uuid)


def deletion_abandoned_after(conf):
    """Seconds after which a pool still 'deleting' is taken for one whose
    deletion was cut short: ``DELETION_MARGIN`` beyond the longest the
    deletion's Placement call may take (``[placement]timeout`` for it and
    each of its keystoneauth retries, with their pauses)."""
    placement = conf.placement
    tries = (1 + (placement.connect_retries or 0)
             + (placement.status_code_retries or 0))
    return (DELETION_MARGIN + tries * (placement.timeout or 0)
            + (tries - 1) * _RETRY_PAUSE)


def _finish_deletion(conf, context, pool, marked_before):
    """Finish the deletion of ``pool`` (a row read 'deleting') if it was
    marked before ``marked_before``: its conductor died after marking it
    (its provider perhaps deleted, its rows not), or could not write the
    database after Placement answered.  As ``delete`` does: the provider
    (gone already is fine), then the rows; Placement holding allocations
    against the provider puts the pool back active (the admin deletes it
    again once they go); Placement away leaves it 'deleting' for the next
    reconcile.  True if the pool is gone.

    The deletion is taken over first (``take_over_deleting``), under the
    pool's lock and only as it was read: one running now in another
    conductor (marked since), or an admin's DELETE again, is left alone;
    the rows go only while the pool is still 'deleting'."""
    if not db_api.write_retrying(context, pool_db.take_over_deleting,
                                 context, pool.id, marked_before):
        return False
    LOG.warning('Remote pool %s (%s) has been deleting since %s UTC: its '
                'deletion was cut short (its conductor died); finishing it',
                pool.name, pool.uuid, pool.updated_at)
    try:
        placement_client.get_client(conf).delete_provider(pool.rp_uuid)
    except placement_client.ProviderInUse as e:
        db_api.write_retrying(context, pool_db.set_state, context, pool.id,
                              states.POOL_ACTIVE, was=states.POOL_DELETING)
        LOG.warning('Remote pool %s (%s) is active again: Placement holds '
                    'allocations against its provider, so its deletion '
                    'cut short cannot be finished; delete it again once '
                    'they are gone: %s', pool.name, pool.uuid, e)
        return False
    except exception.PlacementError as e:
        LOG.warning('Remote pool %s (%s): could not remove its provider to '
                    'finish its deletion (%s); it stays deleting, and a '
                    'later reconcile tries again', pool.name, pool.uuid, e)
        return False
    if not db_api.write_retrying(context, pool_db.delete, context, pool.id,
                                 state=states.POOL_DELETING):
        return False
    LOG.info('Remote pool %s (%s) deleted: its deletion cut short is '
             'finished', pool.name, pool.uuid)
    return True


# -- Placement ---------------------------------------------------------

def desired_traits(pool):
    return (set(json.loads(pool.traits)) |
            {states.SHARES_VIA_AGGREGATE, provider_tree.OWNER_TRAIT})


def _inventory(pool, handles):
    total = len(handles)
    # A handle whose detach the fabric refused is out of use until a retry
    # works, while its instance's allocation goes: reserved, so that
    # Placement does not offer it (a bind would find no free handle).
    reserved = sum(1 for h in handles if quarantined(h))
    return {pool.resource_class: {'total': total, 'max_unit': total,
                                  'min_unit': 1, 'step_size': 1,
                                  'reserved': reserved,
                                  'allocation_ratio': 1.0}}


def _active(context, pool_id):
    pool = pool_db.get(context, id=pool_id)
    return pool is not None and pool.state == states.POOL_ACTIVE


def sync(conf, context, pool):
    """Make Placement hold the pool's provider as the database describes
    it (idempotent; each write only when it differs), then record the
    sync; True if synced.  Raises PlacementError when Placement cannot be
    written.

    False, leaving Placement without the provider, for a pool no longer
    active: ``pool`` was read before a deletion that may have removed
    the provider already, which a sync must not bring back (Placement
    would offer a pool that is gone).  The pool is read again before the
    provider is created, and after the writes: gone or going by then, it
    takes its provider with it (the deletion, if it fails after all,
    puts the pool back active and the reconcile syncs it again).
    """
    if not _active(context, pool.id):
        return False
    client = placement_client.get_client(conf)
    traits = desired_traits(pool)
    client.ensure_resource_classes([pool.resource_class])
    client.ensure_traits(traits)
    client.create_provider(pool.rp_uuid, provider_name(pool.name), None)
    refused = None
    try:
        _write_provider(client, context, pool, traits)
    except exception.PlacementError as e:
        # A pool deleted meanwhile (its handles with it, its provider
        # perhaps too) fails these writes: whether it is gone decides.
        refused = e
    if not _active(context, pool.id):
        _remove_provider(conf, pool)
        return False
    if refused is not None:
        raise refused
    db_api.write_retrying(context, pool_db.set_synced, context, pool.id,
                          True)
    return True


def _write_provider(client, context, pool, traits):
    """The provider's inventory, traits and aggregates, each written only
    when it differs."""
    for attempt in range(placement_client.GENERATION_RETRIES):
        # The inventory (its generation) first, then the handles: a
        # conflict means another sync wrote after that read, from handles
        # perhaps newer than ours, so ours are read again rather than
        # sent again (placement_sync does the same for hosts).
        generation, have = client.get_inventories(pool.rp_uuid)
        want = _inventory(pool, pool_db.handles(context, [pool.id]))
        fields = want[pool.resource_class]
        if {rc: {k: inv.get(k) for k in fields}
                for rc, inv in have.items()} == want:
            break
        try:
            client.set_inventories(pool.rp_uuid, want, generation,
                                   reread=False)
            break
        except placement_client.GenerationConflict:
            if attempt + 1 == placement_client.GENERATION_RETRIES:
                raise
    _generation, have_traits = client.get_traits(pool.rp_uuid)
    if have_traits != traits:
        client.set_traits(pool.rp_uuid, traits)
    aggregates = set(json.loads(pool.aggregates))
    _generation, have_aggregates = client.get_aggregates(pool.rp_uuid)
    if have_aggregates != aggregates:
        client.set_aggregates(pool.rp_uuid, aggregates)


def _remove_provider(conf, pool):
    """Remove the provider a sync wrote for a pool deleted meanwhile."""
    try:
        placement_client.get_client(conf).delete_provider(pool.rp_uuid)
    except exception.PlacementError as e:
        # Allocations against it (the deletion fails for them too, and
        # the pool is active again) or Placement away: the deletion
        # decides.
        LOG.warning('Remote pool %s went while it was synced; its '
                    'provider %s could not be removed again: %s',
                    pool.name, pool.rp_uuid, e)
        return
    LOG.info('Remote pool %s went while it was synced; its provider %s '
             'is removed again', pool.name, pool.rp_uuid)


def reconcile(conf, context):
    """Periodic: re-sync every active pool's provider (drift made by hand
    is repaired, a registration's sync cut short is finished), retry the
    detaches the fabric refused, finish the deletions cut short
    (``_finish_deletion``: pools 'deleting' for longer than
    ``deletion_abandoned_after``), and remove the providers of pools that
    are gone (``remove_orphans``).  Returns the number of pools
    synced."""
    synced = 0
    marked_before = clock_db.utcnow() - datetime.timedelta(
        seconds=deletion_abandoned_after(conf))
    for pool in pool_db.get_all(context):
        if pool.state == states.POOL_DELETING:
            if (pool.updated_at or pool.created_at) <= marked_before:
                _finish_deletion(conf, context, pool, marked_before)
            continue
        if pool.state != states.POOL_ACTIVE:
            continue
        # The detaches first: the sync then reserves only what is still
        # kept out of use.
        _retry_detaches(conf, context, pool)
        try:
            if sync(conf, context, pool):
                synced += 1
        except exception.PlacementError as e:
            LOG.warning('Remote pool %s: Placement sync failed: %s',
                        pool.name, e)
    try:
        remove_orphans(conf, context)
    except exception.PlacementError as e:
        LOG.warning('Could not look for the providers of remote pools that '
                    'are gone: %s', e)
    return synced


def _pool_provider(provider):
    """Whether a provider (Placement's dict, found by the pool providers'
    traits) is one cyborg made for a remote pool: a root named
    ``remote_pool_<name>`` whose uuid is derived from that name."""
    name = provider['name']
    return (name.startswith(PROVIDER_PREFIX)
            and provider.get('parent_provider_uuid') is None
            and provider['uuid'] == inventory.provider_uuid(name))


def remove_orphans(conf, context):
    """Remove from Placement the providers of remote pools that no pool
    row names any more (a registration whose undo could not reach
    Placement, a sync that removed its provider too late, a conductor
    that died between the two), which Placement would offer still:
    Nova would schedule onto a pool cyborg cannot bind.  One that still
    has allocations is left, and logged, until they go, its inventory
    reserved whole meanwhile (``_withhold``): Placement offers it to no
    one, and the allocations stay.  Returns how many were removed.

    The providers are listed first, then the pools read: a pool writes its
    row before its provider, so a provider listed has its row read unless
    the pool went.  Each is checked again just before it goes, against a
    registration under the same name adopting it meanwhile."""
    client = placement_client.get_client(conf)
    found = [p for p in client.list_providers_with_traits(
        {states.SHARES_VIA_AGGREGATE, provider_tree.OWNER_TRAIT})
        if _pool_provider(p)]
    if not found:
        return 0
    named = pool_db.by_rp_uuids(context, [p['uuid'] for p in found])
    removed = 0
    for provider in found:
        if (provider['uuid'] in named or
                pool_db.get(context, rp_uuid=provider['uuid']) is not None):
            continue
        try:
            gone = client.delete_provider(provider['uuid'])
        except placement_client.ProviderInUse as e:
            LOG.warning('The provider %s (%s) of a remote pool that no '
                        'longer exists is left in Placement while it has '
                        'allocations, reserved whole so that it is offered '
                        'to no one: %s', provider['name'],
                        provider['uuid'], e)
            _withhold(client, context, provider)
            continue
        if gone:
            removed += 1
            LOG.info('Removed the provider %s (%s) of a remote pool that no '
                     'longer exists', provider['name'], provider['uuid'])
    return removed


def _withhold(client, context, provider):
    """Reserve the whole inventory of the provider of a pool that is gone
    (Placement's dict) while allocations hold it, so that Placement
    offers it in no allocation candidates; the allocations stay, and the
    provider goes once they do.  Best effort: a failure is logged, and
    the next reconcile tries again.

    Read again (its inventory, then the pool rows) just before the
    write: a registration under the pool's name may have adopted the
    provider meanwhile, whose sync writes the pool's own inventory (a
    write after that read fails on the generation)."""
    try:
        generation, inventories = client.get_inventories(provider['uuid'])
        blocked = {rc: dict(inv, reserved=inv['total'])
                   for rc, inv in inventories.items()}
        if blocked == inventories or pool_db.get(
                context, rp_uuid=provider['uuid']) is not None:
            return
        client.set_inventories(provider['uuid'], blocked, generation,
                               reread=False)
    except exception.PlacementError as e:
        LOG.warning('Could not reserve the inventory of the provider %s (%s) '
                    'of a remote pool that no longer exists: %s',
                    provider['name'], provider['uuid'], e)


def quarantined(handle):
    """Whether ``handle`` (a row) is kept out of use: in use, its detach
    refused by the fabric, no ARQ holding it any more."""
    return bool(handle.in_use and
                json.loads(handle.attach_info or '{}').get(
                    pool_db.DETACH_FAILED))


def resync(conf, context, handle_ids):
    """After handles ``handle_ids`` were kept out of use (their detach
    refused; committed): their pools' providers reserve them now, rather
    than at the next reconcile.  Best effort: a failure is logged, and the
    reconcile syncs again."""
    pool_ids = {h.pool_id for h in (pool_db.get_handle(context, i)
                                    for i in handle_ids) if h is not None}
    for pool_id in sorted(pool_ids):
        pool = pool_db.get(context, id=pool_id)
        if pool is None or pool.state != states.POOL_ACTIVE:
            continue
        try:
            sync(conf, context, pool)
        except exception.PlacementError as e:
            LOG.warning('Remote pool %s: could not reserve the handles kept '
                        'out of use in Placement (%s); the reconcile will',
                        pool.name, e)


def _retry_detaches(conf, context, pool):
    """Detach again the handles kept out of use from the host each stays
    attached to, freeing those the fabric now lets go (``_detach_kept``).

    The detaches go at once (``fabric_calls.call_each``), within one
    ``[fabric]detach_timeout``: a fabric that hangs holds the reconcile
    that long once, not once for each handle it keeps."""
    _detach_kept(conf, context, pool, pool_db.handles(context, [pool.id]),
                 conf.fabric.detach_timeout)


def detach_kept(conf, context, handle_ids):
    """Detach the handles ``handle_ids`` that a release kept out of use
    (committed, ``quarantine_info``) before any detach was tried, and free
    those the fabric lets go, as the reconcile would; those it refuses,
    or does not answer in ``release_seconds``, stay kept for the
    reconcile.  Their pools' providers are then synced (``resync``):
    they reserve the handles still kept and not those freed, whatever a
    sync that ran in between read.

    The stuck-bind check releases this way
    (``arq_binding._fail_abandoned``): it fails a bind before it detaches
    the bind's handle, because a bind that was only slow may still end
    Bound until then, and keeps its attachment when it does.  A check
    whose conductor dies between the two leaves the handle kept: the
    reconcile detaches and frees it."""
    if not handle_ids:
        return
    by_pool = collections.defaultdict(list)
    for handle in (pool_db.get_handle(context, i) for i in handle_ids):
        if handle is not None:
            by_pool[handle.pool_id].append(handle)
    seconds = release_seconds(conf, context)
    for pool_id, handles in sorted(by_pool.items()):
        pool = pool_db.get(context, id=pool_id)
        if pool is not None:
            _detach_kept(conf, context, pool, handles, seconds)
    resync(conf, context, handle_ids)


def _detach_kept(conf, context, pool, handles, seconds):
    """Detach the handles among ``handles`` (rows of ``pool``) that are
    kept out of use from the host each stays attached to, freeing those
    the fabric lets go; the detaches go at once, within ``seconds``.

    A handle is freed only as it was read (in use, the same attach_info):
    another conductor's reconcile may have detached and freed it since,
    and a bind taken it, which this detach (from the old host) did not
    touch.  One with no host recorded stays out of use: a "detach" from
    no host would free a handle still attached."""
    # (handle row, host) and the call of each detach to make.
    detaches, requests = [], []
    for handle in handles:
        if not quarantined(handle) or may_still_land(handle):
            continue
        info = json.loads(handle.attach_info)
        host = handle.hostname or info.get(pool_db.ATTACHED_HOST)
        if not host:
            LOG.error('Remote pool %s: %s is kept out of use after a '
                      'refused detach, but no host it is attached to is '
                      'recorded; it stays out of use (and the pool cannot '
                      'be deleted) until the host is recorded as %r in its '
                      'attach_info', pool.name, handle.fabric_address,
                      pool_db.ATTACHED_HOST)
            continue
        try:
            driver = fabric_loader.get(conf, pool.fabric_driver)
        except Exception as e:  # noqa: BLE001 - retried next time
            _retry_failed(pool, handle, host, e)
            continue
        detaches.append((handle, host))
        requests.append((driver, 'detach',
                         _handle(pool.name, handle.uuid,
                                 handle.fabric_address),
                         host, info.get('instance_uuid')))
    outcomes = fabric_calls.call_each(requests, seconds)
    for (handle, host), (_answer, error) in zip(detaches, outcomes):
        if error is not None:
            _retry_failed(pool, handle, host, error)
            continue
        freed = db_api.write_retrying(context, pool_db.release, context,
                                      handle.id, handle.attach_info)
        if freed is True:
            LOG.info('Remote pool %s: %s detached from %s, and free',
                     pool.name, handle.fabric_address, host)
        elif freed:
            LOG.info('Remote pool %s: %s detached from %s; it stays out of '
                     'use for its detach from %s, owed too', pool.name,
                     handle.fabric_address, host, freed)
        else:
            LOG.info('Remote pool %s: %s detached from %s, but it was '
                     'freed (and perhaps taken again) meanwhile; left as '
                     'it is', pool.name, handle.fabric_address, host)


def _retry_failed(pool, handle, host, error):
    LOG.warning('Remote pool %s: detaching %s from %s failed (%s); it '
                'stays out of use until a retry succeeds', pool.name,
                handle.fabric_address, host, error)


# -- binding -----------------------------------------------------------

def check_host(conf, pool, hostname):
    """BindFailed unless the compute node provider named ``hostname`` is
    in one of the pool's aggregates: the sharing provider's counterpart of
    "the device's provider lies on the host"."""
    client = placement_client.get_client(conf)
    node = client.get_provider_by_name(hostname)
    if node is None:
        raise exception.BindFailed(
            reason=f'no compute node provider named {hostname} in '
                   f'Placement')
    _generation, aggregates = client.get_aggregates(node['uuid'])
    if not aggregates & set(json.loads(pool.aggregates)):
        raise exception.BindFailed(
            reason=f'host {hostname} is in no aggregate of remote pool '
                   f'{pool.name}')


def _handle(pool_name, handle_uuid, fabric_address):
    return fabric_base.FabricHandle(uuid=handle_uuid,
                                    fabric_address=fabric_address,
                                    pool_name=pool_name)


class NotAttached(exception.BindFailed):
    """A bind that did not ask the fabric to attach (no time left, or
    the driver's earlier calls still unanswered): its handle has nothing
    to undo."""


def attach_seconds(conf, deadline):
    """Seconds a bind's attach has: the time left until the bind's
    ``deadline``, less what undoing an attach that did not answer may
    take (``[fabric]detach_timeout``, at most half of what is left), so
    that such a bind still ends, undone, by its deadline."""
    left = (deadline - clock_db.utcnow()).total_seconds()
    return left - min(conf.fabric.detach_timeout, left / 2)


def undo_seconds(conf, deadline):
    """Seconds a fabric call undoing a bind's attach has:
    ``[fabric]detach_timeout``, no later than the bind's ``deadline``
    (``calls.LEAST_WAIT`` at the least)."""
    left = (deadline - clock_db.utcnow()).total_seconds()
    return max(min(conf.fabric.detach_timeout, left), fabric_calls.LEAST_WAIT)


def release_seconds(conf, context):
    """Seconds a release's detach has: ``[fabric]detach_timeout``, less
    where the caller (the API) stops waiting sooner, leaving the release
    the time to record what happened (as an mdev removal does)."""
    from cyborg.conductor import arq_binding

    wait = conf.fabric.detach_timeout
    answer_by = getattr(context, 'answer_by', None)
    if answer_by is not None:
        wait = min(wait, answer_by - objects_clock.reference.now()
                   - arq_binding.MDEV_ANSWER_MARGIN)
    return max(wait, fabric_calls.LEAST_WAIT)


def attach(conf, remote, handle, hostname, instance_uuid, seconds):
    """Attach a taken ``handle`` (id, uuid, fabric_address) of the pool
    ``remote`` (a bind job's: pool_name, fabric_driver) to ``hostname``
    for ``instance_uuid``, waiting ``seconds`` at most; returns the
    handle's new attach_info (a dict: the address, the instance, and what
    the driver answered).

    BindFailed when the fabric refused, or did not answer in time (what
    it did is unknown then: the caller detaches); NotAttached when it was
    not asked."""
    driver_name = remote['fabric_driver']
    what = (f"{handle.fabric_address} of remote pool {remote['pool_name']} "
            f"to {hostname}")
    if seconds <= 0:
        raise NotAttached(reason=f'bind timed out before the fabric was '
                                 f'asked to attach {what}')
    driver = fabric_loader.get(conf, driver_name)
    try:
        answer = fabric_calls.call(
            driver, 'attach',
            _handle(remote['pool_name'], handle.uuid, handle.fabric_address),
            hostname, instance_uuid, seconds)
    except fabric_calls.Busy as e:
        LOG.warning('The %s fabric was not asked to attach %s: %s',
                    driver_name, what, e)
        raise NotAttached(reason=f'the {driver_name} fabric was not asked '
                                 f'to attach {what}: {e}') from e
    except fabric_calls.Unanswered as e:
        LOG.warning('The %s fabric driver did not answer the attach of %s '
                    'within %s s; taken for attached, it is undone',
                    driver_name, what,
                    fabric_calls.seconds_text(e.seconds))
        raise exception.BindFailed(
            reason=f'the {driver_name} fabric driver did not answer the '
                   f'attach of {what} within '
                   f'{fabric_calls.seconds_text(e.seconds)} s') from e
    except Exception as e:
        # The driver's text is the bind's failure reason (FabricDriver):
        # the fabric's refusal, not an internal error of ours.
        LOG.warning('The %s fabric did not attach %s: %s', driver_name,
                    what, e)
        raise exception.BindFailed(
            reason=f"the {driver_name} fabric did not attach {what}: "
                   f"{e or type(e).__name__}") from e
    info = {str(k): str(v) for k, v in (answer or {}).items()}
    info.update(fabric_address=handle.fabric_address,
                instance_uuid=instance_uuid)
    return info


def job_pool(job):
    """The pool of a bind ``job`` as ``detach`` takes it."""
    return _PoolRef(job['remote']['pool_name'],
                    job['remote']['fabric_driver'])


def detach(conf, pool, handle_uuid, fabric_address, hostname,
           instance_uuid, seconds=None):
    """Detach a handle through the pool's driver (``pool``: a row, or
    ``job_pool``), waiting ``seconds`` (``[fabric]detach_timeout`` when
    None) at most.  Raises when the fabric refused, did not answer in
    time or was not asked (``cyborg.fabric.calls``): the handle is then
    attached still, as far as cyborg knows."""
    driver = fabric_loader.get(conf, pool.fabric_driver)
    fabric_calls.call(
        driver, 'detach', _handle(pool.name, handle_uuid, fabric_address),
        hostname, instance_uuid,
        conf.fabric.detach_timeout if seconds is None else seconds)


def detach_for_release(conf, context, rows):
    """Before ARQs of ``rows`` (``arqs.get_to_change`` rows) leave their
    remote handles: detach each.  Returns ``(kept, landing)``: {handle
    id: host} of the handles the fabric refused to detach: they must stay
    out of use, attached to that host (the caller unlinks them from their
    ARQ without freeing them, ``quarantine_info``); and {handle id:
    ``Landing``} of those not detached because their bind's attach may
    still land (never Bound: the handle's hostname is written at Bound).
    A detach now would find nothing attached, and the attach land after
    it on a handle freed: the caller keeps those out of use too, for the
    bind's undo to detach and free (``free_kept``), or the reconcile once
    the attach can no longer land (``may_still_land``).

    The detaches go at once (``fabric_calls.call_each``), within one
    ``release_seconds``: a release of several handles of a fabric that
    hangs waits that long once, not once for each handle."""
    failed, landing = {}, {}
    pools = {}
    # (pool, handle row, host) and the call of each detach to make.
    detaches, requests = [], []
    for row in rows:
        if row.remote_handle_id is None:
            continue
        handle = pool_db.get_handle(context, row.remote_handle_id)
        if handle is None:
            continue
        if handle.hostname is None:
            landing[handle.id] = Landing(row.hostname, row.bind_id,
                                         landing_until(conf, row))
            continue
        pool = pools.get(handle.pool_id)
        if pool is None:
            pool = pools[handle.pool_id] = pool_db.get(context,
                                                       id=handle.pool_id)
        host = handle.hostname
        try:
            driver = fabric_loader.get(conf, pool.fabric_driver)
        except Exception as e:  # noqa: BLE001 - kept out of use, retried
            _detach_failed(pool, handle, host, e)
            failed[handle.id] = host
            continue
        detaches.append((pool, handle, host))
        requests.append((driver, 'detach',
                         _handle(pool.name, handle.uuid,
                                 handle.fabric_address),
                         host, row.instance_uuid))
    outcomes = fabric_calls.call_each(requests,
                                      release_seconds(conf, context))
    for (pool, handle, host), (_answer, error) in zip(detaches, outcomes):
        if error is not None:
            _detach_failed(pool, handle, host, error)
            failed[handle.id] = host
    return failed, landing


def free_kept(conf, context, handle_id, bind_id, hostname):
    """Free the handle ``handle_id`` if a release kept it for the bind
    ``bind_id`` to ``hostname`` (``Landing``), that bind's attach now
    undone (detached, or never made): the bind's undo.  True if freed;
    its pool's provider then no longer reserves it (``resync``)."""
    handle = pool_db.get_handle(context, handle_id)
    if handle is None or not kept_for_bind(handle, bind_id, hostname):
        return False
    freed = db_api.write_retrying(context, pool_db.release, context,
                                  handle.id, handle.attach_info)
    if freed is True:
        LOG.info('Remote pool handle %s detached from %s by the undo of '
                 'its bind, and free', handle.fabric_address, hostname)
    if freed:
        resync(conf, context, [handle.id])
    return bool(freed)


def owe_detach(conf, context, handle_id, hostname, instance_uuid,
               bind_id):
    """Remember that ``handle_id`` stays attached to ``hostname`` (for
    ``instance_uuid``), the undo of the bind ``bind_id`` having failed to
    detach it from there, whoever holds the handle now: a free handle is
    kept out of use for that host (``quarantine_info``); one kept for
    that host already stays so (kept for this bind while its attach could
    land, ``Landing``: now it cannot, and the reconcile may retry at
    once); one held by another bind, or kept for another host, is owed
    the detach (``pool_db.DETACH_OWED``): whoever lets it go keeps it out
    of use for that host (``pool_db.release``), for the reconcile.  So an
    attachment the fabric keeps is never forgotten."""
    for _ in range(5):
        handle = pool_db.get_handle(context, handle_id)
        if handle is None:
            return
        info = json.loads(handle.attach_info or '{}')
        if not handle.in_use:
            if db_api.write_retrying(
                    context, pool_db.keep_out, context, handle.id,
                    quarantine_info(pool_db.resting_info(
                        handle.fabric_address), instance_uuid, hostname)):
                resync(conf, context, [handle.id])
                return
            continue
        owed = info.get(pool_db.DETACH_OWED, [])
        if kept_for_bind(handle, bind_id, hostname):
            if db_api.write_retrying(
                    context, pool_db.replace_attach_info, context,
                    handle.id, handle.attach_info,
                    quarantine_info(handle.attach_info,
                                    info.get('instance_uuid'), hostname)):
                return
            continue
        if ((quarantined(handle)
             and info.get(pool_db.ATTACHED_HOST) == hostname)
                or any(host == hostname for host, _i in owed)):
            return
        info[pool_db.DETACH_OWED] = owed + [[hostname, instance_uuid or '']]
        if db_api.write_retrying(context, pool_db.replace_attach_info,
                                 context, handle.id, handle.attach_info,
                                 json.dumps(info)):
            LOG.warning('%s stays attached to %s while it is in use '
                        'elsewhere; it is kept out of use for a detach from '
                        '%s once let go', handle.fabric_address, hostname,
                        hostname)
            return
    LOG.error('%s stays attached to %s, and its handle kept changing: the '
              'detach owed could not be recorded', handle_id, hostname)


def _detach_failed(pool, handle, host, error):
    LOG.warning('Remote pool %s: detaching %s from %s failed (%s); the '
                'handle stays out of use until a retry succeeds', pool.name,
                handle.fabric_address, host, error)


def quarantine_info(handle_attach_info, instance_uuid, hostname,
                    landing=None):
    """The attach_info of a handle whose detach from ``hostname`` failed:
    what it was, plus ``detach_failed``, the instance and the host (what
    the retry detaches it from).  ``landing``: a ``Landing``, for a handle
    kept while its bind's attach may still land (that bind, and until
    when)."""
    info = json.loads(handle_attach_info or '{}')
    info.pop(KEPT_FOR_BIND, None)
    info.pop(ATTACH_UNTIL, None)
    info.update({pool_db.DETACH_FAILED: 'true',
                 'instance_uuid': instance_uuid or '',
                 pool_db.ATTACHED_HOST: hostname or ''})
    if landing is not None:
        info.update({KEPT_FOR_BIND: landing.bind_id or '',
                     ATTACH_UNTIL: landing.until})
    return json.dumps(info)


def landing_until(conf, row):
    """Until when the attach of the bind of ARQ ``row`` (an
    ``arqs.get_to_change`` row) may still land: the bind's own deadline,
    its start plus the ``bind_timeout`` of the conductor that started it
    (this conductor's where none is recorded, as ``arq_binding.fail_stuck``
    holds it), and its attach ends before that (``attach_seconds``); not
    this conductor's ``[DEFAULT]bind_timeout`` from now, which for a bind
    of a conductor with a longer one freed the handle while the attach was
    still on its way.  Never before now.  An ARQ marked Deleting
    (``arq_binding._mark``) holds its delete's start and time instead of
    its bind's: then at the latest of their end and this conductor's
    ``[DEFAULT]bind_timeout`` from now, as before."""
    now = clock_db.utcnow()
    until = now
    if row.bind_started_at is not None:
        seconds = (conf.bind_timeout if row.bind_timeout is None
                   else row.bind_timeout)
        until = max(until, row.bind_started_at
                    + datetime.timedelta(seconds=seconds))
    if row.state == states.DELETING or row.bind_started_at is None:
        until = max(until,
                    now + datetime.timedelta(seconds=conf.bind_timeout))
    return until.isoformat()


def may_still_land(handle):
    """Whether ``handle`` (a row) is kept for a bind whose attach may still
    land (``Landing``): not to be detached and freed before then."""
    until = json.loads(handle.attach_info or '{}').get(ATTACH_UNTIL)
    return bool(until) and (datetime.datetime.fromisoformat(until)
                            > clock_db.utcnow())


def kept_for_bind(handle, bind_id, hostname):
    """Whether ``handle`` (a row) is kept out of use for the bind
    ``bind_id`` to ``hostname`` (``Landing``): its ARQ released while its
    attach could still land."""
    if not quarantined(handle):
        return False
    info = json.loads(handle.attach_info)
    return (bool(bind_id) and info.get(KEPT_FOR_BIND) == bind_id
            and info.get(pool_db.ATTACHED_HOST) == hostname)
