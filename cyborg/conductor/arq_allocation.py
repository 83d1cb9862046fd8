"""Standalone allocation: an ARQ claimed and bound without Nova
(``POST /v2/accelerator_requests/{uuid}/allocate``, microversion 2.6).

For consumers other than instances (a Kubernetes pod, a batch job): the
ARQ's allocation is the Placement consumer (below), and the ARQ's
``consumer_id`` and ``consumer_type`` say who holds it.  One call, in
order:

1. **Start.**  One transaction moves the ARQ from Initial or Unbound to
   BindStarted (a guarded UPDATE: of two allocates of one ARQ, one gets
   409) and records the consumer and the bind's identity (``bind_id``).
   A request refused here writes nothing.
2. **Claim.**  Placement is asked for allocation candidates for the ARQ's
   share of its profile group (``request_query``: one unit of the group's
   resource class on a provider with the group's required traits and
   none of its forbidden ones, optionally on one host), and the first is
   claimed with consumer generation null, the bind's identity as
   Placement consumer (``consumer_of``).  Placement decides races: of
   two claims for the last unit, one gets 409 and tries the next
   candidate, a bounded number of times (``MAX_CLAIMS``), then asks
   again (``ROUNDS``); none left is a 409 naming what was asked, and
   claims that kept losing while Placement still offered candidates are
   a 409 saying so (try again), not that none is free.
3. **Bind.**  The deployable of the claimed provider gives its attach
   handle through the bind machinery of ``arq_binding`` (FPGA programming
   and mdevs included), ending Bound.  No Nova event: there is no
   instance.

Any failure after step 1 releases the claim and puts the ARQ back as it
was (its state before, no consumer), so a refused allocate leaves nothing
behind and may be tried again.  A delete or unbind of the ARQ records the
release of the allocation's claim in the transaction that moves the ARQ
(``owe_claim``) and releases it once that has committed
(``release_moved``, through ``arq_binding.release_allocations``): a
conductor that dies in between, or Placement away, leaves the record to
``release_left_claims``.  A conductor that dies half-way through an
allocation leaves the ARQ in BindStarted, which ``fail_stuck`` fails once
its deadline has passed (recorded by step 1: ``[DEFAULT]bind_timeout``
of the conductor carrying it after its start), then releasing the claim
(``release_failed``: failed first, so that an allocation only slow cannot
end Bound after its claim was released).

Each allocation claims under a Placement consumer of its own, never used
by another claim: its bind's identity, which is the ARQ's uuid for the
ARQ's first bind (so an ARQ allocated once has its own uuid as consumer)
and a fresh uuid for every later one.  A shared consumer could not keep
two allocations' claims apart: Placement deletes a consumer that holds
nothing, and a claim under it starts it over at the same generation, so a
release still on its way (read, checked, then overtaken by another
release, an unbind, a new allocation and its claim) took the newer claim.
Every release is ``release_claim``: the bind's consumer, emptied at the
consumer generation read with what it holds; and the ARQ's own uuid,
released only once no bind of its own uses it (a claim an allocation made
before consumers were per bind, or one its first allocation left).

A delete or unbind may run its release before this allocation's claim
lands in Placement; the allocation then finds its ARQ gone or moved (or
failed by the stuck-bind check) and releases the claim itself.  Where
Placement cannot be reached to do so, no ARQ row in BindStarted holds the
claim any more (the stuck-bind periodic works on those rows): the
allocation's consumer is recorded (``placement_releases``), as the
stuck-bind check records the ARQ of each allocation it fails, in the
transaction that fails it.  ``release_left_claims``, which ``fail_stuck``
runs, releases it once Placement answers: an allocation's own consumer
as it is, the ARQ's uuid once the ARQ is gone, in no bind or BindFailed
(or the ARQ's next allocation, before it claims).  So is the consumer of
a claim whose answer was lost: Placement may still make it after the
allocation's undo read the consumer.

The call is synchronous: the API answers once the ARQ is Bound.  A profile
that programs an FPGA can take longer than ``[api]conductor_timeout``;
the allocation still completes, and the ARQ shows its outcome.
"""

import json
import re
import uuid as uuidlib

from oslo_db import exception as db_exc
from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import states
from cyborg.conductor import arq_binding
from cyborg.db import api as db_api
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import clock as clock_db
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import placement_releases as release_db
from cyborg.objects import device_profiles as profile_objects
from cyborg.placement import client as placement_client
from cyborg.placement import provider_tree

LOG = logging.getLogger(__name__)

# The request group's suffix in Placement's query (1.33: any string of up
# to 64 of [a-zA-Z0-9_-]), named as Nova names a profile group's.
SUFFIX = '_device_profile'
# Candidates asked for at a time, claims tried in all, rounds of asking.
CANDIDATES = 5
MAX_CLAIMS = 10
ROUNDS = 3
# Placement's consumer types: upper case, digits and underscores.
_CONSUMER_TYPE = re.compile(r'[^A-Z0-9_]')


def request_query(group, compute_rp_uuid=None):
    """Placement's ``GET /allocation_candidates`` parameters for ONE unit
    of a device profile ``group`` (each ARQ is one unit of its group),
    or a 400 when the group cannot be served that way.

    ``resources:<RC>`` gives the resource class; ``trait:<T>: required``
    and ``forbidden`` become the group's required traits and ``!T``;
    ``compute_rp_uuid`` keeps the candidates in that host's tree.  Remote
    pools' sharing providers are left out: what they offer is bound to an
    instance's host, which a standalone allocation has not.
    """
    # A class asked for 0 times is not asked for (as quotas count it).
    classes = sorted(rc for rc, amount in
                     profile_objects.resource_amounts(group).items()
                     if amount > 0)
    if len(classes) != 1:
        raise exception.Invalid(
            reason='standalone allocation needs a profile group that asks '
                   'for exactly one resource class (one device provider '
                   'offers one); this group asks for %s'
                   % (', '.join(classes) or 'none'))
    # Every provider cyborg reports carries it: an allocation never lands
    # on a provider some other service made.
    required = {provider_tree.OWNER_TRAIT}
    forbidden = {states.SHARES_VIA_AGGREGATE}
    for key, value in group.items():
        if key.startswith('trait:'):
            trait = key.split(':', 1)[1]
            (required if value == 'required' else forbidden).add(trait)
    both = required & forbidden
    if both:
        raise exception.Invalid(reason='the profile group both requires '
                                       'and forbids %s' % sorted(both)[0])
    query = {'resources' + SUFFIX: '%s:1' % classes[0],
             'required' + SUFFIX: ','.join(
                 sorted(required) + ['!' + t for t in sorted(forbidden)]),
             'limit': CANDIDATES}
    if compute_rp_uuid:
        query['in_tree' + SUFFIX] = compute_rp_uuid
    return query


def placement_consumer_type(consumer_type):
    """The free-form ``consumer_type`` as a Placement consumer type
    (``k8s-pod`` -> ``K8S_POD``), so Placement's usages can be read by
    kind of consumer."""
    return _CONSUMER_TYPE.sub('_', consumer_type.upper())[:255]


def allocate(conf, context, arq_uuid, consumer_id, consumer_type,
             hostname=None):
    """Claim and bind ``arq_uuid`` for a consumer; returns ``{'uuid',
    'device_rp_uuid', 'hostname'}`` once it is Bound.  Raises a 4xx
    CyborgException, leaving the ARQ as it was, when it cannot."""
    from cyborg.placement import client as placement_client

    started = clock_db.utcnow()
    deadline = arq_binding.deadline_of(conf, started)
    job = db_api.write_retrying(context, _start, context, arq_uuid,
                                consumer_id, consumer_type, hostname,
                                started, conf.host, conf.bind_timeout)
    placement = placement_client.get_client(conf)
    claimed = None
    try:
        if job['owed']:
            _release_owed(placement, context, job)
        claimed = _claim(placement, context, job)
        _bind(conf, context, job, claimed, deadline)
    except (exception.CyborgException, arq_binding._Lost) as e:
        _undo(placement, context, job, claimed, e)
        raise
    except Exception as e:
        # An agent that failed or timed out (programming, mdev).
        _undo(placement, context, job, claimed, e)
        raise exception.BindFailed(
            reason=arq_binding._reason(e, job)) from e
    LOG.info('Accelerator request %s allocated to %s %s on %s (provider '
             '%s, Placement consumer %s)', arq_uuid, consumer_type,
             consumer_id, job['hostname'], claimed,
             consumer_of(arq_uuid, job['bind_id']))
    return {'uuid': arq_uuid, 'device_rp_uuid': claimed,
            'hostname': job['hostname']}


def _start(context, arq_uuid, consumer_id, consumer_type, hostname, now,
           owner, bind_timeout):
    """Validate, then BindStarted with the consumer, the conductor
    carrying it out (``owner``: one that starts again fails it at once)
    and its ``bind_timeout`` (the allocation's deadline is ``now`` plus
    that, the stuck-bind check's too) recorded; the job."""
    rows = arq_db.get_to_change(context, [arq_uuid])
    row = rows[0] if rows else None
    if row is None or not arq_binding._visible(context, row):
        raise exception.ARQNotFound(uuid=arq_uuid)
    if row.state not in arq_binding.BIND_FROM:
        raise exception.Conflict(
            reason=f'accelerator request {arq_uuid} is {row.state}; only '
                   f'an Initial or Unbound one can be allocated')
    group = json.loads(row.profile_json)[row.device_profile_group_id]
    compute_rp_uuid = None
    if hostname is not None:
        host = host_db.get(context, hostname)
        if host is None or not host.get('compute_rp_uuid'):
            raise exception.Invalid(
                reason=f'host {hostname} has no accelerators in Placement')
        compute_rp_uuid = host['compute_rp_uuid']
    query = request_query(group, compute_rp_uuid)
    values = {'consumer_id': consumer_id, 'consumer_type': consumer_type,
              'bind_started_at': now, 'bind_timeout': bind_timeout,
              'bind_owner': owner, 'bind_failure_reason': None}
    # The ARQ's first bind (none ever started: no bind_owner) is named by
    # the ARQ's uuid, any later one by a fresh uuid: the name is the
    # allocation's Placement consumer, which no other claim may use.
    for bind_id, where in ((arq_uuid, {'attach_handle_id': None,
                                       'bind_owner': None}),
                           (str(uuidlib.uuid4()), {'attach_handle_id': None})):
        if arq_db.transition(context, arq_uuid, states.BIND_STARTED,
                             arq_binding.BIND_FROM,
                             dict(values, bind_id=bind_id), where=where):
            break
    else:
        raise exception.Conflict(
            reason=f'accelerator request {arq_uuid} is already being '
                   f'bound')
    return {'uuid': arq_uuid, 'bind_id': bind_id,
            'owed': release_db.owes(context, arq_uuid),
            'previous_state': row.state, 'group': group,
            'query': query, 'project_id': row.project_id,
            'consumer_id': consumer_id, 'consumer_type': consumer_type,
            'instance_uuid': None, 'hostname': hostname,
            'notice': {'device_profile_name': row.device_profile_name,
                       'device_profile_group_id':
                           row.device_profile_group_id,
                       'project_id': row.project_id}}


def _wanted(query):
    wanted = query['resources' + SUFFIX]
    traits = query['required' + SUFFIX]
    return f'{wanted} with traits {traits}' + (
        f" in the tree of {query['in_tree' + SUFFIX]}"
        if 'in_tree' + SUFFIX in query else '')


def consumer_of(arq_uuid, bind_id):
    """The Placement consumer the standalone allocation ``bind_id`` of
    ARQ ``arq_uuid`` claims under: the bind's identity (the ARQ's uuid
    for its first bind); the ARQ's uuid for an ARQ bound before binds had
    an identity (``bind_id`` None)."""
    return bind_id or arq_uuid


def _release_owed(placement, context, job):
    """An earlier allocation of the ARQ left a claim in Placement under
    the ARQ's own uuid (its release recorded in ``placement_releases``
    under that uuid): release it before ours is made, and forget it.
    The records of later allocations' consumers, and the failed binds'
    the stuck-bind check recorded, are released by their own ways: an
    ARQ enters a bind only after its unbind released its failed one."""
    _release_own_uuid(placement, context, job['uuid'], job['bind_id'])
    db_api.write_retrying(context, release_db.forget, context, job['uuid'])


def _release_left_over(placement, context, job):
    """A claim refused (409): True when it was the ARQ's own consumer
    that holds a claim already (one an earlier allocation left: it is
    released, and the claim may be tried again), not someone taking the
    capacity.  Only the ARQ's first allocation claims under the ARQ's
    uuid, which allocations made before consumers were per bind used;
    a later one's consumer is new, and holds nothing before its claim.
    Ours is not made yet, and the ARQ is this allocation's (or
    ``_Lost``): what the consumer holds is an earlier one's."""
    if job['bind_id'] != job['uuid']:
        return False
    claim = placement.get_claim(job['uuid'])
    if not claim['allocations']:
        return False
    if arq_binding.in_another_bind(context, job['uuid'], job['bind_id']):
        raise arq_binding._Lost()
    LOG.info('Accelerator request %s still held a claim of an earlier '
             'allocation; releasing it', job['uuid'])
    _release_own_uuid(placement, context, job['uuid'], job['bind_id'],
                      claim=claim)
    db_api.write_retrying(context, release_db.forget, context, job['uuid'])
    return True


def _claim(placement, context, job):
    """Claim one candidate for the ARQ; its provider uuid, NoCandidate
    when Placement offers none, or a Conflict when the claims kept being
    refused (``_claims_refused``).  The consumer is the bind's identity
    (``consumer_of``): a claim of an earlier allocation of the ARQ, or a
    release of one still on its way, never meets it."""
    attempts = lost = left_over = 0
    tried = set()
    for _round in range(ROUNDS):
        try:
            candidates = placement.allocation_candidates(job['query'])
        except exception.PlacementError as e:
            unknown = placement_client.unknown_names(e)
            if unknown is None:
                raise
            # No provider can have a trait or resource class Placement
            # has never heard of: nothing matches.
            raise exception.NoCandidate(uuid=job['uuid'],
                                        wanted=_wanted(job['query']),
                                        reason=unknown) from e
        fresh = [c for c in candidates
                 if json.dumps(c, sort_keys=True) not in tried]
        if not candidates:
            raise exception.NoCandidate(uuid=job['uuid'],
                                        wanted=_wanted(job['query']),
                                        reason='Placement offers none')
        for allocations in fresh or candidates:
            tried.add(json.dumps(allocations, sort_keys=True))
            while True:
                attempts += 1
                # From here Placement may hold a claim even where its
                # answer never comes back: _undo releases it.
                job['claim_sent'] = True
                try:
                    made = placement.claim(
                        consumer_of(job['uuid'], job['bind_id']),
                        allocations,
                        job['project_id'] or context.project_id or 'cyborg',
                        context.user_id or 'cyborg',
                        placement_consumer_type(job['consumer_type']))
                except exception.PlacementError:
                    # Placement may make it after _undo reads the
                    # consumer: _undo records it then.
                    job['claim_unanswered'] = True
                    raise
                if made:
                    return next(iter(allocations))
                # Refused (409): the capacity went to someone else, or
                # (the ARQ's uuid, its first allocation's) the consumer
                # still holds an earlier allocation's claim.
                ours = _release_left_over(placement, context, job)
                if ours:
                    left_over += 1
                else:
                    lost += 1
                if attempts >= MAX_CLAIMS:
                    raise _claims_refused(job, lost, left_over)
                if not ours:
                    break       # the next candidate
    raise _claims_refused(job, lost, left_over)


def _claims_refused(job, lost, left_over):
    """The 409 for claims Placement kept refusing while it still offered
    candidates: ``lost`` to other consumers claiming the same units at
    the same time, ``left_over`` for an earlier claim of the ARQ's own
    consumer still there.  Not ``NoCandidate`` ("No free accelerator"):
    Placement offered some at the last asking (where it offers none,
    ``_claim`` says so), and a later try may well get one."""
    refused = []
    if lost:
        refused.append(f'{lost} lost to other consumers claiming the '
                       f'same accelerators at the same time')
    if left_over:
        refused.append(f'{left_over} refused while an earlier claim of '
                       f'this request held its consumer')
    return exception.Conflict(
        reason=f"accelerator request {job['uuid']} could not be claimed: "
               f"{'; '.join(refused)}; try again")


def _bind(conf, context, job, rp_uuid, deadline):
    """Bind the ARQ to the deployable of the claimed provider."""
    targets = deployable_db.bind_targets(context, {rp_uuid})
    target = targets.get(rp_uuid)
    if target is None or target.gone or target.status != states.ENABLED:
        raise exception.BindFailed(
            reason=f'resource provider {rp_uuid}, which Placement offered, '
                   f'has no enabled device here')
    arq_binding.check_health(target, rp_uuid)
    # agent_host: whose agent makes the mdev of an MDEV handle.
    job.update(hostname=target.hostname, device_rp_uuid=rp_uuid,
               deployable_id=target.deployable_id,
               agent_host=target.hostname)
    job['notice']['deployable_uuid'] = target.deployable_uuid
    if not db_api.write_retrying(
            context, arq_db.transition, context, job['uuid'],
            states.BIND_STARTED, (states.BIND_STARTED,),
            {'hostname': target.hostname, 'device_rp_uuid': rp_uuid,
             'deployable_id': target.deployable_id},
            where={'attach_handle_id': None, 'bind_id': job['bind_id']}):
        raise arq_binding._Lost()
    try:
        handle = arq_binding._bind_one(conf, context, job['bind_id'], job,
                                       deadline)
    except exception.BindFailed as refused:
        _check_not_shared(context, target, rp_uuid, refused)
        raise
    arq_binding._notify_bound(conf, context, job, handle)


def _check_not_shared(context, target, rp_uuid, refused):
    """Say why a bind failed where the claimed provider's host shares its
    compute node provider with another host row (a host renamed before
    its old name was forgotten): the take finds none of its handles
    (``attach_handles.take``), and Placement reserves its providers
    whole (placement_sync), so only a claim made before that sync lands
    here.  Asked only once the bind failed: one query then, none on a
    bind that succeeds."""
    sharers = host_db.sharers(context, target.hostname)
    if sharers:
        raise exception.BindFailed(
            reason=f'resource provider {rp_uuid} is on host '
                   f'{target.hostname}, which shares its compute node '
                   f'with host(s) {", ".join(sharers)}: none of their '
                   f'devices is offered until the stale name is '
                   f'forgotten') from refused


def _undo(placement, context, job, claimed, error):
    """Release the claim and put the ARQ back as it was (if it is still
    ours: a delete or unbind meanwhile has its own way out).  A claim
    sent is released even where its answer was lost (``claimed`` None):
    Placement may have made it, and may make it still after this release
    read the consumer (the answer lost on the way, the request still in
    Placement): the consumer is then recorded for ``release_left_claims``
    as well, in the transaction that puts the ARQ back."""
    released = True
    if claimed is not None or job.get('claim_sent'):
        try:
            # The consumer is this allocation's alone: where the ARQ was
            # unbound and allocated again meanwhile, the newer claim is
            # under another.
            release_claim(placement, context, job['uuid'], job['bind_id'])
        except exception.PlacementError as e:
            _owe_release(context, job, e)
            released = False
    if released:
        _write_adding(context, _put_back, context, job,
                      job.get('claim_unanswered', False))
    LOG.info('Allocating accelerator request %s failed: %s', job['uuid'],
             error)
    if isinstance(error, arq_binding._Lost):
        raise exception.Conflict(reason=_lost_reason(context, job)) \
            from error


def _put_back(context, job, owe):
    """The ARQ as it was before the allocation ``job``, if still in its
    bind; with ``owe``, the consumer recorded as owed a release (whether
    the ARQ moved or not: the claim is no allocation's)."""
    arq_binding._leave(context, job['uuid'], job['previous_state'],
                       (states.BIND_STARTED,), dict(arq_binding._CLEARED),
                       bind_id=job['bind_id'])
    if owe:
        release_db.add(context, consumer_of(job['uuid'], job['bind_id']))


def _write_adding(context, fn, *args):
    """``write_retrying`` of ``fn``, which records a release: where
    another conductor recorded the same consumer at that moment, it is
    written again (the record there, adding nothing)."""
    try:
        return db_api.write_retrying(context, fn, *args)
    except db_exc.DBDuplicateEntry:
        return db_api.write_retrying(context, fn, *args)


def _lost_reason(context, job):
    """Why the ARQ left this allocation: deleted or unbound, or failed
    by the stuck-bind check (the allocation took too long, and the ARQ
    shows BindFailed rather than what the caller asked for)."""
    rows = arq_db.get_to_change(context, [job['uuid']])
    if rows and (rows[0].state, rows[0].bind_id) == (states.BIND_FAILED,
                                                     job['bind_id']):
        return (f"accelerator request {job['uuid']} was failed while it "
                f"was being allocated: it took longer than "
                f"[DEFAULT]bind_timeout")
    return (f"accelerator request {job['uuid']} was deleted or unbound "
            f"while it was being allocated")


def release_claim(placement, context, arq_uuid, bind_id):
    """Release the claim of the standalone allocation ``bind_id`` of ARQ
    ``arq_uuid`` (None: of no bind), and a claim left under the ARQ's own
    uuid; True if it released one.  PlacementError when Placement cannot
    be asked.

    The allocation's consumer is its own (``consumer_of``): no other
    claim is ever made under it, so whatever it holds is that
    allocation's, and a release landing late (overtaken by another
    release, an unbind, a new allocation of the ARQ and its claim) finds
    it empty, or holding that allocation's claim still.  The ARQ's uuid
    is the consumer of its first allocation only (and of allocations made
    before consumers were per bind): ``_release_own_uuid``."""
    released = False
    if bind_id is not None and bind_id != arq_uuid:
        released = _release_consumer(placement, bind_id)
    return _release_own_uuid(placement, context, arq_uuid,
                             bind_id) or released


def _release_consumer(placement, consumer, claim=None):
    """Empty ``consumer``, at the consumer generation read with what it
    holds (``claim``, when just read); True if it held something and this
    emptied it (a 409: it changed meanwhile, and is left as it is)."""
    if claim is None:
        claim = placement.get_claim(consumer)
    if not claim['allocations']:
        return False
    if placement.release_claim(consumer, claim):
        return True
    LOG.info('The claim of Placement consumer %s changed while it was '
             'released; it is left as it is', consumer)
    return False


def _release_own_uuid(placement, context, arq_uuid, bind_id, claim=None):
    """Release what the ARQ's own uuid holds as a consumer, on behalf of
    bind ``bind_id`` (None: of no bind); True if it released a claim.
    ``claim``: what the consumer holds, as just read.

    That consumer is the ARQ's first allocation's, whose bind is named
    by the ARQ's uuid: while the ARQ is in that bind (or in any bind but
    ``bind_id``: the claim may be an allocation's before consumers were
    per bind, in an upgrade), what it holds is left.  What it holds is
    read first, then the ARQ's bind: if the ARQ is still in ``bind_id``
    (or in none, or gone) after the read, the first allocation is over,
    and nothing claims under the uuid again.  The release is guarded by
    the consumer generation read: where the consumer changed since (409),
    it is left as it is."""
    if claim is None:
        claim = placement.get_claim(arq_uuid)
    if not claim['allocations']:
        return False
    if arq_binding.in_another_bind(context, arq_uuid, bind_id):
        LOG.info('Accelerator request %s is another allocation\'s now; '
                 'its claim is left alone', arq_uuid)
        return False
    return _release_consumer(placement, arq_uuid, claim)


def _owe_release(context, job, error):
    """The claim of ``job`` could not be released (Placement away).  An
    ARQ still in this allocation (BindStarted) keeps its consumer:
    ``fail_stuck``, a delete or an unbind releases the claim once
    Placement answers.  One that has left it (deleted or unbound
    meanwhile, its release run before our claim landed), or that the
    stuck-bind check failed meanwhile (its release done before our claim
    landed), says nothing of the claim any more: the allocation's
    consumer is recorded for ``release_left_claims`` (or, the ARQ's own
    uuid, the ARQ's next allocation, ``_release_owed``, should that come
    first)."""
    consumer = consumer_of(job['uuid'], job['bind_id'])
    try:
        rows = arq_db.get_to_change(context, [job['uuid']])
        if rows and rows[0].bind_id == job['bind_id'] and (
                rows[0].state != states.BIND_FAILED):
            LOG.warning('Could not release the claim of accelerator '
                        'request %s: %s; the stuck-bind check (or its '
                        'unbind or deletion) releases it once Placement '
                        'answers', job['uuid'], error)
            return
        db_api.write_retrying(context, release_db.add, context, consumer)
    except db_exc.DBDuplicateEntry:
        pass                    # recorded by another conductor's undo
    except Exception:  # noqa: BLE001 - the allocation's own error goes on
        LOG.exception('Could not release the claim of accelerator request '
                      '%s (%s), nor record it for a later release: release '
                      'it by hand (openstack resource provider allocation '
                      'delete %s)', job['uuid'], error, consumer)
        return
    LOG.warning('Could not release the claim of accelerator request %s, '
                'deleted, unbound or failed while it was allocated: %s; the '
                'stuck-bind check releases it once Placement answers (or '
                'the request\'s next allocation, should that come first)',
                job['uuid'], error)


def release_left_claims(conf, context):
    """Periodic (run by ``arq_binding.fail_stuck``): release the claims
    recorded (``_owe_release``, ``arq_binding``'s stuck-bind check, an
    unbind's or a delete's ``owe_claim`` whose conductor died before its
    release, or found Placement away) whose ARQ is gone, in no bind or in
    a failed one, and forget them; returns how many were settled.

    First the consumers no ARQ is named by: an allocation's own (not the
    ARQ's uuid) recorded by its undo, or the uuid of an ARQ gone.  None
    is ever claimed under again: what they hold is released as it is.
    Then those named by an ARQ that exists but is in no bind (unbound
    while its claim could not be released) or BindFailed (the stuck-bind
    check failed its allocation, Placement away): its unit stays taken
    otherwise until the ARQ is allocated again or deleted.  Each is
    released by ``release_claim`` on behalf of no bind, or of the failed
    one, so that a claim of an allocation started meanwhile is left
    alone; an ARQ in a bind by then keeps its record for that allocation
    (``_release_owed``).  The queries leave the other records out, so
    that any number of them never holds these up."""
    owed = ([(consumer, _NO_ARQ, 'its allocation ended, or its '
                                  'accelerator request was deleted')
             for consumer in release_db.owed(context)] +
            [(consumer, bind_id, 'accelerator request ' + (
                'failed' if bind_id else 'unbound'))
             for consumer, bind_id in release_db.owed_in_no_bind(context)])
    return _settle(conf, context, owed)


# ``_settle``'s bind for a consumer no ARQ is named by.
_NO_ARQ = object()


def release_failed(conf, context, rows):
    """Release the claims of the standalone allocations the stuck-bind
    check has just failed (``rows``: their ARQs as read, in the bind that
    failed), whose releases were recorded in the transactions that failed
    them, and forget the records.  Failed first, released after: released
    first, an allocation that was only slow could end Bound in between,
    holding its handle with nothing claimed in Placement.  Where Placement
    is away, the records stay for ``release_left_claims``."""
    return _settle(conf, context, [(row.uuid, row.bind_id,
                                    'accelerator request failed')
                                   for row in rows])


def owe_claim(context, arq_uuid, bind_id):
    """Record (``placement_releases``), in the caller's transaction, the
    releases owed by the claim of the standalone allocation ``bind_id``
    of ARQ ``arq_uuid``, which that transaction moves out of it (an
    unbind's or a delete's): ``release_moved`` makes them once it has
    committed, ``release_left_claims`` where the conductor died first or
    Placement could not be reached."""
    for consumer, _bind in _owed_by(arq_uuid, bind_id):
        release_db.add(context, consumer)


def _owed_by(arq_uuid, bind_id):
    """(consumer, bind) of what ``release_claim`` of the allocation
    ``bind_id`` releases, once its ARQ has left it, as
    ``release_left_claims`` settles the records: the allocation's own
    consumer (not the ARQ's uuid) as it is (``_NO_ARQ``: none claims
    under it again), and the ARQ's uuid on behalf of no bind (its first
    allocation's consumer, or an allocation's from before consumers were
    per bind; a claim of an allocation started since is left to it)."""
    owed = [(arq_uuid, None)]
    if bind_id not in (None, arq_uuid):
        owed.insert(0, (bind_id, _NO_ARQ))
    return owed


def release_moved(conf, context, rows, moved, what):
    """Release the claims of the standalone allocations whose ARQs an
    unbind or a delete has just moved out of them, their releases
    recorded by its transaction (``owe_claim``), and forget the records;
    returns how many were settled.  ``rows``: the ARQs as that
    transaction read them, ``moved``: {uuid: state before} of those it
    moved; ``what``: what became of them, for the log.

    Released after the commit, as the stuck-bind check's: released
    first, a conductor that died before the commit left the ARQ Bound,
    its attach handle taken, with nothing claimed in Placement, which
    offered the unit again.  Where the conductor dies in between, or
    Placement cannot be reached, the records stay for
    ``release_left_claims``.  An ARQ moved out of BindStarted may have
    its allocation still under way, its claim not landed yet: where this
    releases nothing, its records stay for ``release_left_claims`` too
    (the allocation's undo, finding its ARQ moved, releases that claim,
    and records it where Placement fails it: the record already there,
    forgotten now, would lose it)."""
    owed, in_flight = [], set()
    for row in rows:
        if not row.consumer_id or row.uuid not in moved:
            continue
        for consumer, bind_id in _owed_by(row.uuid, row.bind_id):
            owed.append((consumer, bind_id, what))
            if moved[row.uuid] == states.BIND_STARTED:
                in_flight.add(consumer)
    return _settle(conf, context, owed, in_flight)


def _settle(conf, context, owed, in_flight=()):
    """Release each recorded claim of ``owed``, ``(consumer, bind,
    what)``: the consumer as it is where no ARQ is named by it (bind
    ``_NO_ARQ``), else the ARQ's on behalf of ``bind`` (the failed one's,
    or None); ``what`` says why it is owed, for the log.  Forget the
    record unless the ARQ is in another bind by now, or the consumer is
    one of ``in_flight`` and held nothing.  Returns how many were
    settled."""
    if not owed:
        return 0
    placement = placement_client.get_client(conf)
    settled = 0
    for consumer, bind_id, what in owed:
        try:
            if bind_id is _NO_ARQ:
                released = _release_consumer(placement, consumer)
                bind_id = None
            else:
                released = release_claim(placement, context, consumer,
                                         bind_id)
        except exception.PlacementError as e:
            LOG.warning('Could not release the claim owed by Placement '
                        'consumer %s (%s): %s; tried again at the next '
                        'stuck-bind check', consumer, what, e)
            if getattr(e, 'status_code', 503) >= 500:
                break           # Placement away: the others would wait too
            continue
        if not released and consumer in in_flight:
            continue            # its claim may land still: the periodic's
        if not db_api.write_retrying(context, release_db.forget_settled,
                                     context, consumer, bind_id):
            continue            # allocated again: that allocation's now
        if released:
            LOG.info('Released the claim owed by Placement consumer %s '
                     '(%s)', consumer, what)
        settled += 1
    return settled
