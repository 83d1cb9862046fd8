"""Step 3 of report handling, and the periodic reconcile: make Placement
hold the provider tree the database describes.

Each provider follows its deployable's effective health (the worse of its
own and its device's): out of the schedule it is reserved whole and
carries the unhealthy trait (``provider_tree``).

Idempotent: every call compares and writes only what differs, so a sync
cut short (Placement down, a conductor killed) is finished by the next
report or by ``reconcile_all``.  The host row's ``placement_synced`` says
whether Placement is known to match; it is set only when a sync completes
for the digest it started from.  A sync that did not happen after its
change committed may have left providers whose rows that change deleted
(a device a report dropped), recorded nowhere else: an unsynced host's
next sync also deletes its orphans (``_may_have_lost_removals``).

The compute node provider is looked up once by name (the report's
``resource_provider_name`` if the agent sent one and it exists, else the
host name) and remembered in ``hosts.compute_rp_uuid`` by the sync that
found it, before it writes under it; its name goes to
``hosts.compute_node_name``, for binds that name the compute node as Nova
does (after the hypervisor's host name, which may differ from the service
host).  While it does not exist (nova-compute not started yet) the report
is kept and the host stays unsynced.  A full report whose
``resource_provider_name`` is not the recorded provider's name (the
setting corrected) has it looked up again (``_named_elsewhere``): an
existing root provider of that name that no other host row records
becomes the host's compute node, its providers re-parented under it
(Placement 1.37: allocations stay with their providers); a name
Placement does not know keeps the one recorded, and so does one another
host records (a WARNING names it: moving there would make the two hosts
share it) or that is not a root provider.  A name looked up and not
followed is remembered for the host and that compute node
(``_UNKNOWN_NAMES``): it is not looked up again, nor does its full
report mark the host unsynced (``name_settled``), until the name or the
compute node changes, or the host (or the one that refused the move) is
forgotten.  Only full reports are compared, and only their name against
the recorded one: an unchanged report costs what it did.

The compute node provider recorded is written compare-and-set
(``hosts.update``'s ``node``): by the sync that finds it
(``_record_compute_node``), against the one that sync read, and a
completed sync marks the host synced only while the row still records
the provider it wrote under (``_mark_synced``).  A sync that finds the
row moved meanwhile (another sync followed a corrected name) stops
(``_Moved``): it never writes the providers back under the node left,
nor that node back into the row; the next sync works from the new one.

Two host rows may record one compute node provider: a host renamed (or
its ``[DEFAULT]host`` changed) before its old name was forgotten reports
its hardware anew under the new name, beside the old name's providers;
or an agent's ``[agent]resource_provider_name`` names another host's
compute node at its first report.  Both offer the same hardware, and
nothing says which name is live: the row made first may be the name that
found the compute node last, and instances may hold either's devices.
So the rule is symmetric: while two or more rows record one compute node
provider, EVERY one of them has every provider reserved whole (as
``_held_whole`` reserves a card), logs a WARNING at each of its syncs
naming them all and what to do, and no bind takes its handles
(``attach_handles.take``); the exports leave them out.  Whether a host
shares its compute node changes with no provider's generation: each such
change syncs the hosts it concerns, every provider compared
(``resync``).  A host that comes to a compute node others record (its
first sync there) syncs them before it writes its own; forgetting one
(cyborg.conductor.hosts) syncs those left, and one whose providers move
away syncs those it left: a host left alone there offers its providers
at once.  Where such a sync fails, the host it left unsynced is compared
whole by the next reconcile, and this process compares every provider
of a host whose standing changed since it last synced it (``_SHARED``).
The sharers are read with one query per pass of a sync, after the tree
listing the pass writes against (``_sharing_now``), so that the sync
that writes last read the newest; never on an unchanged report.

A host's first sync makes its providers: a create each, a trait PUT each,
then one reshape for all their inventories and one listing to learn their
generations (``_fill_new``): two calls per provider plus three.

Two syncs of one host may overlap (quick status changes, a reconcile
and a report, two conductors).  Each lists the tree before it reads the
rows and writes each provider against the generation it listed or read;
a conflict means another writer came after that listing, so the rows may
be older than what Placement now holds: the provider is worked out again
from a new listing and new rows, never written again with the same body.
The sync that read the newest rows is the last to write.

Every change Placement must follow (a report, a status, health or
programming change, vanished hardware dropped) bumps the host's
``sync_serial`` in the transaction that makes it, and its sync marks the
host synced only while the serial is still the one that transaction left
(``_mark_synced``): a change committed after it, whose own sync may fail,
is one this sync may not have written.

To keep an unchanged tree cheap, this process remembers each provider's
generation after it last wrote or checked it: a provider whose generation
Placement still reports is unchanged, anything else (an edit by hand,
another conductor, an allocation) makes it compare inventories and traits.
What it remembers of providers and hosts is dropped when they go, also
through another conductor: by the reconcile (``_forget_gone``).
"""

import collections
import threading
import weakref

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.conductor import health_machine
from cyborg.db import api as db_api
from cyborg.db.api import clock as clock_db
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from cyborg.placement import client as placement_client
from cyborg.placement import provider_tree

LOG = logging.getLogger(__name__)

# Per client (so per Placement endpoint): what this process remembers of
# providers (``_Generations``).
_GENERATIONS = weakref.WeakKeyDictionary()
_GENERATIONS_LOCK = threading.Lock()


class _Generations:
    """One client's remembered providers: ``entries``, {provider uuid:
    (its compute node provider's uuid, its generation)}, and ``under``,
    {compute node provider uuid: {provider uuid}}.  The compute node says
    which entries the reconcile may drop (``_forget_gone``): those of a
    provider deleted, or of a host forgotten, through another conductor,
    which no sync of this process would ever drop; ``under`` lets a
    host's reconcile find its own without reading every entry."""

    def __init__(self):
        self.entries = {}
        self.under = {}

    def put(self, rp_uuid, entry):
        before = self.entries.get(rp_uuid)
        if before is not None and before[0] != entry[0]:
            self._unlist(rp_uuid, before[0])
        self.entries[rp_uuid] = entry
        self.under.setdefault(entry[0], set()).add(rp_uuid)

    def pop(self, rp_uuid):
        entry = self.entries.pop(rp_uuid, None)
        if entry is not None:
            self._unlist(rp_uuid, entry[0])

    def _unlist(self, rp_uuid, cn_uuid):
        listed = self.under.get(cn_uuid, set())
        listed.discard(rp_uuid)
        if not listed:
            self.under.pop(cn_uuid, None)


def _remember(client, provider, generation):
    """Remember ``provider``'s generation; None forgets it."""
    if generation is None:
        _forget_generation(client, provider.uuid)
        return
    with _GENERATIONS_LOCK:
        memory = _GENERATIONS.get(client)
        if memory is None:
            memory = _GENERATIONS[client] = _Generations()
        memory.put(provider.uuid, (provider.parent_uuid, generation))


def _forget_generation(client, rp_uuid):
    with _GENERATIONS_LOCK:
        memory = _GENERATIONS.get(client)
        if memory is not None:
            memory.pop(rp_uuid)


def _remembered(client, rp_uuid):
    with _GENERATIONS_LOCK:
        memory = _GENERATIONS.get(client)
        entry = memory.entries.get(rp_uuid) if memory is not None else None
    return None if entry is None else entry[1]


def _remembered_entries(client, cn_uuid=None):
    """``{provider uuid: entry}`` remembered (under ``cn_uuid`` only, if
    given), as they are now: for ``_forget_entries`` to drop later
    those that prove stale."""
    with _GENERATIONS_LOCK:
        memory = _GENERATIONS.get(client)
        if memory is None:
            return {}
        if cn_uuid is None:
            return dict(memory.entries)
        return {rp_uuid: memory.entries[rp_uuid]
                for rp_uuid in memory.under.get(cn_uuid, ())}


def _forget_entries(client, entries):
    """Drop ``entries`` ({provider uuid: entry}, as
    ``_remembered_entries`` found them) still as they were: one a sync
    rewrote since (it wrote or read that provider) stays."""
    with _GENERATIONS_LOCK:
        memory = _GENERATIONS.get(client)
        if memory is None:
            return
        for rp_uuid, entry in entries.items():
            if memory.entries.get(rp_uuid) == entry:
                memory.pop(rp_uuid)


# Per client: {hostname: whether this process last synced the host whole
# as sharing its compute node with another host row (``_sharing_now``)}.
# No generation says that this changed (another host came there, or was
# forgotten, or left): a sync that finds it changed compares every
# provider.
_SHARED = weakref.WeakKeyDictionary()


def _shared_changed(client, hostname, shared):
    with _GENERATIONS_LOCK:
        before = _SHARED.get(client, {}).get(hostname)
    return before is not None and before != shared


def _remember_shared(client, hostname, shared):
    with _GENERATIONS_LOCK:
        _SHARED.setdefault(client, {})[hostname] = shared


# -- what this process remembers of hosts -------------------------------------

# ``(hostnames, forget)`` of each memory this process keeps by host name
# (``_SHARED``, ``_UNKNOWN_NAMES``, inventory_apply's ``_WARNED``):
# ``hostnames(client)`` the names it holds, ``forget(client, names)``
# drops them (``client``: the conductor's Placement client, for a memory
# kept per client).  Each grows by a host it serves: a host forgotten
# here goes at once (``forget_hosts``), one forgotten through another
# conductor at the next reconcile, which no longer lists it
# (``_forget_gone``).
_HOST_MEMORIES = []


def host_memory(memory, lock):
    """Register the ``{host name: ...}`` dict ``memory(client)`` returns
    (read at each use), guarded by ``lock``, as a memory of hosts
    (above)."""
    def hostnames(client):
        with lock:
            return set(memory(client))

    def forget(client, names):
        with lock:
            held = memory(client)
            for name in names:
                held.pop(name, None)

    _HOST_MEMORIES.append((hostnames, forget))


def forget_hosts(conf, hostnames):
    """Drop what this process remembers of ``hostnames``, forgotten."""
    client = placement_client.get_client(conf)
    for _hostnames, forget in _HOST_MEMORIES:
        forget(client, hostnames)


def _remembered_hosts(client):
    return set().union(*(hostnames(client)
                         for hostnames, _forget in _HOST_MEMORIES))


host_memory(lambda client: _SHARED.get(client, {}), _GENERATIONS_LOCK)


# -- after a report -----------------------------------------------------------

class Touched:
    """What a sync needs of a plan when no report made one (a status or
    health change): the providers to rewrite."""

    def __init__(self, providers, removed=()):
        self.touched_providers = providers
        self.removed_providers = removed


def sync_after_report(conf, context, hostname, plan, digest, rp_name=None,
                      trust_memory=True, host=None, serial=None,
                      follow_name=False):
    """Sync the host after its report was written; True when Placement
    now matches.  Failures are logged, not raised: the report is stored
    and the next report or the reconcile finishes the job.  ``host``: the
    host's row, when the caller has just read it.

    ``serial``: the host's ``sync_serial`` as the transaction that made
    the change left it (read in it, after its own bump).  A change
    committed after that transaction (its own sync may fail) then keeps
    the host unsynced whatever this sync writes.  Read here instead, the
    serial could already count such a change, whose providers this sync
    neither touches nor, trusting its memory, compares: without it,
    memory is trusted only if the host was synced at the serial read.

    ``trust_memory`` False (the host was not synced before this change)
    also deletes the host's orphans (``_may_have_lost_removals``).
    ``follow_name``: ``rp_name`` comes with a full report; where it is not
    the recorded compute node's name, it is looked up again."""
    if serial is None:
        row = host_db.get(context, hostname)
        serial = row['sync_serial'] if row else None
        trust_memory = trust_memory and bool(row and row['placement_synced'])
        host = host or row
    elif host is None:
        # Read here rather than in sync_host: the orphans depend on it.
        host = host_db.get(context, hostname)
    try:
        cn_uuid = sync_host(conf, context, hostname,
                            touched=plan.touched_providers if plan else set(),
                            removed=plan.removed_providers if plan else (),
                            rp_name=rp_name, trust_memory=trust_memory,
                            host=host,
                            remove_orphans=_may_have_lost_removals(
                                host, trust_memory),
                            follow_name=follow_name)
    except exception.PlacementError as exc:
        LOG.warning('Placement sync of host %s failed, will retry: %s',
                    hostname, exc)
        return False
    return _mark_synced(context, hostname, digest, cn_uuid, serial)


def _may_have_lost_removals(host, trust_memory):
    """Whether a sync must look for the host's orphans: providers whose
    rows were deleted (a report that dropped a device, vanished hardware
    dropped, a forget cut short) and whose own removal never happened
    (Placement failed that sync, or the conductor died after the
    commit).  Nothing but the providers records them, and a sync that
    only writes what its rows describe would mark the host synced with
    them still offered.  Any such failure leaves the host unsynced, so
    its next sync, whatever starts it, deletes them: one listing and one
    query more, for an unsynced host only.  A host's first report (no
    digest stored, no compute node provider found yet) cannot have lost
    any, and its first sync stays as cheap as it was."""
    return bool(not trust_memory and host is not None and
                (host['report_digest'] or host['compute_rp_uuid']))


def sync_providers(conf, context, hostname, providers, host=None,
                   serial=None):
    """Rewrite ``providers`` of the host from the database after a change
    no report made (a device's status, the end of an FPGA programming),
    as ``sync_after_report`` does: True when Placement now matches,
    failures logged and left to the next report or the reconcile.
    ``host``: the host's row as the change's transaction read it (before
    marking it unsynced), with ``serial``, the ``sync_serial`` that
    transaction left; without them the row is read now."""
    if host is None:
        host = host_db.get(context, hostname)
        if serial is None and host is not None:
            # One read for both: memory is trusted only if the host was
            # synced at this serial.
            serial = host['sync_serial']
    return sync_after_report(
        conf, context, hostname, Touched(providers),
        host['report_digest'] if host else None,
        trust_memory=bool(host and host['placement_synced']), host=host,
        serial=serial)


def _mark_synced(context, hostname, digest, cn_uuid, serial):
    """Record a completed sync in one UPDATE, unless a later report
    changed the digest, or a later change made Placement lag
    (``serial``: the host's ``sync_serial`` as the change this sync
    writes left it, or as read before the rows; any change since moved
    it past), or the row records another compute node provider than the
    one this sync wrote under (``cn_uuid``: another sync moved the host
    since; the compute node provider itself is recorded by
    ``_record_compute_node``, never here), meanwhile: that change's
    sync, or the reconcile, marks it.  True when Placement matched at
    the end of the sync."""
    if cn_uuid:
        host_db.update(context, hostname, digest=digest, serial=serial,
                       node=cn_uuid, placement_synced=True)
    return bool(cn_uuid)


def sync_host(conf, context, hostname, touched=None, removed=(),
              rp_name=None, remove_orphans=False, trust_memory=True,
              host=None, follow_name=False):
    """Make the host's providers in Placement match the database.

    ``touched``: providers known to have changed (written without reading
    first); None checks every provider.  ``removed``: providers whose
    deployables were deleted.  ``remove_orphans``: also delete providers
    with OWNER_CYBORG under the compute node that no deployable explains.
    ``trust_memory``: a provider whose generation is the one we last saw
    is taken as right; pass False when the database may have changed
    since (a sync failed), so every provider is compared.  ``host``: the
    host's row if the caller has it.  ``follow_name``: look ``rp_name``
    up even though a compute node is recorded (``_named_elsewhere``).
    Returns the compute node provider's uuid once Placement matches, for
    the caller to mark the host synced under (``_mark_synced``); None
    when that provider does not exist yet, the host is unknown, or its
    row came to record another one meanwhile (``_Moved``).
    Raises PlacementError after trying every provider if any failed.
    """
    client = placement_client.get_client(conf)
    host = host or host_db.get(context, hostname)
    if host is None:
        return None
    cn_uuid, cn_name, actual = _compute_node_tree(
        client, context, host, rp_name, bool(removed) or remove_orphans,
        follow_name)
    if cn_uuid is None:
        LOG.info('No compute node provider for host %s in Placement yet; '
                 'its devices are synced once it appears.', hostname)
        return None
    try:
        return _sync_under(conf, context, client, host, cn_uuid, cn_name,
                           actual, touched, removed, remove_orphans,
                           trust_memory)
    except _Moved:
        LOG.info('Host %s no longer records compute node provider %s '
                 '(another sync moved it, or it was forgotten): this sync '
                 'stops, the next one works from the one recorded.',
                 hostname, cn_uuid)
        return None


class _Moved(Exception):
    """The host's row no longer records the compute node provider this
    sync works under (``_record_compute_node``, ``_sharing_now``)."""


def _sync_under(conf, context, client, host, cn_uuid, cn_name, actual,
                touched, removed, remove_orphans, trust_memory):
    """``sync_host`` once its compute node provider is known."""
    hostname = host['hostname']
    left = _record_compute_node(context, host, cn_uuid, cn_name)
    sharers = _sharing_now(context, host, cn_uuid)
    if sharers and cn_uuid != host.get('compute_rp_uuid'):
        # It has just come there (its first sync there): the others
        # there, offered until now if alone, are reserved first.
        LOG.info('Host %s comes to compute node provider %s (%s), which '
                 'host(s) %s record too: reserving theirs.', hostname,
                 cn_uuid, cn_name, ', '.join(sharers))
        resync(conf, context, sharers)
    if _shared_changed(client, hostname, bool(sharers)):
        trust_memory = False
    owned = set()
    if remove_orphans:
        # Read before the listing: a provider remembered then under this
        # compute node and not listed is gone (deleted through another
        # conductor; or moved, and compared at its next sync).  An entry
        # a sync wrote since stays (_forget_entries); at worst one is
        # lost, which costs a compare: a benign race.
        remembered = _remembered_entries(client, cn_uuid)
        # Listed before the rows are read, so a provider that a report
        # handled meanwhile adds is never taken for an orphan.
        owned = {p['uuid'] for p in client.list_tree(
            cn_uuid, required=[provider_tree.OWNER_TRAIT])}
        _forget_entries(client, {rp: entry for rp, entry in
                                 remembered.items() if rp not in owned})
    failures, done, wanted = [], collections.Counter(), None
    pending = None                      # every provider of the host
    passes = placement_client.GENERATION_RETRIES
    for _pass in range(passes):
        desired = _desired(context, hostname, cn_uuid, pending,
                           bool(sharers))
        if wanted is None:
            wanted = {p.uuid for p in desired}
        overtaken = _sync_pass(client, cn_uuid, desired, actual, touched,
                               trust_memory, done, failures)
        if not overtaken:
            break
        # Another writer came first (another sync of this host, an
        # allocation): what we wrote from may be old.  Read the tree,
        # THEN the rows (and who shares the compute node: a host forgotten
        # or come meanwhile), and write those providers again from them.
        LOG.debug('Placement sync of host %s: %d provider(s) changed '
                  'meanwhile; working them out again', hostname,
                  len(overtaken))
        pending = touched = overtaken
        actual = _by_uuid(client.list_tree(cn_uuid))
        now = _sharing_now(context, host, cn_uuid)
        if bool(now) != bool(sharers):
            # What the earlier passes wrote follows the old standing:
            # every provider is compared again.
            pending = touched = None
            trust_memory = False
        sharers = now
    else:
        failures += [placement_client.GenerationConflict(
            uuid=rp_uuid, attempts=passes) for rp_uuid in overtaken]
    # Orphans are those no deployable explains, of this host or of any
    # other: two host rows may share the compute node (a host renamed,
    # until the old name is forgotten), and neither's reconcile may take
    # the other's providers.
    orphans = owned - deployable_db.providing(context, owned)
    unwanted = (set(removed) | orphans) - wanted - {cn_uuid}
    for rp_uuid in sorted(unwanted):
        if rp_uuid in actual:
            _remove_provider(client, rp_uuid)
            done['removed'] += 1
    _log_sync(hostname, done, failures)
    if sharers:
        _warn_shared(hostname, sharers, cn_uuid, cn_name)
    if failures:
        raise failures[0]
    _remember_shared(client, hostname, bool(sharers))
    if left:
        # Its providers have left that compute node: a host there may be
        # the only one on it now.
        resync(conf, context, host_db.sharing(context, left))
    return cn_uuid


def _record_compute_node(context, host, cn_uuid, cn_name):
    """Record the compute node provider found (its uuid and name) in the
    host's row where it is not the one recorded, before anything is
    written under it: the hosts sharing it (``_sharing_now``), and a
    sync that follows this one (the reconcile, another report's) after
    this one was cut short, work from it, not from the node left.  One
    UPDATE when it changed (the host's first sync, or moved), else none;
    compare-and-set on the provider ``host`` (as read) records: where
    another sync recorded another one since, ``_Moved``.  Returns the
    compute node provider the host moved from, if it did."""
    values = {}
    if cn_name and cn_name != host.get('compute_node_name'):
        values['compute_node_name'] = cn_name
    recorded = host.get('compute_rp_uuid')
    if cn_uuid != recorded:
        values['compute_rp_uuid'] = cn_uuid
    if values and not host_db.update(context, host['hostname'],
                                     node=recorded, **values):
        # Another sync recorded one since: the same (two first syncs at
        # once) is this one's too; another is the next sync's.
        row = host_db.get(context, host['hostname'])
        if row is None or row['compute_rp_uuid'] != cn_uuid:
            raise _Moved()
    return recorded if recorded and recorded != cn_uuid else None


def _sharing_now(context, host, cn_uuid):
    """The other hosts whose rows record the compute node provider
    ``cn_uuid`` (sorted): while any does, each of them, ``host``
    included, keeps every provider reserved whole.  One query, read
    after the tree listing the pass writes against; ``_Moved`` where
    ``host``'s row no longer records ``cn_uuid``."""
    names = host_db.sharing(context, cn_uuid)
    if host['hostname'] not in names:
        raise _Moved()
    return [name for name in names if name != host['hostname']]


def _warn_shared(hostname, sharers, cn_uuid, cn_name):
    """The WARNING of each sync of a host sharing its compute node."""
    hosts = ', '.join(sorted([hostname] + sharers))
    LOG.warning(
        'Hosts %(hosts)s all record compute node provider %(cn)s '
        '(%(name)s): the same hardware under several names.  None of them '
        'offers its devices (%(host)s keeps every provider reserved whole) '
        'until one name is left.  If a host was renamed, drain its stale '
        'name (no instance holds its accelerators) and run "cyborg-manage '
        'host forget <stale name>"; if an agent\'s '
        '[agent]resource_provider_name or [DEFAULT]host is wrong, correct '
        'it.', {'hosts': hosts, 'cn': cn_uuid, 'name': cn_name,
                'host': hostname})


def resync(conf, context, hostnames):
    """Mark each of ``hostnames`` unsynced and sync it, comparing every
    provider: whether a host shares its compute node changed (another
    host came there, left, or was forgotten), which no provider's
    generation says.  Failures are logged and left to the reconcile
    (the host stays unsynced, and every provider is compared then)."""
    for hostname in hostnames:
        host_db.update(context, hostname, placement_synced=False)
        sync_providers(conf, context, hostname, set())


def _desired(context, hostname, cn_uuid, only=None, shared=False):
    """The host's providers as its rows describe them (those in ``only``
    when given); every one reserved whole while ``shared`` (another host
    row records the compute node, ``_sharing_now``)."""
    providers = [provider_tree.provider_for(
                     _held_whole(row, shared), row['attributes'],
                     row['device_status'], cn_uuid,
                     health_machine.effective(row['health'],
                                              row['device_health']))
                 for row in inventory_db.host_providers(context, hostname)]
    return [p for p in providers if only is None or p.uuid in only]


def _held_whole(row, shared=False):
    """The host_providers ``row`` as ``provider_for`` must reserve it: as
    a gone one (reserved whole) while another deployable of its card is
    kept gone under an attach handle in use (``card_held``).  What the
    card is reported as now (a GPU whole, its vGPUs or VFs not back yet
    after a reboot or a driver reload; an FPGA's PF, its VFs not back)
    is what an instance still uses; the next sync after that handle is
    released offers it.  So too while the host's compute node is
    ``shared`` with another host row (the same hardware under two
    names)."""
    return dict(row, gone=True) if row.get('card_held') or shared else row


def _sync_pass(client, cn_uuid, desired, actual, touched, trust_memory,
               done, failures):
    """Make each of ``desired`` right (``actual``: the tree as listed
    before the rows were read); counts outcomes in ``done`` and errors in
    ``failures``, and returns the providers another writer changed after
    that listing (each write is made against the generation listed, or
    read, and never sent again on a conflict)."""
    rcs, traits = provider_tree.custom_names(desired)
    client.ensure_resource_classes(rcs)
    client.ensure_traits(traits)
    overtaken, made = set(), []
    for provider in desired:
        try:
            outcome = _sync_provider(client, provider,
                                     actual.get(provider.uuid), touched,
                                     trust_memory)
        except placement_client.GenerationConflict:
            overtaken.add(provider.uuid)
            continue
        except exception.PlacementError as exc:
            failures.append(exc)
            continue
        if outcome == 'made':
            made.append(provider)
            outcome = 'created'
        done[outcome] += 1
    filled, late = _fill_new(client, cn_uuid, made)
    failures += filled
    return overtaken | late


def _log_sync(hostname, done, failures):
    """One line per sync: INFO when it wrote something or failed, DEBUG
    when Placement already matched (the reconcile checks every host)."""
    wrote = done['created'] + done['updated'] + done['removed']
    LOG.log(logging.INFO if wrote or failures else logging.DEBUG,
            'Placement sync of host %s: %d provider(s) created, %d '
            'updated, %d removed, %d unchanged%s', hostname,
            done['created'], done['updated'], done['removed'],
            done['unchanged'],
            ', %d failed' % len(failures) if failures else '')


def _compute_node_tree(client, context, host, name, need_tree,
                       follow_name=False):
    """(compute node provider uuid, its name when read, {uuid: provider}
    of its tree).

    A compute node found by name (the host's first sync, or its provider
    was replaced) with no ``need_tree`` (nothing to delete under it) is not
    listed: its providers are made by creating them, and any that exists
    already answers the create with a conflict and is adopted.

    ``follow_name``: ``name`` (a full report's) is looked up when it is
    not the recorded provider's, unless it was already, for that
    provider, and not followed (``name_settled``); where another
    provider has it (``_named_elsewhere``), that one is returned, with
    the tree of both (the host's providers, under the old one, are then
    re-parented)."""
    cn_uuid = host.get('compute_rp_uuid')
    if cn_uuid:
        try:
            tree = _by_uuid(client.list_tree(cn_uuid))
        except placement_client.ProviderNotFound:
            LOG.info('Compute node provider %s of host %s is gone; '
                     'looking it up by name again.', cn_uuid,
                     host['hostname'])
        else:
            cn_name = tree.get(cn_uuid, {}).get('name')
            if (follow_name and name and name != cn_name and
                    not name_settled(host['hostname'], name, cn_uuid)):
                found = _named_elsewhere(client, context, host, name,
                                         cn_name, tree)
                if found is not None:
                    tree.update(_by_uuid(client.list_tree(found['uuid'])))
                    return found['uuid'], found['name'], tree
            return cn_uuid, cn_name, tree
    # The agent's name for it first (configured, else its FQDN), then the
    # host name, in the order of doc/source/contract.rst ("Placement").
    found = None
    for candidate in dict.fromkeys(n for n in (name, host['hostname']) if n):
        found = client.get_provider_by_name(candidate)
        if found:
            break
    if found is None:
        return None, None, {}
    if name and found['name'] != name:
        # The host name's fallback: the name is settled at once.
        _not_followed(host, name, found['uuid'], found['name'],
                      'Placement does not know', logging.INFO)
    if not need_tree:
        return found['uuid'], found['name'], {}
    return (found['uuid'], found['name'],
            _by_uuid(client.list_tree(found['uuid'])))


# {hostname: (the resource_provider_name looked up for it and not
# followed, the compute node provider it was looked up against, the host
# whose row records the provider of that name, or None)}: not looked up
# again (``name_settled``) until the host reports another name, or comes
# to record another compute node, or it or that other host is forgotten
# (here, or through another conductor: the reconcile, ``_forget_gone``);
# said once, when remembered.
_UNKNOWN_NAMES = {}
_UNKNOWN_NAMES_LOCK = threading.Lock()


def name_settled(hostname, name, cn_uuid):
    """Whether ``name``, reported by ``hostname`` whose row records the
    compute node provider ``cn_uuid``, was looked up and not followed:
    a full report naming it neither marks the host unsynced
    (inventory_apply) nor has it looked up again.  One dict lookup."""
    with _UNKNOWN_NAMES_LOCK:
        entry = _UNKNOWN_NAMES.get(hostname)
    return entry is not None and entry[:2] == (name, cn_uuid)


def _unknown_name_hosts(_client):
    """The hosts ``_UNKNOWN_NAMES`` holds something of: those it is kept
    for, and those whose rows refused a move (forgetting one makes the
    move possible)."""
    with _UNKNOWN_NAMES_LOCK:
        return set(_UNKNOWN_NAMES) | {
            entry[2] for entry in _UNKNOWN_NAMES.values() if entry[2]}


def _forget_unknown_names(_client, names):
    with _UNKNOWN_NAMES_LOCK:
        for hostname, entry in list(_UNKNOWN_NAMES.items()):
            if hostname in names or entry[2] in names:
                del _UNKNOWN_NAMES[hostname]


_HOST_MEMORIES.append((_unknown_name_hosts, _forget_unknown_names))


def _named_elsewhere(client, context, host, name, cn_name, tree):
    """The provider named ``name`` (a full report's
    ``resource_provider_name``, not the name of the compute node
    provider recorded, ``cn_name``) when the host's providers may move
    under it: the operator corrected the setting (the provider first
    found was the host name's fallback, or a wrong name's).  None (the
    recorded one stays, and the name is remembered: ``name_settled``)
    when Placement has no such provider (the agent's default FQDN, where
    Nova names the compute node by the short host name: said at INFO), or
    it is in the recorded provider's ``tree``, or is not a root provider,
    or another host row records it (another host's compute node: moving
    there would make the two share it, and reserve that host's devices;
    said at WARNING, naming that host)."""
    hostname = host['hostname']
    found = client.get_provider_by_name(name)
    blocker, level = None, logging.WARNING
    if found is None:
        why = 'Placement does not know'
        # The host name's fallback found the compute node: the agent's
        # default FQDN is not Nova's name for it, the usual case.
        level = logging.INFO if cn_name == hostname else logging.WARNING
    elif found['uuid'] in tree or found.get('parent_provider_uuid'):
        why = ('is a provider under that compute node'
               if found['uuid'] in tree else 'is not a compute node '
               '(a root provider)')
    else:
        others = [other for other in host_db.sharing(context, found['uuid'])
                  if other != hostname]
        if not others:
            with _UNKNOWN_NAMES_LOCK:
                _UNKNOWN_NAMES.pop(hostname, None)
            LOG.info('Host %s reports resource_provider_name %s: moving '
                     'its providers from compute node provider %s (%s) '
                     'to %s (%s).', hostname, name, cn_name,
                     host['compute_rp_uuid'], found['name'], found['uuid'])
            return found
        blocker = others[0]
        why = (f'is the compute node provider of host(s) '
               f'{", ".join(others)}: correct the setting of whichever '
               f'host names another\'s compute node')
    _not_followed(host, name, host['compute_rp_uuid'], cn_name, why, level,
                  blocker)
    return None


def _not_followed(host, name, cn_uuid, cn_name, why, level, blocker=None):
    """Remember ``name`` as settled for ``host`` under the compute node
    provider ``cn_uuid`` (``name_settled``), saying why at ``level``
    unless it was already."""
    hostname = host['hostname']
    entry = (name, cn_uuid, blocker)
    with _UNKNOWN_NAMES_LOCK:
        said = _UNKNOWN_NAMES.get(hostname) == entry
        _UNKNOWN_NAMES[hostname] = entry
    LOG.log(logging.DEBUG if said else level,
            'Host %s reports resource_provider_name %s, which %s; its '
            'providers stay under compute node provider %s (%s).',
            hostname, name, why, cn_name, cn_uuid)


def _by_uuid(providers):
    return {p['uuid']: p for p in providers}


def _sync_provider(client, provider, actual, touched, trust_memory):
    """Make one provider right; says what it took: ``made`` (just created
    and still empty, for ``_fill_new`` to fill), ``updated`` or
    ``unchanged``.  Raises GenerationConflict when it changed after
    ``actual`` was listed (or after it was read here): the rows read
    since may be older than what was written, so nothing is sent again.
    """
    if actual is None:
        created = client.create_provider(provider.uuid, provider.name,
                                         provider.parent_uuid)
        if created['generation'] == 0:
            # Every write to a provider (inventory, traits, allocations)
            # moves its generation on: at 0 it holds nothing yet.
            return 'made'
        # It existed and holds something: OpenStack Cyborg made it, or a
        # first sync of this host cut short by an outage (after the trait
        # PUT, or after the reshape but before the host was recorded as
        # synced).  Compared like any other: only what differs is written.
        return 'updated' if _check_provider(client, provider) \
            else 'unchanged'
    if (actual['name'] != provider.name or
            actual['parent_provider_uuid'] != provider.parent_uuid):
        client.update_provider(provider.uuid, provider.name,
                               provider.parent_uuid)
        _check_provider(client, provider)
        return 'updated'
    if touched is not None and provider.uuid in touched:
        _write_provider(client, provider, actual['generation'])
        return 'updated'
    if (not trust_memory or
            _remembered(client, provider.uuid) != actual['generation']):
        return 'updated' if _check_provider(
            client, provider, actual['generation']) else 'unchanged'
    return 'unchanged'


def _fill_new(client, cn_uuid, made):
    """Give providers just made (at generation 0: empty) their traits, one
    PUT each, and their inventories in ONE reshape, then read their
    generations back with one listing of the tree: 2 calls per provider
    plus 2.  Where Placement will not reshape, one inventory PUT each.
    Returns (the errors met, the providers another writer filled first).
    """
    failures, stocked, late = [], [], set()
    for provider in made:
        generation = 0
        try:
            if provider.traits:
                generation = client.set_traits(
                    provider.uuid, provider.traits, generation,
                    reread=False)
        except placement_client.GenerationConflict:
            late.add(provider.uuid)
            continue
        except exception.PlacementError as exc:
            failures.append(exc)
            continue
        if provider.inventories:
            stocked.append((provider, generation))
        else:
            _remember(client, provider, generation)
    if not stocked:
        return failures, late
    try:
        batched = client.reshape_inventories(
            {p.uuid: (g, p.inventories) for p, g in stocked})
    except exception.PlacementError as exc:
        # Nothing was written (a reshape is one transaction): one by one,
        # against the same generations.
        LOG.info('Setting the inventories of %d new providers at once '
                 'failed (%s); setting them one by one.', len(stocked), exc)
        batched = False
    if batched:
        _remember_tree(client, cn_uuid, [p for p, _g in stocked])
        return failures, late
    for provider, generation in stocked:
        try:
            _remember(client, provider, client.set_inventories(
                provider.uuid, provider.inventories, generation,
                reread=False))
        except placement_client.GenerationConflict:
            late.add(provider.uuid)
        except exception.PlacementError as exc:
            failures.append(exc)
    return failures, late


def _remember_tree(client, cn_uuid, providers):
    """Remember the generations of ``providers`` as the tree lists them;
    if it cannot be listed they stay unknown (checked at their next
    sync)."""
    try:
        generations = _by_uuid(client.list_tree(cn_uuid))
    except exception.PlacementError as exc:
        LOG.info('Could not read back the providers of %s: %s', cn_uuid,
                 exc)
        generations = {}
    for provider in providers:
        _remember(client, provider,
                  generations.get(provider.uuid, {}).get('generation'))


def _write_provider(client, provider, generation):
    generation, bridged = _set_inventories(client, provider, generation)
    generation = client.set_traits(provider.uuid, provider.traits,
                                   generation, reread=False)
    _remember(client, provider, None if bridged else generation)


def _check_provider(client, provider, listed=None):
    """Read inventories and traits; write only what differs.  True when
    something was written.  ``listed``: the generation the provider had
    before its row was read; GenerationConflict when it has moved on
    since (the row may then be older than what Placement holds)."""
    wrote = bridged = False
    generation, inventories = client.get_inventories(provider.uuid)
    _still(provider, listed, generation)
    if provider_tree.inventories_differ(provider.inventories, inventories):
        written, bridged = _set_inventories(client, provider, generation,
                                            inventories)
        wrote = written != generation
        if wrote and not bridged:
            LOG.info('Repaired the inventory of provider %s (%s)',
                     provider.name, provider.uuid)
        generation = written
    listed = generation
    generation, traits = client.get_traits(provider.uuid)
    _still(provider, listed, generation)
    if traits != set(provider.traits):
        LOG.info('Repairing the traits of provider %s (%s)', provider.name,
                 provider.uuid)
        generation = client.set_traits(provider.uuid, provider.traits,
                                       generation, reread=False)
        wrote = True
    _remember(client, provider, None if bridged else generation)
    return wrote


def _set_inventories(client, provider, generation, actual=None):
    """Write the provider's inventories against ``generation``; returns
    (the generation now, whether they were bridged).

    Placement refuses to drop a resource class allocations hold (the
    card in the slot was replaced by one of another kind while an
    instance holds the old class): the old class is then kept, reserved
    whole, with the new one reserved too (``provider_tree.bridged``),
    and the traits are written after as always, so the provider never
    offers what the slot no longer holds.  A bridged provider's
    generation is not remembered: every later sync, and the reconcile,
    compare it, and the first after the allocations end writes what the
    rows say.  ``actual``: its inventories as just read at
    ``generation``, if the caller has them."""
    try:
        return client.set_inventories(provider.uuid, provider.inventories,
                                      generation, reread=False), False
    except placement_client.InventoryInUse:
        pass
    if actual is None:
        read, actual = client.get_inventories(provider.uuid)
        _still(provider, generation, read)
    held = {rc for allocation in
            client.get_allocations(provider.uuid).values()
            for rc, used in allocation['resources'].items() if used}
    inventories = provider_tree.bridged(provider.inventories, actual, held)
    if inventories is provider.inventories:
        # The allocations ended since the refusal: write it again.
        return client.set_inventories(provider.uuid, inventories,
                                      generation, reread=False), False
    if not provider_tree.inventories_differ(inventories, actual):
        LOG.debug('Provider %s (%s) still keeps resource class(es) %s '
                  'reserved for the allocations holding them',
                  provider.name, provider.uuid,
                  ', '.join(sorted(set(actual) - set(provider.inventories))))
        return generation, True
    LOG.warning('Provider %s (%s): allocations hold resource class(es) '
                '%s, which its deployable no longer has (a card of another '
                'kind in the slot?); keeping them reserved whole, and '
                'reserving %s, until those allocations end.',
                provider.name, provider.uuid,
                ', '.join(sorted(set(inventories) -
                                 set(provider.inventories))),
                ', '.join(sorted(provider.inventories)) or 'nothing new')
    return client.set_inventories(provider.uuid, inventories, generation,
                                  reread=False), True


def _still(provider, expected, generation):
    if expected is not None and generation != expected:
        raise placement_client.GenerationConflict(uuid=provider.uuid,
                                                  attempts=1)


def _remove_provider(client, rp_uuid):
    """Delete the provider; False when allocations hold it, which then
    keep it, reserved whole."""
    removed = True
    try:
        client.delete_provider(rp_uuid)
    except placement_client.ProviderInUse:
        # Allocated after we looked: keep it unschedulable; the reconcile
        # deletes it once the allocations are released.
        LOG.warning('Provider %s still has allocations; reserving it '
                    'whole until they are released.', rp_uuid)
        generation, inventories = client.get_inventories(rp_uuid)
        blocked = {rc: dict(inv, reserved=inv['total'])
                   for rc, inv in inventories.items()}
        client.set_inventories(rp_uuid, blocked, generation)
        removed = False
    _forget_generation(client, rp_uuid)
    return removed


def held_providers(conf, rp_uuids):
    """The providers among ``rp_uuids`` with allocations.  When Placement
    cannot say, all of them: hardware is never pulled from under a
    possibly running instance."""
    client = placement_client.get_client(conf)
    try:
        return {rp for rp in rp_uuids if client.get_allocations(rp)}
    except exception.PlacementError as exc:
        LOG.warning('Cannot read allocations (%s); keeping %d vanished '
                    'deployable(s) until the reconcile can check.', exc,
                    len(rp_uuids))
        return set(rp_uuids)


# -- a retired host forgotten (cyborg.conductor.hosts) -----------------------

def host_removal(conf, context, host, rp_uuids):
    """What forgetting ``host`` removes from Placement: the providers of
    its deployables (``rp_uuids``) and those under its compute node
    provider that cyborg owns and no deployable of any host explains
    (left behind; the reconcile would delete them too).  Returns (their
    uuids, deepest first: the order to delete them in; {provider uuid:
    name} of those Placement has; {provider uuid: [consumer uuids]} of
    those allocations hold)."""
    client = placement_client.get_client(conf)
    wanted = {rp for rp in rp_uuids if rp}
    tree = {}
    cn_uuid = host.get('compute_rp_uuid')
    if cn_uuid:
        try:
            tree = _by_uuid(client.list_tree(cn_uuid))
        except placement_client.ProviderNotFound:
            tree = {}
    if tree:
        owned = {p['uuid'] for p in client.list_tree(
            cn_uuid, required=[provider_tree.OWNER_TRAIT])} - {cn_uuid}
        wanted |= owned - deployable_db.providing(context, owned - wanted)
    depth = {rp: _depth(tree, rp) for rp in wanted}
    ordered = sorted(wanted, key=lambda rp: (-depth[rp], rp))
    held = {}
    for rp_uuid in ordered:
        consumers = client.get_allocations(rp_uuid)
        if consumers:
            held[rp_uuid] = sorted(consumers)
    names = {rp: tree[rp]['name'] for rp in ordered if rp in tree}
    return ordered, names, held


def _depth(tree, rp_uuid):
    """How deep ``rp_uuid`` hangs in ``tree`` (its compute node's, as
    listed): 1 for a child of the root, and for one not listed."""
    depth, parent = 1, tree.get(rp_uuid, {}).get('parent_provider_uuid')
    while parent in tree and tree[parent].get('parent_provider_uuid'):
        depth += 1
        parent = tree[parent]['parent_provider_uuid']
    return depth


def remove_providers(conf, rp_uuids):
    """Delete these providers, in this order (``host_removal``'s);
    returns those kept: allocations came to hold one since they were
    read, and keep it reserved whole until they end."""
    client = placement_client.get_client(conf)
    return [rp_uuid for rp_uuid in rp_uuids
            if not _remove_provider(client, rp_uuid)]


# -- the periodic reconcile ---------------------------------------------------

def reconcile_all(conf, context):
    """Periodic job: repair every host's providers (see periodics), and
    forget what this process remembers of hosts gone
    (``_forget_gone``)."""
    client = placement_client.get_client(conf)
    # Read before the listing (see _forget_gone).
    remembered = _remembered_entries(client), _remembered_hosts(client)
    listed = host_db.list_all(context)
    _forget_gone(client, listed, *remembered)
    repaired = 0
    for host in listed:
        try:
            reconcile_host(conf, context, host['hostname'],
                           host['report_digest'],
                           trust_memory=host['placement_synced'])
            repaired += 1
        except Exception:
            LOG.exception('Reconciling Placement for host %s failed',
                          host['hostname'])
    return repaired


def _forget_gone(client, listed, generations, hostnames):
    """Drop what this process remembered of hosts that ``listed`` (every
    host row, read after what was remembered was read) no longer holds:
    forgotten, maybe through another conductor, which alone drops its
    own memory of them (``forget_hosts``).  ``generations``: the
    providers remembered then (``_remembered_entries``), those under no
    listed host's compute node go; a provider deleted under a listed one
    goes at the host's reconcile (``sync_host``).  ``hostnames``: those
    any memory of hosts held then.

    Only what was remembered before the listing goes, so a host or
    provider that comes meanwhile is kept.  One recorded again between
    the listing and this drop (a host forgotten, then reporting anew)
    may lose its entry: that costs a compare of its providers at its
    next sync, or a WARNING said again; a benign race, left so."""
    nodes = {host['compute_rp_uuid'] for host in listed}
    _forget_entries(client, {rp: entry for rp, entry in generations.items()
                             if entry[0] not in nodes})
    gone = hostnames - {host['hostname'] for host in listed}
    if gone:
        for _hostnames, forget in _HOST_MEMORIES:
            forget(client, gone)


def reconcile_host(conf, context, hostname, digest=None,
                   trust_memory=False):
    """Drop gone deployables whose allocations ended, then check every
    provider of the host and delete orphans.  True when in sync.

    The serial and whether the host is synced are read in one row, before
    the rows the sync writes from: memory is trusted only if the host was
    synced at that serial (``trust_memory`` as the caller listed it may
    be older than a change whose own sync failed)."""
    host = host_db.get(context, hostname)
    serial = host['sync_serial'] if host else None
    trust_memory = trust_memory and bool(host and host['placement_synced'])
    removed, dropped = _drop_released(conf, context, hostname,
                                      inventory_db.gone(context, hostname))
    if dropped is not None:
        # The drop marked the host unsynced: its serial is ours now.
        was_synced, serial = dropped
        trust_memory = trust_memory and was_synced
    cn_uuid = sync_host(conf, context, hostname, touched=None,
                        removed=removed, remove_orphans=True,
                        trust_memory=trust_memory)
    return _mark_synced(context, hostname, digest, cn_uuid, serial)


def drop_released_gone(conf, context):
    """Periodic: remove the deployables kept as gone (their hardware
    vanished) whose allocations ended, and their providers, soon after
    Nova releases them, rather than at the next full reconcile; and the
    lost devices left with no deployable.  One query when nothing is
    gone.  Returns how many deployables were removed.  A host that
    fails (Placement down) is logged and left to the next run; the
    others are still done."""
    by_host = {}
    for row in inventory_db.gone(context):
        by_host.setdefault(row['hostname'], []).append(row)
    dropped = 0
    for hostname, rows in by_host.items():
        try:
            removed, after = _drop_released(conf, context, hostname, rows)
        except Exception:
            LOG.exception('Removing the vanished hardware of host %s '
                          'failed', hostname)
            continue
        if after is not None:
            # A failed sync leaves the host unsynced (the drop marked it)
            # for the next report or the reconcile.
            was_synced, serial = after
            sync_after_report(conf, context, hostname,
                              Touched(set(), removed), None,
                              trust_memory=was_synced, serial=serial)
        dropped += len(removed)
    return dropped


def _delete_gone_in(context, hostname, deployables, devices):
    """``inventory_db.delete_gone`` under the host's lock, as every writer
    of a host's rows: a report bringing the hardware back (another
    conductor's) either commits first, and the rows are no longer gone,
    or finds them deleted and adds them anew; never are rows a report
    has just brought back deleted under it.

    Returns (the uuids deleted, None or, when deployables were: (whether
    the host was synced before, its ``sync_serial`` after)).  Deleting
    deployables marks the host unsynced in the same transaction, so that
    if their providers' removal fails the host is not taken as synced."""
    host = host_db.lock(context, hostname)
    deleted = inventory_db.delete_gone(context, deployables, devices)
    if host is None or not set(deleted) & set(deployables):
        return deleted, None
    host_db.update(context, hostname, placement_synced=False)
    return deleted, (bool(host['placement_synced']),
                     host_db.sync_serial(context, hostname))


def _drop_released(conf, context, hostname, gone):
    """Delete those of the host's ``gone`` rows (``inventory_db.gone``)
    that nothing keeps: a deployable whose provider no allocation holds,
    a lost device none of whose deployables is kept, either (for
    hardware that vanished while not healthy, or in a status an operator
    gave it) once ``health_machine.remembered`` no longer keeps it.
    Returns (the providers of the deployables deleted, None or (whether
    the host was synced before, its ``sync_serial`` after the delete
    marked it unsynced))."""
    client = placement_client.get_client(conf)
    settings = health_machine.Settings.from_conf(conf)
    now = clock_db.utcnow()
    unkept = [row for row in gone if not health_machine.remembered(
        health_machine.Record.from_row(row), now, settings)]
    released = {row['uuid'] for row in unkept
                if row['kind'] == 'deployable'
                and not client.get_allocations(row['rp_uuid'])}
    # A lost device goes with the last of its deployables (all gone).
    kept = {row['device_uuid'] for row in gone
            if row['kind'] == 'deployable' and row['uuid'] not in released}
    devices = [row['uuid'] for row in unkept
               if row['kind'] == 'device' and row['uuid'] not in kept]
    if not released and not devices:
        return set(), None
    deleted, after = db_api.write_retrying(
        context, _delete_gone_in, context, hostname, sorted(released),
        devices)
    deleted = set(deleted)
    LOG.info('Removed %d deployable(s) and %d device(s) of host %s whose '
             'hardware went away and that nothing keeps any more.',
             len(deleted & released), len(deleted - released), hostname)
    return {row['rp_uuid'] for row in gone if row['uuid'] in released
            and row['uuid'] in deleted}, after
