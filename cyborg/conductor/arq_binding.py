"""The accelerator request (ARQ) state machine: create, bind, unbind, delete.

Rules (doc/source/contract.rst, "ARQ states and binding", and the
differences "A bind must agree with Placement", "A refused request writes
nothing" and "Every bind outcome reaches Nova"):

- Every state change is a guarded ``UPDATE ... WHERE state IN (allowed)``
  whose row count is checked (``arq_db.transition``); nothing reads a
  state and then writes it.  Whoever moves an ARQ out of a handle-holding
  state releases its attach handle in the same transaction, guarded on the
  handle id it read, so a handle is released exactly once.
- A bind PATCH is validated completely before anything is written; a 4xx
  writes nothing.  The ARQs then move to BindStarted in one transaction,
  except that an ARQ with nothing slow to do takes its handle and ends
  Bound in that same transaction (one commit for the whole bind; a
  conductor dying before it leaves the ARQ as it was).  One that finds
  no free handle there refuses the whole PATCH (400, nothing written):
  Nova, which takes every resolved ARQ for done, would otherwise boot
  the instance without its device.  A bind that programs an FPGA takes
  its handle there too, and is refused the same way where its
  programming would be refused at once (a function id too long for a
  Placement trait, the card being programmed by another request, or
  used by another instance while the bind surely loads another image).
  The slow work (FPGA programming,
  mdev creation, fabric attach) runs on a thread pool with
  ``[DEFAULT]bind_timeout``, its failures ending BindFailed; the batch's
  Nova events go out on the threads of ``cyborg.conductor.nova``, which
  never hold a bind worker.
- A bind for an instance that still holds ARQs (binding or bound) on
  another host is refused: Nova's compute attaches every ARQ of the
  instance it finds, the other host's devices too.
- An ARQ's final state and its Nova event are committed together; the
  batch's events go to Nova in one request once all its ARQs are resolved.
- Each bind records its conductor (``bind_owner``, ``[DEFAULT]host``).
  A conductor that dies mid-bind leaves ARQs in BindStarted: when it
  starts again, ``recover`` fails at once the binds it owned (never those
  of another conductor, which may be running them) and re-sends the Nova
  events its previous run left undelivered.  A conductor that does not
  come back is covered by the periodic ``fail_stuck``, which fails any
  bind past its deadline and tells Nova.  The deadline is the bind's
  own: its start plus the ``bind_timeout`` of the conductor that
  started it (that many seconds, written by the UPDATE that moves the
  ARQ to BindStarted, cleared by whatever moves it on), so that a
  conductor with a lower ``bind_timeout`` does not fail the binds
  another is still carrying.
- The bind's ``hostname`` is the compute node's name as Nova has it (its
  hypervisor host name): the device's host, or the name of that host's
  compute node provider in Placement.  The agent is always asked by the
  device's host.
- Serving ARQs does not depend on Placement: when Placement cannot be
  asked about the instance's allocations, that check is skipped with one
  WARNING line.
- An unbind whose mdev the agent could not remove ends in UnbindFailed
  with the reason; the ARQ keeps its handle (the mdev may still be in
  use) until an unbind succeeds or the ARQ is deleted.

Notifications (``cyborg.common.notify``, payload ``ARQPayload``) go out
after the transaction that made the change has committed, one per ARQ:
``arq.create``, ``arq.bind.end``, ``arq.bind.error`` (priority error, with
the reason), ``arq.unbind`` and ``arq.delete`` (carrying the binding the ARQ
had, and its ``previous_state``; a deleted ARQ's ``state`` is its last one,
``Deleting``).  A request refused with a 4xx writes nothing and sends
nothing.  With notifications off (the default) no payload is built.
"""

import collections
from concurrent import futures
import datetime
import functools
import json
import threading
import time
import uuid as uuidlib

import futurist
from futurist import waiters
from oslo_db import exception as db_exc
from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_utils import uuidutils

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import notify
from cyborg.common import states
from cyborg.common import timing
from cyborg.conductor import awaited
from cyborg.conductor import nova
from cyborg.conductor import quotas
from cyborg.conductor import remote_pools
from cyborg.conductor import silence
from cyborg.db import api as db_api
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import clock as clock_db
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import device_profiles as profile_db
from cyborg.db.api import placement_releases as release_db
from cyborg.db.api import remote_pools as pool_db
from cyborg.objects import accelerator_requests
from cyborg.objects import device_profiles as profile_objects
from cyborg.objects import base as objects_base
from cyborg.objects import clock as objects_clock

LOG = logging.getLogger(__name__)

# The states each transition may start from: the guards of the UPDATEs.
BIND_FROM = (states.INITIAL, states.UNBOUND)
BOUND_FROM = (states.BIND_STARTED,)
UNBIND_FROM = (states.INITIAL, states.BIND_STARTED, states.BOUND,
               states.BIND_FAILED, states.UNBIND_FAILED)
UNBIND_FAILED_FROM = (states.BIND_STARTED, states.BOUND,
                      states.UNBIND_FAILED)
# Only a bind still in progress fails (a Bound ARQ stays Bound).
BIND_FAILED_FROM = (states.BIND_STARTED,)
ANY_STATE = states.ARQ_STATES
BIND_FIELDS = ('hostname', 'device_rp_uuid', 'instance_uuid')

# What every move out of BindStarted writes: the time a bind has is
# only ever set while the ARQ is in it.  (One a conductor of the previous
# release leaves, which does not clear it, is a real bind_timeout all the
# same: the next bind is held to it from its own start, ``arq_db.stuck``.)
_ENDED = {'bind_timeout': None}

_CLEARED = {'hostname': None, 'device_rp_uuid': None, 'instance_uuid': None,
            'deployable_id': None, 'attach_handle_id': None,
            'remote_pool_id': None, 'remote_handle_id': None,
            'bind_started_at': None, 'bind_failure_reason': None,
            'bind_id': None, 'consumer_id': None, 'consumer_type': None,
            **_ENDED}

# A remote pool's handle once attached, as a bound handle is logged and
# announced.
_RemoteBound = collections.namedtuple('_RemoteBound',
                                      'uuid attach_type attach_info')
# What a bind's transaction read of a remote pool, for checking its host
# after the rollback (the pool's row is of the session that ended).
_PoolSeen = collections.namedtuple('_PoolSeen', 'id name aggregates')

_EXECUTOR = None
_LOOKUPS = None
_EXECUTOR_LOCK = threading.Lock()
# Placement lookups of allocations in flight (asked, not answered yet).
# Up to OVERLAP_LOOKUPS, a bind runs its writes while Placement answers and
# checks the answer before its commit; beyond (a boot storm, Placement
# slow), it waits for the answer before writing, holding no row lock and
# no pooled connection while Placement takes its time.
OVERLAP_LOOKUPS = 4
# Seconds an overlapping bind waits, before its commit, for answers still
# missing: Placement answers a lookup in milliseconds when well.  Later
# than that the transaction is rolled back and the bind waits outside it,
# as in a storm: a slow or hung Placement never holds a bind's locks (nor
# SQLite's write lock) for longer.
OVERLAP_WAIT = 0.25
# mdevs removed at once by one unbind or delete (an instance's vGPUs).
MDEV_REMOVALS = 8
# Seconds before the API stops waiting by which an mdev removal gives up,
# leaving the unbind or delete the time to record what happened.
MDEV_ANSWER_MARGIN = 3.0
_IN_FLIGHT = 0


class _Lost(Exception):
    """The ARQ left BindStarted under us (unbound, deleted, timed out)."""


class _Known:
    """What a bind's transaction knows from Placement, across its runs:
    the allocation lookups sent before it (``asked``, instance uuid ->
    future), whether its writes run while they are answered
    (``overlap``), and the remote pools' hosts checked so far
    (``hosts_checked``, see ``_pool_host``)."""

    def __init__(self, asked=None, overlap=False):
        self.asked = asked or {}
        self.overlap = overlap
        self.hosts_checked = set()
        # {instance uuid: [(provider, resource classes)]} of the ARQs
        # the instances hold besides those bound now (``_held_by``).
        self.held = {}


class _AskPlacementFirst(db_api.AskFirst):
    """Raised in a bind's transaction where going on would wait for
    Placement: ``ask()`` waits or asks with no transaction open, into
    ``known``, and the transaction runs again.  ``pool_hosts``:
    (_PoolSeen, host name) pairs whose host must be checked; ``late``: an
    allocation lookup had not answered within OVERLAP_WAIT (the next run
    has all the answers before it writes)."""

    def __init__(self, conf, known, pool_hosts=(), late=False):
        super().__init__()
        self.conf, self.known = conf, known
        self.pool_hosts = list(pool_hosts)
        self.late = late

    def ask(self):
        with timing.phase(timing.PLACEMENT):
            if self.late:
                self.known.overlap = False
                waiters.wait_for_all(self.known.asked.values())
            for pool, hostname in self.pool_hosts:
                remote_pools.check_host(self.conf, pool, hostname)
                self.known.hosts_checked.add(_pool_host(pool, hostname))


# -- create ---------------------------------------------------------------

def create(context, device_profile_uuid, project_id, conf=None,
           limits=None, device_profile_name=None, visible_to=None):
    """Make the ARQs of a device profile in one transaction: for group i,
    n = the sum of its ``resources:*`` amounts ARQs with group id i.

    The profile is named by uuid, or by ``device_profile_name`` among
    those the project ``visible_to`` may see (None: all): one that does
    not exist, or is not visible, is a 404 and nothing is written.

    The project's quota ``limits`` (a ``cyborg.common.quota.Limits``; by
    default read through ``conf``'s ``[quota]driver``, none without
    ``conf``) are enforced in that transaction: over a limit, 403 and
    nothing written.  With ``conf``, an ``arq.create`` notification per
    ARQ follows the commit."""
    if limits is None:
        limits = quotas.limits_for(conf, project_id)
    profile = {'uuid': device_profile_uuid, 'name': device_profile_name,
               'visible_to': visible_to}
    try:
        arqs = awaited.write(context, _create_in, context, profile,
                             project_id, limits)
    except db_exc.DBReferenceError:
        # The profile was deleted between its read and the ARQs' insert.
        raise exception.DeviceProfileNotFound(
            name=device_profile_name or device_profile_uuid)
    _notify_created(conf, context, arqs)
    return arqs


def _create_in(context, wanted, project_id, limits=None):
    # The quota lock comes first: see cyborg.db.api.quotas.
    quotas.lock(context, project_id, limits)
    profile = profile_db.get_groups(context, **wanted)
    if profile is None:
        raise exception.DeviceProfileNotFound(
            name=wanted['name'] or wanted['uuid'])
    groups = json.loads(profile.profile_json)
    quotas.check(context, project_id, groups, limits)
    now = clock_db.utcnow()
    rows = []
    for group_id, group in enumerate(groups):
        for _ in range(profile_objects.group_size(group)):
            rows.append({'uuid': str(uuidlib.uuid4()),
                         'state': states.INITIAL,
                         'device_profile_id': profile.id,
                         'device_profile_group_id': group_id,
                         'project_id': project_id, 'created_at': now})
    if not rows:
        # Profiles asking for nothing are refused at creation; one from
        # before (or from OpenStack Cyborg's database) may remain.
        raise exception.Invalid(
            reason=f'device profile {profile.name} requests no accelerator '
                   f'(none of its groups has a resources: key)')
    arq_db.create_many(context, rows)
    return [arq_dict(row, profile.name) for row in rows]


def arq_dict(values, device_profile_name):
    """An unbound ARQ as ``cyborg.objects`` reads it back (for RPC)."""
    return objects_base.to_dict(accelerator_requests.AcceleratorRequest(
        uuid=values['uuid'], state=values['state'],
        device_profile_name=device_profile_name,
        device_profile_group_id=values['device_profile_group_id'],
        project_id=values['project_id'], hostname=None, device_rp_uuid=None,
        instance_uuid=None, attach_handle_type='', attach_handle_uuid=None,
        attach_handle_info={}, created_at=values['created_at'],
        updated_at=None))


# -- bind -----------------------------------------------------------------

def bind(conf, context, bindings):
    """Start binding; returns once every ARQ is in BindStarted.

    ``bindings`` maps ARQ uuid to {hostname, device_rp_uuid,
    instance_uuid[, project_id]}.  Raises a 4xx CyborgException (and
    writes nothing) when the request cannot be honoured.
    """
    start_bind(conf, context, bindings)


def start_bind(conf, context, bindings):
    """``bind``, returning the future of the background work."""
    now = clock_db.utcnow()
    started = time.monotonic()
    deadline = deadline_of(conf, now)
    batch_id = str(uuidlib.uuid4())
    asked = _ask_allocations(conf, bindings)
    known = _Known(asked, overlap=bool(asked) and
                   _lookups_in_flight() <= OVERLAP_LOOKUPS)
    if not known.overlap:
        # A storm: Placement's answers first, outside the transaction, so
        # that no pooled connection (nor SQLite's write lock) waits on
        # them.
        with timing.phase(timing.PLACEMENT):
            waiters.wait_for_all(asked.values())
    # A bind with nothing slow to do (no programming, no mdev to make, no
    # fabric attach) takes its handle and ends Bound in the transaction
    # that validates it, before the PATCH is answered: Nova's first read
    # finds it resolved.  One that finds no free handle refuses the PATCH
    # (400, nothing written).  The rest, and the batch's Nova events, go
    # on in the background.
    jobs = awaited.write(context, _start, conf, context, bindings, now,
                         known, batch_id, deadline)
    # Every bind Bound by _start: the batch's events are those _start
    # recorded, known here without reading them back.
    recorded = ([(job['instance_uuid'], job['uuid'], 'completed')
                 for job in jobs] if all(job.get('bound') is not None
                                         for job in jobs) else None)
    with timing.phase(timing.QUICK_BINDS):
        pending = [job for job in jobs
                   if not _resolve(conf, context, batch_id, job, deadline,
                                   started, quick=True)]
    # The background work is not awaited: the PATCH is answered first.
    worker_context = cyborg_context.RequestContext.from_dict(
        context.to_dict(), answer_by=None)
    if not pending:
        # Only the events are left: to the Nova senders, never a bind
        # worker.
        return nova.deliver_later(conf, worker_context, batch_id, recorded)
    return _after_delivery(_executor(conf).submit(
        _run_batch, conf, worker_context, batch_id, pending, deadline,
        started, recorded))


def deadline_of(conf, started):
    """The deadline of a bind this conductor starts at ``started``: the
    time its work has, and which the stuck-bind check of every conductor
    holds it to (``bind_timeout`` recorded with ``bind_started_at``)."""
    return started + datetime.timedelta(seconds=conf.bind_timeout)


def _after_delivery(work):
    """A future done once the bind ``work`` and the delivery of its
    events (the future ``work`` returns) are."""
    done = futures.Future()

    def delivered(delivery):
        done.set_result(delivery.result())

    def worked(work):
        try:
            work.result().add_done_callback(delivered)
        except BaseException as e:  # noqa: BLE001 - the future holds it
            done.set_exception(e)

    work.add_done_callback(worked)
    return done


def _start(conf, context, bindings, now, known=None, batch_id=None,
           deadline=None):
    """Validate and move to BindStarted in one transaction (a 4xx rolls
    it back: nothing written); returns the jobs.  With a ``batch_id``, a
    bind with nothing slow to do goes on to Bound in the same transaction
    (its job carries the handle as ``bound``); one whose handle is an mdev
    still to be made, or that programs the card, stays BindStarted
    holding it (``handle``), as does a remote pool's bind, its fabric
    attach left to do (``remote_handle``); one that finds no free handle,
    or whose programming would be refused at once, refuses the PATCH
    (``_take_at_once``, ``_take_remote_at_once``).  With
    ``known.overlap`` the writes run while Placement answers
    ``known.asked`` and the answers are checked before the commit; else
    they are checked first.  It never waits for Placement: where it would
    (a remote pool's host not checked yet, an answer later than
    OVERLAP_WAIT) it raises _AskPlacementFirst.  ``deadline``: the
    bind's (by default ``deadline_of(conf, now)``); this conductor's
    ``bind_timeout`` is recorded on each ARQ it leaves in BindStarted."""
    known = known or _Known()
    deadline = deadline or deadline_of(conf, now)
    jobs = _validate(conf, context, bindings, known,
                     allocations=not known.overlap)
    bind_id = batch_id or str(uuidlib.uuid4())
    for job in jobs:
        # The bind's identity: its late work writes only while the ARQ
        # is still its own (not unbound and bound again meanwhile).
        job['bind_id'] = bind_id
        values = {'hostname': job['hostname'],
                  'device_rp_uuid': job['device_rp_uuid'],
                  'instance_uuid': job['instance_uuid'],
                  'deployable_id': job['deployable_id'],
                  'remote_pool_id': job.get('remote_pool_id'),
                  'bind_started_at': now, 'bind_owner': conf.host,
                  'bind_failure_reason': None, 'bind_id': bind_id}
        if job.get('project_id'):
            values['project_id'] = job['project_id']
        if (job.get('remote_pool_id') is not None
                and not pool_db.hold(context, job['remote_pool_id'])):
            raise exception.Conflict(
                reason=f"remote pool {job['remote']['pool_name']} is being "
                       f"deleted")
        remote = (_take_remote_at_once(context, job)
                  if batch_id and job.get('remote_pool_id') is not None
                  else None)
        if remote is not None:
            values['remote_handle_id'] = remote.id
        handle = _take_at_once(context, job) if batch_id else None
        state = states.BIND_STARTED
        if handle is not None:
            values['attach_handle_id'] = handle.id
            if (handle.attach_type != 'MDEV'
                    and not _needs_programming(job['group'])):
                state = states.BOUND
        values['bind_timeout'] = (conf.bind_timeout
                                  if state == states.BIND_STARTED else None)
        if not arq_db.transition(context, job['uuid'], state, BIND_FROM,
                                 values,
                                 where={'attach_handle_id': None,
                                        'remote_handle_id': None}):
            # Another PATCH got there first, or the ARQ was deleted since
            # it was read (a delete, the purge of old Initial ARQs); the
            # rollback undoes the ARQs this one already moved, and the
            # handles it took.  Whether it still exists is read locking
            # (as last committed: MariaDB's plain read would see this
            # transaction's snapshot, the ARQ in it).
            if not arq_db.lock(context, [job['uuid']]):
                raise exception.ARQNotFound(uuid=job['uuid'])
            raise exception.Conflict(
                reason=f"accelerator request {job['uuid']} is already "
                       f"being bound")
        if state == states.BOUND:
            nova.record(conf, context, batch_id,
                        [(job['instance_uuid'], job['uuid'], 'completed')],
                        _due(conf, deadline))
            job['bound'] = handle
        elif handle is not None:
            job['handle'] = handle
        if remote is not None:
            job['remote_handle'] = remote
    if known.overlap:
        with timing.phase(timing.PLACEMENT):
            late = waiters.wait_for_all(known.asked.values(),
                                        OVERLAP_WAIT).not_done
        if late:
            raise _AskPlacementFirst(conf, known, late=True)
        # A refusal rolls back everything written above.
        _check_allocations(jobs, known.asked, known.held)
    return jobs


def _take_at_once(context, job):
    """The handle of a bind, taken in the transaction that starts it (a
    PCI handle, an mdev's still to be made, that of a card the bind
    programs); None for a remote pool's bind (``_take_remote_at_once``
    takes its handle).  No free handle raises BindFailed, which rolls
    the PATCH back: 400, nothing written for any of its ARQs; so does a
    programming that would be refused at once (``_refuse_programming``).
    Nova's compute takes every resolved ARQ for done without reading its
    state, so an ARQ ending BindFailed under a 202 booted the instance
    without its device; a refused PATCH makes Nova end the build instead
    (and delete the ARQs), as OpenStack Cyborg's refusal does.  So does
    a card another instance uses where the programming surely loads
    another image (``_refuse_in_use``).  What a programming finds only
    later (Glance, the agent, the card in use where only Glance can tell
    whether its image is loaded) still fails the bind after the 202."""
    if job.get('remote_pool_id') is not None:
        return None
    card = (_refuse_programming(context, job)
            if _needs_programming(job['group']) else None)
    handle = _take(context, job)
    if handle is None:
        raise _no_free_handle(job)
    if card is not None:
        _refuse_in_use(context, job, card)
    return handle


def _take_remote_at_once(context, job):
    """A free handle of the job's remote pool, taken in the transaction
    that starts the bind (the ARQ holds it from BindStarted on, so that
    the stuck-bind check, an unbind or a delete frees it); the fabric
    attach stays in the background (``_bind_remote``).  None free raises
    BindFailed, which refuses the PATCH (400, nothing written), as
    ``_take_at_once`` does: taken in the background, the bind ended
    BindFailed right after the 202, before Nova's first read, and Nova
    booted the instance without its device."""
    handle = pool_db.take(context, job['remote_pool_id'])
    if handle is None:
        raise _no_free_remote(job)
    return handle


def _no_free_remote(job):
    return exception.BindFailed(
        reason=f"no free handle in remote pool "
               f"{job['remote']['pool_name']}")


def _refuse_programming(context, job):
    """BindFailed, with the reason the programming would give, where it
    would be refused before anything slow: a group naming both an image
    and a function, or a function id too long for a Placement trait
    (``programming.group_problem``), or the card marked by
    another request's programming (as ``programming.program`` reads it).
    Not a mark on the deployable itself while a programming of it runs
    in this conductor: the bind's programming waits for that one
    (``programming.programming_here``), then reads the card again (the
    image it wants loaded already, or not).  Returns the card as read
    (``deployable_db.card_for_bind``, share-locked: a mark committed
    before the bind's take is seen whatever the transaction's snapshot)
    for ``_refuse_in_use``; None where the card is about to change
    under that programming here."""
    from cyborg.conductor import programming
    problem = programming.group_problem(job['group'])
    if problem is not None:
        raise exception.BindFailed(reason=problem)
    card = deployable_db.card_for_bind(context, job['deployable_id'])
    if card is None or card.marked is None:
        return card
    uuid = job['notice']['deployable_uuid']
    if card.marked[0] == uuid and programming.programming_here(
            job['deployable_id']):
        return None
    raise exception.BindFailed(
        reason=programming.being_programmed(uuid, card.marked))


def _refuse_in_use(context, job, card):
    """BindFailed where the bind's programming would find its card in
    use (``programming._check_unused``): a handle of the card taken
    besides the one this bind just took (another instance's; the held
    count of ``programming._held``, read in this transaction:
    ``handle_db.count_taken``), and an image to load that the card
    surely does not run (``programming.loads_another_image``): the
    programming would not find it loaded.  Where only Glance can tell
    which image it loads, the programming decides, after the 202."""
    from cyborg.conductor import programming
    if handle_db.count_taken(context, card.deployable_ids) <= 1:
        return
    if programming.loads_another_image(context, job['deployable_id'],
                                       job['group'], card.bitstream_id):
        raise exception.BindFailed(reason=str(programming.in_use(
            job['notice']['deployable_uuid'])))


def _no_free_handle(job):
    return exception.BindFailed(
        reason=f"no free attach handle on resource provider "
               f"{job['device_rp_uuid']}")


def _take(context, job):
    """A free handle of the job's deployable, taken (None: none free).
    Refused when the card is being rewritten (an admin's programming, or
    another bind's, through this deployable or another of the card's)
    since Nova chose it: the instance would start on a card whose image
    changes under it.  A bind that programs the card itself takes one
    all the same where its programming waits for that one
    (``_refuse_programming`` refused the others).  The take itself
    checks (``handle_db.take``), so a programming starting meanwhile
    either stops this take or finds its handle and stops; the mark is
    read again only to say why."""
    programs = _needs_programming(job['group'])
    handle = handle_db.take(context, job['deployable_id'],
                            unless_programmed=not programs)
    if (handle is None and not programs and
            deployable_db.being_programmed(context, job['deployable_id'])):
        raise exception.BindFailed(
            reason=f"the device of resource provider "
                   f"{job['device_rp_uuid']} is being programmed")
    return handle


def _executor(conf):
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = futurist.ThreadPoolExecutor(
                max_workers=conf.conductor.workers)
        return _EXECUTOR


class BackgroundBinds:
    """The conductor's service for the binds that go on after their PATCH
    was answered (programming, mdevs, fabric attaches, Nova's events):
    a stopping conductor waits for them, within
    ``[DEFAULT]graceful_shutdown_timeout``, once its RPC server took its
    last call.  What is left then fails at the next start (``recover``).
    So for the FPGA images that reports had it program again
    (``programming.stop_restores``)."""

    def start(self):
        pass

    def stop(self):
        pass

    def wait(self):
        global _EXECUTOR
        from cyborg.conductor import programming
        programming.stop_restores()
        with _EXECUTOR_LOCK:
            executor, _EXECUTOR = _EXECUTOR, None
        if executor is not None:
            executor.shutdown(wait=True)
        nova.drain()

    def __str__(self):
        return 'background binds'


def _validate(conf, context, bindings, known=None, allocations=True):
    """The bind jobs of a PATCH, or a 4xx: ARQs exist and are the caller's,
    are bindable, their provider is an enabled deployable on the host that
    Placement allocated to the instance, enough units of it for these
    ARQs and those the instance already holds there, and the instance
    holds no ARQ on another host (``_check_one_host``).  A provider may
    also be a remote pool's: the
    host must then be in one of the pool's aggregates (checked before,
    ``known.hosts_checked``).  ``allocations`` False leaves Placement's
    allocations (``known.asked``) for the caller to check."""
    if not isinstance(bindings, dict) or not bindings:
        raise exception.Invalid(reason='no accelerator request to bind')
    known = known or _Known()
    # Malformed instance uuids are refused by _check_fields below.
    instances = {b.get('instance_uuid') for b in bindings.values()
                 if isinstance(b, dict)
                 and uuidutils.is_uuid_like(b.get('instance_uuid'))}
    mine, elsewhere = arq_db.get_to_bind(context, list(bindings), instances)
    rows = {r.uuid: r for r in mine if _visible(context, r)}
    _check_found(bindings, rows)
    rp_uuids = {_field(b, 'device_rp_uuid') for b in bindings.values()}
    targets = deployable_db.bind_targets(context, rp_uuids)
    pools = pool_db.by_rp_uuids(context, rp_uuids - set(targets))
    jobs = []
    for arq_uuid, binding in bindings.items():
        row = rows[arq_uuid]
        if row.state not in BIND_FROM:
            raise exception.Conflict(
                reason=f'accelerator request {arq_uuid} is {row.state}, it '
                       f'cannot be bound')
        group = json.loads(row.profile_json)[row.device_profile_group_id]
        pool = pools.get(binding['device_rp_uuid'])
        if pool is not None:
            _check_pool(pool, binding, group)
            jobs.append(dict(binding, uuid=arq_uuid, group=group,
                             deployable_id=None, remote_pool_id=pool.id,
                             remote={'pool_name': pool.name,
                                     'fabric_driver': pool.fabric_driver},
                             notice=_bind_notice(row, binding, None)))
            continue
        target = _check_target(targets, binding)
        jobs.append(dict(binding, uuid=arq_uuid, group=group,
                         # Its project once bound (an image to program
                         # is one that project may use).
                         bound_project=(binding.get('project_id')
                                        or row.project_id),
                         deployable_id=target.deployable_id,
                         agent_host=target.hostname,
                         notice=_bind_notice(row, binding,
                                             target.deployable_uuid)))
    _check_one_host(jobs, elsewhere)
    known.held = _held_by(elsewhere)
    _check_pool_hosts(conf, known, pools, jobs)
    if allocations:
        _check_allocations(jobs, known.asked, known.held)
    return jobs


def _check_found(asked, found):
    """404 naming every ARQ of ``asked`` missing from ``found`` (those
    that do not exist or are not the caller's)."""
    missing = sorted(set(asked) - set(found))
    if missing:
        raise exception.ARQNotFound(uuid=', '.join(missing))


def _field(binding, name):
    value = binding.get(name) if isinstance(binding, dict) else None
    if not value or not isinstance(value, str):
        raise exception.Invalid(reason=f'{name} is required to bind')
    return value


def _visible(context, arq):
    """The ownership rule the API applies too (RequestContext's
    ``sees_every_project``): a caller with no project owns none."""
    return (context.sees_every_project
            or (bool(context.project_id)
                and arq.project_id == context.project_id))


def _check_fields(binding):
    for name in BIND_FIELDS:
        _field(binding, name)
    if not uuidutils.is_uuid_like(binding['instance_uuid']):
        raise exception.Invalid(
            reason=f"instance_uuid {binding['instance_uuid']!r} is not a "
                   f"uuid")


def _check_target(targets, binding):
    _check_fields(binding)
    rp_uuid, hostname = binding['device_rp_uuid'], binding['hostname']
    target = targets.get(rp_uuid)
    if target is None or target.gone:
        raise exception.BindFailed(
            reason=f'no device provides resource provider {rp_uuid}')
    # Nova names the compute node (its hypervisor host name), which may
    # differ from the service host the agent reports under.
    if hostname not in (target.hostname, target.compute_node_name):
        raise exception.BindFailed(
            reason=f'resource provider {rp_uuid} is not on host {hostname}')
    if target.status != states.ENABLED:
        raise exception.BindFailed(
            reason=f'the device of resource provider {rp_uuid} is in '
                   f'maintenance')
    check_health(target, rp_uuid)
    return target


def check_health(target, rp_uuid):
    """BindFailed when the target (a ``bind_targets`` row) is out of the
    schedule for its health: a fault between the scheduler's claim (Nova's
    or a standalone allocation's) and the bind; the consumer would get a
    broken device."""
    health = states.worst(target.health, target.device_health)
    if health in states.OUT_OF_SCHEDULE:
        reason = (target.health_reason if health == target.health
                  else target.device_health_reason)
        raise exception.BindFailed(
            reason=f'the device of resource provider {rp_uuid} is '
                   f'{health}' + (f': {reason}' if reason else ''))


def _check_pool(pool, binding, group):
    _check_fields(binding)
    if pool.state != states.POOL_ACTIVE:
        raise exception.Conflict(
            reason=f'remote pool {pool.name} is being deleted')
    if _needs_programming(group):
        raise exception.BindFailed(
            reason=f'remote pool {pool.name} cannot be programmed '
                   f'(accel:bitstream_id, accel:function_id)')


def _check_pool_hosts(conf, known, pools, jobs):
    """Each host bound to a remote pool must be a compute node of one of
    the pool's aggregates: Placement is asked once per pair, outside the
    transaction (_AskPlacementFirst names the pairs not checked yet, as
    the pool reads now)."""
    by_id = {pool.id: pool for pool in pools.values()}
    unchecked = {}
    for job in jobs:
        pool = by_id.get(job.get('remote_pool_id'))
        if pool is None:
            continue
        key = _pool_host(pool, job['hostname'])
        if key not in known.hosts_checked:
            seen = _PoolSeen(pool.id, pool.name, pool.aggregates)
            unchecked[key] = (seen, job['hostname'])
    if unchecked:
        raise _AskPlacementFirst(conf, known, pool_hosts=unchecked.values())


def _pool_host(pool, hostname):
    # The aggregates too: a pool whose aggregates changed since its host
    # was checked is checked again.
    return pool.id, pool.aggregates, hostname


def _check_one_host(jobs, elsewhere):
    """BindFailed when an instance bound now on host H still holds ARQs
    (``elsewhere``: binding, bound, or whose unbind failed) on another
    host.  Nova reschedules a build that failed on its first host before
    the ARQs were used (a claim, a late affinity check) by binding new
    ARQs on another host without deleting the first ones; its compute
    there then reads every ARQ of the instance and attaches each PCI
    handle it finds, the first host's too.  Refused, Nova ends the build
    and deletes the instance's ARQs, as after OpenStack Cyborg's refusal
    of a bind for an instance that has ARQs.  ARQs the instance holds on
    H itself (a port's device profile, bound later on the same host) are
    allowed; Nova's evacuation deletes the ARQs before binding new ones
    on the destination."""
    hosts = {}      # {instance uuid: {host name of a job}}
    for job in jobs:
        names = hosts.setdefault(job['instance_uuid'], set())
        names.add(job['hostname'])
        if job.get('agent_host'):
            names.add(job['agent_host'])
    others = {}     # {(instance, host): [held elsewhere]}
    for row in elsewhere:
        names = hosts.get(row.instance_uuid)
        if names is None or row.hostname in names or (
                row.device_hostname and row.device_hostname in names):
            continue
        others.setdefault((row.instance_uuid, row.hostname), []).append(row)
    if not others:
        return
    (instance_uuid, hostname), rows = min(
        others.items(), key=lambda item: (item[0][0], item[0][1] or ''))
    bound_to = sorted(job['hostname'] for job in jobs
                      if job['instance_uuid'] == instance_uuid)[0]
    held = ', '.join(f'{row.uuid} {row.state}'
                     for row in sorted(rows, key=lambda r: r.uuid))
    raise exception.BindFailed(
        reason=f'instance {instance_uuid} already holds accelerator '
               f'requests bound on host {hostname} ({held}): they must be '
               f'deleted before accelerator requests are bound for it on '
               f'host {bound_to}')


def _held_by(elsewhere):
    """{instance uuid: [(provider, resource classes)]} of the ARQs
    ``elsewhere`` (those the bind's instances hold besides the ones bound
    now, whatever their project), all on the host bound now
    (``_check_one_host``): ARQs of an earlier request there, a port's
    device profile bound after the instance's own.  They count against
    the instance's allocation on the provider they are bound to
    (``_check_allocations``)."""
    held = {}
    for row in elsewhere:
        if row.device_rp_uuid:
            group = json.loads(row.profile_json)[row.device_profile_group_id]
            held.setdefault(row.instance_uuid, []).append(
                (row.device_rp_uuid, _classes(group)))
    return held


def _classes(group):
    """The resource classes one ARQ of a profile ``group`` is a unit of
    (of any of them, for a group naming several)."""
    return tuple(sorted(profile_objects.resource_amounts(group)))


def _ask_allocations(conf, bindings):
    """Ask Placement for the allocations of the instances a bind PATCH
    names, in the background: the answers are waited for after the bind's
    reads and before its writes, so Placement's latency overlaps the
    database's and no lock is held while waiting.  {instance uuid:
    future}."""
    from cyborg.placement import client as placement_client

    if not isinstance(bindings, dict):
        return {}  # refused by the validation
    instances = {binding.get('instance_uuid')
                 for binding in bindings.values()
                 if isinstance(binding, dict)}
    placement = placement_client.get_client(conf)
    asked = {}
    for instance in instances:
        if isinstance(instance, str) and uuidutils.is_uuid_like(instance):
            _count_lookup(1)
            asked[instance] = _lookup_executor().submit(
                _lookup, placement, instance)
    return asked


def _lookup(placement, instance):
    try:
        return placement.get_allocations_for_consumer(instance)
    finally:
        # Before the answer is handed over: whoever has it sees the
        # lookup no longer in flight.
        _count_lookup(-1)


def _count_lookup(change):
    global _IN_FLIGHT
    with _EXECUTOR_LOCK:
        _IN_FLIGHT += change


def _lookups_in_flight():
    with _EXECUTOR_LOCK:
        return _IN_FLIGHT


def _lookup_executor():
    global _LOOKUPS
    with _EXECUTOR_LOCK:
        if _LOOKUPS is None:
            _LOOKUPS = futurist.ThreadPoolExecutor(max_workers=8)
        return _LOOKUPS


def _check_allocations(jobs, asked, held=None):
    """When Placement holds allocations for the instance, they must cover
    the device's provider (deliberate difference 3), for the ARQs bound
    now and those the instance already holds there (``held``, from
    ``_held_by``).  Binding does not depend on Placement: while it cannot
    be asked, the check is skipped (Nova's scheduler made the allocation
    the bind names) with one WARNING line.  ``asked``: the answers
    ``_ask_allocations`` got (one per instance of ``jobs``, whose uuids
    _check_fields checked), read here, never waited for."""
    held = held or {}
    for instance_uuid in sorted({job['instance_uuid'] for job in jobs}):
        try:
            allocated = asked[instance_uuid].result(timeout=0)
        except exception.PlacementError as exc:
            LOG.warning('Binding for instance %s without checking its '
                        'allocations: Placement cannot be asked (%s)',
                        instance_uuid, exception.first_line(exc))
            continue
        if not allocated:
            continue
        needed = {}     # {provider: {resource class: ARQs bound there}}
        for job in jobs:
            if job['instance_uuid'] != instance_uuid:
                continue
            rp_uuid = job['device_rp_uuid']
            if rp_uuid not in allocated:
                raise exception.BindFailed(
                    reason=f'instance {instance_uuid} holds no '
                           f'allocation against resource provider '
                           f'{rp_uuid}')
            # Each ARQ is one unit of its group's resource class (a group
            # naming several: of any of them).
            wanted = needed.setdefault(rp_uuid, collections.Counter())
            wanted[_classes(job['group'])] += 1
        for rp_uuid, classes in held.get(instance_uuid, ()):
            if rp_uuid in needed:
                needed[rp_uuid][classes] += 1
        for rp_uuid, wanted in needed.items():
            resources = allocated[rp_uuid].get('resources', {})
            for classes, count in wanted.items():
                units = sum(resources.get(rc, 0) for rc in classes)
                if units < count:
                    raise exception.BindFailed(
                        reason=f'instance {instance_uuid} holds {units} '
                               f'unit{"" if units == 1 else "s"} of '
                               f'{"/".join(classes)} on resource provider '
                               f'{rp_uuid}, not the {count} its '
                               f'accelerator requests bound there need')


@timing.rpc_served('arq_bind_work')
def _run_batch(conf, context, batch_id, jobs, deadline, started=None,
               recorded=None):
    """Bind each ARQ of one PATCH, then hand the batch's events over to
    the Nova senders; returns the future of their delivery.
    ``started``: the monotonic time the ARQs entered BindStarted, from
    which the bind latency metric is measured (binds that were taken from
    under us, or failed by ``fail_stuck``, have no outcome of ours).
    ``recorded``: the batch's events when they are known already (every
    bind ended in the PATCH's transaction), else None."""
    for job in jobs:
        try:
            _resolve(conf, context, batch_id, job, deadline, started)
        except Exception:
            # Recording the outcome failed (the database away longer than
            # its retries): the ARQ stays BindStarted for fail_stuck; the
            # batch's other ARQs and its events go on.
            LOG.exception('Could not record how the bind of accelerator '
                          'request %s ended; the stuck-bind check fails it '
                          'after the bind timeout', job['uuid'])
    return nova.deliver_later(conf, context, batch_id, recorded)


def _resolve(conf, context, batch_id, job, deadline, started, quick=False):
    """Bind one ARQ and record how it ended.  With ``quick``, only when
    nothing slow is needed: False (nothing recorded) when programming or an
    mdev is left to do, or when something unexpected stopped it, for the
    background work to carry on; True when the ARQ is resolved."""
    try:
        handle = _bind_one(conf, context, batch_id, job, deadline, quick)
    except _Lost:
        LOG.info('Accelerator request %s left BindStarted while it was '
                 'being bound', job['uuid'])
        return True
    except Exception as e:
        if quick and not isinstance(e, exception.CyborgException):
            return False  # the background tries again, and reports
        if _fail(conf, context, batch_id, job['uuid'], _reason(e, job),
                 deadline, job=job):
            _observe_bind(started, 'failed')
        return True
    if handle is None:
        return False
    _observe_bind(started, 'bound')
    LOG.info('Accelerator request %s bound on %s (provider %s, %s handle) '
             'for instance %s', job['uuid'], job['hostname'],
             job['device_rp_uuid'], handle.attach_type, job['instance_uuid'])
    _notify_bound(conf, context, job, handle)
    return True


def _reason(error, job):
    """What to keep on the ARQ (and log) for a failed bind."""
    if isinstance(error, exception.CyborgException):
        return str(error)
    from cyborg.agent import rpcapi as agent_rpcapi
    unreached = agent_rpcapi.not_reached(
        error, job.get('agent_host') or job['hostname'])
    if unreached is not None:
        return unreached
    if isinstance(error, messaging.MessagingTimeout):
        return (f"the agent on {job['hostname']} did not answer within "
                f"the bind timeout")
    if isinstance(error, messaging.RemoteError):
        return f"the agent on {job['hostname']} failed: {error.value}"
    LOG.exception('Binding accelerator request %s failed', job['uuid'])
    return f'internal error: {error}'


def _observe_bind(started, outcome):
    if started is not None:
        metrics.CONDUCTOR_BIND_SECONDS.labels(outcome).observe(
            time.monotonic() - started)


def _bind_one(conf, context, batch_id, job, deadline, quick=False):
    """Bind one ARQ; returns its attach handle once Bound is committed.
    With ``quick``, None where something slow is left to do (the handle
    taken so far stays in ``job``): programming, an mdev, a fabric
    attach."""
    if job.get('bound') is not None:
        return job.pop('bound')     # Bound by _start
    remote = job.get('remote_pool_id') is not None
    if quick and (remote or _needs_programming(job['group'])
                  or job.get('handle') is not None):
        return None
    if remote:
        return _bind_remote(conf, context, batch_id, job, deadline)
    handle = job.pop('handle', None)
    if handle is None:
        finish = None
        if not _needs_programming(job['group']):
            # Nothing slow to do unless the handle is an mdev: take the
            # handle and end Bound in one transaction.
            def finish(handle):
                _finish(conf, context, batch_id, job, handle, deadline)
        handle, done = db_api.write_retrying(
            context, _take_handle_in, context, job, finish)
        if done:
            return handle
        if quick:
            job['handle'] = handle
            return None
    mdev_created = False
    try:
        if _needs_programming(job['group']):
            from cyborg.conductor import programming
            programming.program_for_bind(
                conf, context, job['deployable_id'], job['group'], deadline,
                job['bound_project'], arq_uuid=job['uuid'],
                bind=(job['uuid'], job['bind_id'], handle.id))
        if handle.attach_type == 'MDEV':
            _mdev_create(conf, context, job['agent_host'], handle, deadline)
            mdev_created = True
        db_api.write_retrying(context, _finish, conf, context, batch_id, job,
                              handle, deadline)
    except Exception:
        if mdev_created:
            _undo_mdev(conf, context, job, handle)
        raise
    return handle


def in_another_bind(context, arq_uuid, bind_id):
    """Whether the ARQ is now in another bind than ``bind_id`` (unbound
    and bound, or allocated, again); not when it is in none, or gone."""
    now = arq_db.bind_of(context, arq_uuid)
    return now is not None and now != bind_id


def _held_by_another(context, job, handle_id):
    """Whether another bind than the job's holds the handle now."""
    holder = arq_db.handle_holder(context, handle_id)
    return holder is not None and holder != job['bind_id']


def _undo_mdev(conf, context, job, handle):
    """Remove the mdev this bind made, unless the handle (whose uuid
    the mdev carries) is another bind's now: the ARQ was unbound and bound
    again meanwhile, and that bind made (or makes) the same mdev.  If
    another bind took it while this removal was on its way, the mdev is
    made again for it (creating one that exists changes nothing)."""
    if _held_by_another(context, job, handle.id):
        LOG.info('Leaving mdev %s to the bind that holds its handle now',
                 handle.uuid)
        return
    _mdev_remove(conf, context, job['agent_host'], handle)
    if _held_by_another(context, job, handle.id):
        try:
            _mdev_create(conf, context, job['agent_host'], handle,
                         deadline_of(conf, clock_db.utcnow()))
        except Exception as e:  # noqa: BLE001 - that bind's own create
            LOG.warning('Could not make mdev %s again for the bind that '
                        'took its handle: %s', handle.uuid, e)


def _bind_remote(conf, context, batch_id, job, deadline):
    """Bind one ARQ to a remote pool: with the handle ``_start`` took
    (``job['remote_handle']``; else take a free one, committed, so a
    concurrent unbind finds and detaches it), attach it to the host
    through the pool's fabric driver, then end Bound with the driver's
    answer.  A handle the ARQ no longer holds for this bind (unbound
    meanwhile) is not attached.
    The attach has until the bind's deadline, less the time its undo may
    take (``remote_pools.attach_seconds``): a fabric manager that does not
    answer fails the bind rather than hold this worker.  An attach that
    fails, did not answer, or whose bind was lost meanwhile, is detached
    again; where the fabric refuses (or does not answer) that detach, the
    handle is kept out of use (``_keep_attached``)."""
    handle = job.pop('remote_handle', None)
    if handle is None:
        handle = db_api.write_retrying(context, _take_remote_in, context,
                                       job)
    elif not _holds_remote(context, job, handle):
        _free_unattached(conf, context, job, handle)
        raise _Lost()
    try:
        info = remote_pools.attach(
            conf, job['remote'], handle, job['hostname'],
            job['instance_uuid'], remote_pools.attach_seconds(conf, deadline))
        db_api.write_retrying(context, _finish_remote, conf, context,
                              batch_id, job, handle, info, deadline)
    except remote_pools.NotAttached:
        # The fabric was asked nothing: the failure frees the handle.
        _free_unattached(conf, context, job, handle)
        raise
    except Exception:
        if not _undo_attach(conf, context, job, handle, deadline):
            _keep_attached(conf, context, job, handle)
        else:
            # Its ARQ released while the attach could still land, the
            # handle was kept for this undo to free (detach_for_release).
            _free_unattached(conf, context, job, handle)
        raise
    return _RemoteBound(handle.uuid, states.FABRIC, json.dumps(info))


def _free_unattached(conf, context, job, handle):
    """This bind attaches nothing: the handle its ARQ's release kept for
    it (``remote_pools.detach_for_release``) is freed."""
    remote_pools.free_kept(conf, context, handle.id, job['bind_id'],
                           job['hostname'])


def _undo_attach(conf, context, job, handle, deadline):
    """Detach what this bind attached, unless another bind holds the
    handle for the same host (unbound meanwhile, and bound again to the
    same handle there: the attachment is that bind's now).  A holder on
    another host has, or will have, its own attachment: this bind's would
    be left behind.  False when the fabric refused the detach (or did not
    answer it).

    A bind for the same host may take the handle once it was read free
    (or this bind's, its ARQ released since), and attach (finding it
    attached there already) before this detach lands: it would end Bound
    with nothing attached.  The holder is read again once the fabric
    detached, and such a bind's attachment made again, as ``_undo_mdev``
    makes an mdev again."""
    if _sharing_holder(context, job, handle) is not None:
        LOG.info('Leaving %s attached to %s for the bind that holds it now',
                 handle.fabric_address, job['hostname'])
        return True
    if not _detach_quietly(conf, job, handle, deadline):
        return False
    holder = _sharing_holder(context, job, handle)
    if holder is not None:
        _attach_again(conf, context, job, handle, holder, deadline)
    return True


def _sharing_holder(context, job, handle):
    """The holder of ``handle`` (``pool_db.holder``) when it is another
    bind than the job's, for the job's host; else None."""
    holder = pool_db.holder(context, handle.id)
    if (holder is not None and (holder.bind_id or '') != job['bind_id']
            and holder.hostname == job['hostname']):
        return holder
    return None


def _attach_again(conf, context, job, handle, holder, deadline):
    """Attach again, for the bind ``holder``, a handle this bind's undo
    detached from under it.  Should that bind have let it go by the time
    the fabric attached it, the attachment is this undo's to leave: the
    handle is kept out of use for the reconcile (``_keep_attached``)."""
    LOG.info('%s was detached from %s while another bind took it there; '
             'attaching it again for that bind', handle.fabric_address,
             job['hostname'])
    try:
        remote_pools.attach(conf, job['remote'], handle, holder.hostname,
                            holder.instance_uuid,
                            remote_pools.undo_seconds(conf, deadline))
    except Exception as e:  # noqa: BLE001 - reported; nothing else to do
        LOG.error('%s was detached from %s under the bind %s of instance '
                  '%s, which holds it, and could not be attached again '
                  '(%s): unbind and bind that instance\'s accelerator '
                  'request again', handle.fabric_address, job['hostname'],
                  holder.bind_id, holder.instance_uuid, e)
        return
    now = pool_db.holder(context, handle.id)
    if now is None or now.bind_id != holder.bind_id:
        _keep_attached(conf, context, job, handle)


def _holds_remote(context, job, handle):
    """Whether the job's bind still holds the remote ``handle``."""
    holder = pool_db.holder(context, handle.id)
    return holder is not None and holder.bind_id == job['bind_id']


def _take_remote_in(context, job):
    handle = pool_db.take(context, job['remote_pool_id'])
    if handle is None:
        raise _no_free_remote(job)
    if not arq_db.set_remote_handle(context, job['uuid'], handle.id,
                                    job['bind_id']):
        raise _Lost()  # rolls the take back
    return handle


def _finish_remote(conf, context, batch_id, job, handle, info, deadline):
    """Bound, the handle's attachment and the event in one transaction."""
    if not arq_db.transition(context, job['uuid'], states.BOUND, BOUND_FROM,
                             _ENDED, where={'remote_handle_id': handle.id,
                                            'bind_id': job['bind_id']}):
        raise _Lost()
    pool_db.set_attached(context, handle.id, job['hostname'],
                         json.dumps(info))
    nova.record(conf, context, batch_id,
                [(job['instance_uuid'], job['uuid'], 'completed')],
                _due(conf, deadline))


def _detach_quietly(conf, job, handle, deadline):
    """Undo an attach whose bind did not end Bound (the driver's detach
    is idempotent), within ``remote_pools.undo_seconds``; False, logged,
    when the fabric refused, or did not answer in that time."""
    try:
        remote_pools.detach(conf, remote_pools.job_pool(job), handle.uuid,
                            handle.fabric_address, job['hostname'],
                            job['instance_uuid'],
                            seconds=remote_pools.undo_seconds(conf,
                                                              deadline))
    except Exception as e:  # noqa: BLE001 - the handle is kept out of use
        LOG.warning('Could not detach %s from %s after a failed bind (%s); '
                    'the handle stays out of use until a retry succeeds',
                    handle.fabric_address, job['hostname'], e)
        return False
    return True


def _keep_attached(conf, context, job, handle):
    """The fabric refused to undo this bind's attach: the handle stays
    attached to the job's host, out of use until the reconcile detaches
    it, as after any refused detach.  While the ARQ still holds it for
    this bind, the bind's failure keeps it (``job['kept']``, which
    ``_fail`` passes on).  Otherwise the attachment is recorded on the
    handle, whoever has it now (``remote_pools.owe_detach``): a handle
    freed meanwhile is taken out of use again here, one kept for this
    host (its ARQ released while the attach could land) stays so, and
    one another bind took since, or kept for another host, is owed the
    detach: it is kept out of use for this host once let go, and the
    reconcile detaches it."""
    holder = pool_db.holder(context, handle.id)
    if holder is not None and (holder.bind_id or '') == job['bind_id']:
        job['kept'] = {handle.id: job['hostname']}
        return
    remote_pools.owe_detach(conf, context, handle.id, job['hostname'],
                            job['instance_uuid'], job['bind_id'])


def _finish(conf, context, batch_id, job, handle, deadline):
    """Bound, and its event, in one transaction."""
    if not arq_db.transition(context, job['uuid'], states.BOUND, BOUND_FROM,
                             _ENDED, where={'attach_handle_id': handle.id,
                                            'bind_id': job['bind_id']}):
        raise _Lost()
    nova.record(conf, context, batch_id,
                [(job['instance_uuid'], job['uuid'], 'completed')],
                _due(conf, deadline))


def _take_handle_in(context, job, finish=None):
    """(handle, done): ``finish(handle)`` ends the bind in the same
    transaction unless the handle is an mdev still to be created."""
    handle = _take(context, job)
    if handle is None:
        raise _no_free_handle(job)
    if not arq_db.set_attach_handle(context, job['uuid'], handle.id,
                                    job['bind_id']):
        raise _Lost()  # rolls the take back
    if finish is not None and handle.attach_type != 'MDEV':
        finish(handle)
        return handle, True
    return handle, False


def _needs_programming(group):
    return bool(group.get('accel:bitstream_id')
                or group.get('accel:function_id'))


def _due(conf, deadline):
    """When the periodic may re-send an event recorded now: after the
    batch had time to finish and deliver it itself."""
    return deadline + datetime.timedelta(
        seconds=conf.conductor.nova_event_retry_interval)


def _fail(conf, context, batch_id, arq_uuid, reason, deadline, job=None,
          kept=(), bind_id=None, owe_release=False):
    """Move the ARQ from BindStarted to BindFailed, record its event and
    notify; False when it had already left BindStarted (or, for a
    ``job``'s bind or ``bind_id``, is another bind's now).  ``kept``:
    {remote handle id: host} of the handles whose detach failed, or is
    still to be made (the stuck-bind check's), kept out of use; a
    ``job``'s are those its own undo could not detach.
    ``owe_release``: a standalone allocation's ARQ, whose Placement claim
    is recorded as owed a release (``placement_releases``) in the same
    transaction, for the caller to release once it has failed.  The
    pools of the handles a ``job``'s failure kept, and of one its release
    kept for a detach owed (``_release_held``), reserve them once
    committed (``remote_pools.resync``)."""
    if job is not None:
        bind_id = job.get('bind_id')
        kept = job.get('kept', kept)
    fail_in = _fail_owing_release_in if owe_release else _fail_in
    owed = set()
    try:
        row = db_api.write_retrying(context, fail_in, conf, context,
                                    batch_id, arq_uuid, reason, deadline,
                                    kept, bind_id, owed)
    except db_exc.DBDuplicateEntry:
        # The allocation's own undo recorded the release at that moment:
        # recorded now, the failure is written again (adding nothing).
        row = db_api.write_retrying(context, fail_in, conf, context,
                                    batch_id, arq_uuid, reason, deadline,
                                    kept, bind_id, owed)
    if row is None:
        LOG.info('Accelerator request %s left BindStarted before its '
                 'failure could be recorded: %s', arq_uuid, reason)
        return False
    resynced = (set(kept) if job is not None else set()) | owed
    if resynced:
        remote_pools.resync(conf, context, resynced)
    LOG.info('Binding accelerator request %s failed: %s', arq_uuid, reason)
    _notify_failed(conf, context, arq_uuid, reason, job)
    return True


def _fail_in(conf, context, batch_id, arq_uuid, reason, deadline, kept=(),
             bind_id=None, owed=None):
    row = _leave(context, arq_uuid, states.BIND_FAILED, BIND_FAILED_FROM,
                 {'bind_failure_reason': reason[:4000],
                  'attach_handle_id': None, 'remote_pool_id': None,
                  'remote_handle_id': None, **_ENDED}, kept=kept,
                 bind_id=bind_id, owed=owed)
    if row is not None:
        nova.record(conf, context, batch_id,
                    [(row.instance_uuid, arq_uuid, 'failed')],
                    _due(conf, deadline))
    return row


def _fail_owing_release_in(conf, context, batch_id, arq_uuid, reason,
                           deadline, kept=(), bind_id=None, owed=None):
    """``_fail_in``, recording the release of the ARQ's claim when it
    moved."""
    row = _fail_in(conf, context, batch_id, arq_uuid, reason, deadline,
                   kept, bind_id, owed)
    if row is not None:
        release_db.add(context, arq_uuid)
    return row


def _leave(context, arq_uuid, to_state, from_states, values, known=None,
           kept=(), bind_id=None, owed=None):
    """Move an ARQ and release the handle it held, in the caller's
    transaction.  Returns the row as it was, or None if not moved.
    ``known``: the ARQ as just read, tried first to save a query.
    ``kept``: {remote handle id: host} of the handles whose fabric detach
    failed: unlinked from the ARQ but kept out of use, marked (with the
    host they stay attached to) for the reconcile to retry.
    ``bind_id``: only while the ARQ is still that bind's.  ``owed``: a
    set the remote handle released is added to where it was kept out of
    use rather than freed (``_release_held``)."""
    guard = {} if bind_id is None else {'bind_id': bind_id}
    for _ in range(3):
        row, known = known or arq_db.handle_state(context, arq_uuid), None
        if row is None or row.state not in from_states:
            return None
        if arq_db.transition(context, arq_uuid, to_state, from_states,
                             values, where=dict(
                                 guard,
                                 attach_handle_id=row.attach_handle_id,
                                 remote_handle_id=row.remote_handle_id)):
            _release_held(context, row, kept, owed)
            return row
        # The bind worker took a handle between our read and write.
    return None


def _gone(context, arq_uuid, known=None, kept=(), owed=None):
    """``_leave`` for a delete: the ARQ is deleted (moved through
    Deleting first only where something is released outside the
    database before, ``_mark``) and what it held released, in the
    caller's transaction.  Returns the row as it was, or None."""
    for _ in range(3):
        row, known = known or arq_db.handle_state(context, arq_uuid), None
        if row is None:
            return None
        if arq_db.delete_holding(context, arq_uuid, row.attach_handle_id,
                                 row.remote_handle_id):
            _release_held(context, row, kept, owed)
            return row
    return None


def _release_held(context, row, kept, owed=None):
    """Release the handles an ARQ ``row`` held (it no longer does).  A
    remote handle owed a detach from another host is kept out of use for
    it rather than freed (``pool_db.release``): added to ``owed`` (a set,
    where given), whose pools the caller resyncs once committed
    (``remote_pools.resync``), so that Placement reserves it now rather
    than at the reconcile's next sync."""
    if row.attach_handle_id is not None:
        handle_db.release(context, row.attach_handle_id)
    if row.remote_handle_id in kept:
        _keep_out(context, row, kept[row.remote_handle_id])
    elif row.remote_handle_id is not None:
        released = pool_db.release(context, row.remote_handle_id)
        if released and released is not True and owed is not None:
            owed.add(row.remote_handle_id)


def _keep_out(context, row, kept):
    """Keep the remote handle of ARQ ``row`` out of use for the host
    ``kept`` (a ``remote_pools.Landing`` where its bind's attach may still
    land).  The handle is read locked: a detach another conductor records
    owed on it meanwhile (``remote_pools.owe_detach``) is kept, not
    written over."""
    handle = pool_db.lock_handle(context, row.remote_handle_id)
    if handle is None:
        return
    landing = kept if isinstance(kept, remote_pools.Landing) else None
    hostname = kept.host if landing is not None else kept
    pool_db.set_attach_info(context, handle.id,
                            remote_pools.quarantine_info(
                                handle.attach_info, row.instance_uuid,
                                hostname, landing))


# -- mdevs ----------------------------------------------------------------

def _mdev_create(conf, context, hostname, handle, deadline):
    """Create the mdev of an MDEV handle (named by the handle's uuid, so
    that unbinding finds it again).  The agent has
    ``[conductor]mdev_timeout`` (within the bind's time); a silent one is
    not asked: the bind fails at once rather than hold a bind worker, and
    those queued behind it, for the bind's whole time."""
    from cyborg.agent import rpcapi as agent_rpcapi
    from cyborg.objects import inventory

    info = json.loads(handle.attach_info)
    remaining = (deadline - clock_db.utcnow()).total_seconds()
    if remaining <= 0:
        raise exception.BindFailed(reason='bind timed out')
    silent = silence.why_silent(conf, context, hostname)
    if silent is not None:
        raise exception.BindFailed(
            reason=f'{silent}: mdev {handle.uuid} cannot be made')
    agent_rpcapi.AgentAPI(
        conf, timeout=max(int(min(remaining, conf.conductor.mdev_timeout)),
                          1)).create_vgpu_mdev(
        context, hostname, inventory.pci_address(info), info['asked_type'],
        handle.uuid)


def _mdev_remove(conf, context, hostname, handle):
    """Best effort: the agent's removal is idempotent, and a leftover mdev
    is recreated under the same uuid by the next bind."""
    _remove_mdev(conf, context, hostname, handle.attach_info, handle.uuid,
                 silence.why_silent(conf, context, hostname))


def _remove_mdev(conf, context, hostname, attach_info, mdev_uuid,
                 silent=None):
    """Ask the agent to remove the mdev; None when it did, else why not
    (logged).  The agent has ``[conductor]mdev_timeout``, less where the
    API stops waiting sooner (``answer_by``); a silent one (``silent``:
    ``silence.why_silent``) is not asked."""
    from cyborg.agent import rpcapi as agent_rpcapi
    from cyborg.objects import inventory

    info = json.loads(attach_info)
    if silent is not None:
        reason = f'{silent}: mdev {mdev_uuid} was not removed'
        LOG.warning('%s', reason)
        return reason
    try:
        agent_rpcapi.AgentAPI(conf, timeout=_mdev_wait(conf, context)
                              ).remove_vgpu_mdev(
            context, hostname, inventory.pci_address(info), mdev_uuid,
            asked_type=info.get('asked_type'))
    except Exception as e:  # noqa: BLE001 - any failure is only reported
        unreached = agent_rpcapi.not_reached(e, hostname)
        if unreached is not None:
            reason = f'{unreached}: mdev {mdev_uuid} was not removed'
        elif isinstance(e, messaging.MessagingTimeout):
            reason = (f'the agent on {hostname} did not answer when asked '
                      f'to remove mdev {mdev_uuid}')
        else:
            detail = (f'{e.exc_type}: {e.value}'
                      if isinstance(e, messaging.RemoteError) else str(e))
            reason = (f'the agent on {hostname} could not remove mdev '
                      f'{mdev_uuid}: {exception.first_line(detail)}')
        LOG.warning('%s', reason)
        return reason
    return None


def _mdev_wait(conf, context):
    """Seconds an agent has to remove an mdev: ``[conductor]mdev_timeout``,
    or less when the caller (the API) stops waiting sooner, so that an
    agent that is down leaves time to answer (an unbind's UnbindFailed, a
    delete going on)."""
    wait = conf.conductor.mdev_timeout
    answer_by = getattr(context, 'answer_by', None)
    if answer_by is not None:
        left = answer_by - objects_clock.reference.now() - MDEV_ANSWER_MARGIN
        wait = min(wait, left)
    return max(int(wait), 1)


def _release_mdevs(conf, context, rows):
    """Remove the mdevs of MDEV handles before the handles are freed (a
    freed handle's mdev uuid may be taken again at once); returns {ARQ
    uuid: reason} of those the agent could not remove.  The removals run
    at once (an instance's vGPUs wait for one agent's timeout, not one
    each)."""
    mdevs = [row for row in rows if _holds_mdev(row)]
    silent = {host: silence.why_silent(conf, context, host)
              for host in {row.device_hostname for row in mdevs}}

    def remove(row):
        return _remove_mdev(conf, context, row.device_hostname,
                            row.attach_handle_info, row.attach_handle_uuid,
                            silent[row.device_hostname])
    if len(mdevs) > 1:
        with futurist.ThreadPoolExecutor(
                max_workers=min(len(mdevs), MDEV_REMOVALS)) as pool:
            reasons = list(pool.map(remove, mdevs))
    else:
        reasons = [remove(row) for row in mdevs]
    return {row.uuid: reason for row, reason in zip(mdevs, reasons)
            if reason is not None}


# -- unbind and delete ------------------------------------------------------

def _owe_allocations(context, rows, moved):
    """Record, in the transaction that moved them (``moved``: {uuid:
    state before}), the releases of the Placement claims of the ARQs
    among ``rows`` (as read there) that were allocated standalone (each
    allocation claims under a consumer of its own,
    ``arq_allocation.consumer_of``; an instance's ARQs hold none: Nova's
    allocation is the instance's, and they cost no statement here)."""
    standalone = [r for r in rows if r.consumer_id and r.uuid in moved]
    if not standalone:
        return
    from cyborg.conductor import arq_allocation

    for row in standalone:
        arq_allocation.owe_claim(context, row.uuid, row.bind_id)


def release_allocations(conf, rows, moved, what):
    """Release the Placement claims ``_owe_allocations`` recorded, once
    the transaction that moved the ARQs has committed
    (``arq_allocation.release_moved``; ``what``: unbound or deleted).

    Moved first, released after: released first, a conductor that died
    in between left the ARQ Bound, holding its handle and consumer, with
    nothing claimed in Placement, which offered the unit again, and
    nothing noticed.  A Placement outage (or a conductor dying here) no
    longer fails the unbind or delete: the records stay, and
    ``fail_stuck`` (``arq_allocation.release_left_claims``) releases the
    claims once Placement answers.  An allocation made after this by a
    racing allocate is released by that allocate, which finds its ARQ
    gone or moved.  Each releases the claim of the bind its row was in
    only (``arq_allocation.release_claim``): where the ARQ was allocated
    again since, the newer allocation's claim is left to it.  The unbind
    or delete is done: an error here is logged, its records kept."""
    if not any(r.consumer_id and r.uuid in moved for r in rows):
        return
    from cyborg.conductor import arq_allocation

    try:
        arq_allocation.release_moved(
            conf, cyborg_context.get_admin_context(), rows, moved,
            'accelerator request ' + what)
    except Exception:  # noqa: BLE001 - the change is committed
        LOG.exception('Could not release the Placement claims of the '
                      'accelerator requests %s; the stuck-bind check '
                      'releases them', ', '.join(
                          sorted(r.uuid for r in rows
                                 if r.consumer_id and r.uuid in moved)))


def unbind(conf, context, arq_uuids):
    """Free the ARQs' handles (removing mdevs) and clear their binding;
    ARQs already unbound are left alone.  An ARQ whose mdev the agent
    could not remove ends in UnbindFailed with the reason, keeping its
    handle; unbinding it again, or deleting it, ends that."""
    rows = [r for r in arq_db.get_to_change(context, arq_uuids)
            if _visible(context, r)]
    _check_found(arq_uuids, {r.uuid for r in rows})
    for _round in range(DELETE_ROUNDS):
        tried = {r.uuid: r for r in rows}
        failed = _release_mdevs(conf, context, rows)
        freed = [r for r in rows if r.uuid not in failed]
        kept, landing = remote_pools.detach_for_release(conf, context,
                                                        freed)
        owed = set()
        rows, moved = _write_owing(
            context, _unbind_released, context, [r.uuid for r in rows],
            freed, {**kept, **landing}, owed)
        if moved is not None:
            break
    else:
        raise exception.Conflict(
            reason='the accelerator requests kept being bound while they '
                   'were unbound; try again')
    _after_keeping(conf, context, kept, landing, owed)
    release_allocations(conf, rows, moved, 'unbound')
    if failed:
        # Logged once committed: a retried or rolled back try says nothing.
        for arq_uuid in db_api.write_retrying(context, _unbind_failed_in,
                                              context, failed, tried):
            LOG.warning('Unbinding accelerator request %s failed: %s',
                        arq_uuid, failed[arq_uuid])
    _notify_left(conf, context, notify.ARQ_UNBIND, freed, moved,
                 states.UNBOUND)


def _after_keeping(conf, context, kept, landing, owed=()):
    """After a release committed, keeping out of use the remote handles
    ``kept`` (their detach refused), ``owed`` (owed a detach from another
    host, ``_release_held``) and ``landing`` (their bind's attach may
    still land, ``remote_pools.detach_for_release``): their pools'
    providers reserve them; those of ``landing`` whose attach can no
    longer land are detached and freed as the stuck-bind check's are
    (``remote_pools.detach_kept``: it leaves the others to their bind's
    undo, or to the reconcile once their attach can no longer land)."""
    remote_pools.resync(conf, context, set(kept) | set(owed))
    remote_pools.detach_kept(conf, context, list(landing))


def _unbind_released(context, arq_uuids, released, kept, owed):
    """Unbind the ARQs of ``released`` (as read before their releases) if
    they hold what they held then: (rows, moved).  Where one holds
    something not released (a standalone allocation, or a bind, ended
    meanwhile: its claim, mdev or fabric handle), (rows, None), writing
    nothing: the releases run again for what the rows hold now, as a
    delete does (its claim was left in Placement for good).  The
    releases of the standalone claims of those moved are recorded here,
    and made after the commit (``release_allocations``).  ``owed``: the
    set the handles kept out of use for a detach owed are added to
    (``_release_held``), this try's only."""
    owed.clear()
    arq_db.lock(context, arq_uuids)
    rows = [r for r in arq_db.get_to_change(context, arq_uuids)
            if _visible(context, r)]
    names = {r.uuid for r in released}
    now = [r for r in rows if r.uuid in names]
    if _holdings(now) - _holdings(released):
        return rows, None
    moved = _leave_all(context, now, states.UNBOUND, UNBIND_FROM, kept=kept,
                       owed=owed)
    _owe_allocations(context, now, moved)
    return rows, moved


def _write_owing(context, fn, *args):
    """``write_retrying`` of an unbind's or a delete's ``fn``, which
    records the releases of standalone claims: where another conductor
    (an allocation's undo) recorded the same consumer at that moment, it
    is written again (the record there, adding nothing)."""
    try:
        return db_api.write_retrying(context, fn, *args)
    except db_exc.DBDuplicateEntry:
        return db_api.write_retrying(context, fn, *args)


def _unbind_failed_in(context, failed, tried):
    """UnbindFailed, with the reason, for {ARQ uuid: reason}; the handle
    stays taken (its mdev may still serve the instance).  Only an ARQ
    still in the bind, and holding the handle, whose mdev the removal
    tried (``tried``: {uuid: row as read then}): one unbound and bound
    again meanwhile by another request is that bind's.  Returns the ARQs
    moved."""
    return [arq_uuid for arq_uuid, reason in failed.items()
            if arq_db.transition(
                context, arq_uuid, states.UNBIND_FAILED, UNBIND_FAILED_FROM,
                {'bind_failure_reason': reason[:4000], **_ENDED},
                where={'bind_id': tried[arq_uuid].bind_id,
                       'attach_handle_id':
                           tried[arq_uuid].attach_handle_id})]


def _leave_all(context, rows, to_state, from_states, delete=False,
               kept=(), owed=None):
    """Move (and with ``delete`` then delete) the ARQs of ``rows``;
    returns {uuid: state before} of those that moved."""
    moved = {}
    for row in rows:
        if delete:
            before = _gone(context, row.uuid, known=row, kept=kept,
                           owed=owed)
        else:
            before = _leave(context, row.uuid, to_state, from_states,
                            _CLEARED, known=row, kept=kept, owed=owed)
        if before is not None:
            moved[row.uuid] = before.state
    return moved


def delete(conf, context, arq_uuids=None, instance_uuid=None,
           guard_holding=False):
    """Delete ARQs by uuid or by instance, unbinding them first.

    Returns the uuids that were not found; the others are deleted.
    Deleting by instance is idempotent.  With ``guard_holding``, raises
    a 403, deleting nothing, when the caller may not delete an ARQ that
    holds a device (``accelerator_requests.check_may_delete``).
    """
    arq_uuids = list(arq_uuids or [])
    mark = _Mark(conf)
    rows, moved = awaited.write(context, _delete_at_once, context,
                                arq_uuids, instance_uuid or None,
                                guard_holding, mark)
    if moved is None:
        rows, moved = _delete_releasing(conf, context, arq_uuids,
                                        instance_uuid or None, guard_holding,
                                        rows, mark)
    moved = mark.previous(moved)
    if moved:
        _notify_left(conf, context, notify.ARQ_DELETE, rows, moved,
                     states.DELETING)
    found = {r.uuid for r in rows}
    return [u for u in arq_uuids if u not in found]


# ARQs one transaction of ``purge_initial`` deletes at most.
PURGE_BATCH = 500
# ARQs a purge names in its log line, at most.
_PURGED_SHOWN = 10


def purge_initial(conf, context):
    """Periodic: delete the ARQs never bound (still Initial) created more
    than ``[conductor]initial_arq_max_age`` seconds ago (0: none).  A
    create answered 503 (a conductor that died after its write) leaves
    ARQs Nova never learns the uuids of, counted against their project's
    quota until deleted.  Each batch is read, locked and checked again
    (still Initial, still that old) in the transaction that deletes it:
    a bind that took one meanwhile keeps it.  One ``delete``
    notification per ARQ, as for a delete asked for; logged at WARNING
    with their projects.  Returns how many went."""
    max_age = conf.conductor.initial_arq_max_age
    if not max_age:
        return 0
    before = clock_db.utcnow() - datetime.timedelta(seconds=max_age)
    purged = []
    while True:
        uuids = arq_db.initial_before(context, before, PURGE_BATCH)
        if not uuids:
            break
        rows, moved = db_api.write_retrying(context, _purge_initial,
                                            context, uuids, before)
        if moved:
            _notify_left(conf, context, notify.ARQ_DELETE, rows, moved,
                         states.DELETING)
        purged += [row for row in rows if row.uuid in moved]
        if len(uuids) < PURGE_BATCH or not moved:
            break
    if purged:
        LOG.warning('Deleted %d accelerator request(s) never bound in the '
                    '%d s after their creation ([conductor]'
                    'initial_arq_max_age): %s', len(purged), max_age,
                    ', '.join(f'{row.uuid} (project {row.project_id})'
                              for row in purged[:_PURGED_SHOWN]) +
                    (', ...' if len(purged) > _PURGED_SHOWN else ''))
    return len(purged)


def _purge_initial(context, uuids, before):
    """(rows, {uuid: state before}) of the ARQs ``uuids`` still Initial,
    created before ``before`` and holding nothing to release outside the
    database, deleted in this transaction."""
    arq_db.lock(context, uuids)
    rows = [row for row in arq_db.get_to_change(context, uuids)
            if row.state == states.INITIAL and row.created_at < before
            and not _releases_outside(row)]
    return rows, _leave_all(context, rows, states.DELETING, ANY_STATE,
                            delete=True)


def _deletable(context, arq_uuids, instance_uuid, guard_holding=False):
    """The ARQs a delete names that the caller sees, in its write
    transaction, locked before they are read: read as last committed, and
    no bind changes them before the transaction ends, so what the 403 of
    ``guard_holding`` is decided on, and the handles released, are what
    the ARQs hold."""
    arq_db.lock(context, arq_uuids, instance_uuid=instance_uuid)
    rows = [r for r in arq_db.get_to_change(context, arq_uuids,
                                            instance_uuid=instance_uuid)
            if _visible(context, r)]
    if guard_holding:
        accelerator_requests.check_may_delete(context, rows)
    return rows


def _delete_at_once(context, arq_uuids, instance_uuid, guard_holding=False,
                    mark=None):
    """(rows, {uuid: state before}) of a delete with nothing to release
    outside the database (no mdev to remove, no fabric handle to detach,
    no Placement claim of its own): read and deleted in one transaction.
    (rows, None) when some ARQ has such a release: nothing else written
    than, with a ``mark``, the mark of those whose release comes before
    their rows go (``_mark``)."""
    rows = _deletable(context, arq_uuids, instance_uuid, guard_holding)
    if not rows:
        return rows, {}
    if any(_releases_outside(row) for row in rows):
        if mark is not None:
            _mark(context, mark, rows)
        return rows, None
    return rows, _leave_all(context, rows, states.DELETING, ANY_STATE,
                            delete=True)


def _releases_outside(row):
    return bool(_releases_first(row) or row.consumer_id)


def _releases_first(row):
    """Whether the ARQ ``row`` holds something released outside the
    database before its row goes: an mdev to remove, a fabric handle to
    detach (a standalone claim is released after, recorded in the
    transaction that deletes the row)."""
    return _holds_mdev(row) or row.remote_handle_id is not None


def _holds_mdev(row):
    """Whether the ARQ ``row`` holds an mdev its host's agent removes."""
    return bool(row.attach_handle_type == 'MDEV' and row.device_hostname)


class _Mark:
    """The mark of one delete (``_mark``): its conductor's configuration,
    and the state each ARQ it marked was in before (``arq.delete``'s
    ``previous_state``; Deleting for one marked by another delete)."""

    def __init__(self, conf):
        self.conf = conf
        self.before = {}

    def previous(self, moved):
        """``moved`` ({uuid: state before}) with the states before the
        mark."""
        return {arq_uuid: self.before.get(arq_uuid, state)
                for arq_uuid, state in moved.items()}


def delete_time(conf):
    """Seconds after its mark the periodic may finish a delete
    (``finish_deletes``): its releases had the longest they may take
    (``[conductor]mdev_timeout``, ``[fabric]detach_timeout``), and a
    bind's time besides for its transactions."""
    return (conf.bind_timeout + conf.conductor.mdev_timeout +
            conf.fabric.detach_timeout)


def _mark(context, mark, rows):
    """Move to Deleting, in the delete's transaction that read (and
    locked) ``rows``, those whose mdev or fabric handle is released
    before their rows go (``_releases_first``), recording this conductor
    and the delete's time (``delete_time``).  A conductor that
    dies between those releases and the transaction deleting the rows
    leaves them Deleting, holding their handles, for ``finish_deletes``:
    unmarked, they stayed Bound, their handles never used again, until
    an admin deleted them (Nova does not retry the delete of an
    instance's ARQs).  A marked ARQ is bound, unbound or failed no more
    (no transition starts from Deleting, and a bind's late writes need
    BindStarted): what it holds is what its releases release."""
    first = [row for row in rows if _releases_first(row)]
    if not first:
        return
    for row in first:
        if row.state != states.DELETING:
            mark.before[row.uuid] = row.state
    now = clock_db.utcnow()
    arq_db.mark_deleting(context, [row.uuid for row in first],
                         mark.conf.host, now, delete_time(mark.conf))


# Rounds of release-then-delete one delete may go through while binds
# keep changing what its ARQs hold.
DELETE_ROUNDS = 3


def _delete_releasing(conf, context, arq_uuids, instance_uuid,
                      guard_holding, rows, mark):
    """The delete of ARQs ``rows`` (as last read, those with an mdev or
    a fabric handle marked Deleting: ``_mark``) with something to
    release outside the transaction: mdevs and remote handles first,
    standalone claims after it (recorded in it: ``release_allocations``).
    The transaction deleting them reads them again, locked: where one now
    holds something not released (a bind ended meanwhile), nothing is
    deleted but the marks, and the releases run again for what they hold
    now."""
    for _round in range(DELETE_ROUNDS):
        if not rows:
            return rows, {}
        _release_mdevs(conf, context, rows)
        kept, landing = remote_pools.detach_for_release(conf, context,
                                                        rows)
        owed = set()
        rows, moved = _write_owing(
            context, _delete_released, context, arq_uuids, instance_uuid,
            guard_holding, rows, {**kept, **landing}, mark, owed)
        if moved is not None:
            _after_keeping(conf, context, kept, landing, owed)
            release_allocations(conf, rows, moved, 'deleted')
            return rows, moved
    raise exception.Conflict(
        reason='the accelerator requests kept being bound while they were '
               'deleted; try again')


def _delete_released(context, arq_uuids, instance_uuid, guard_holding,
                     released, kept, mark, owed):
    """Delete the ARQs if they hold what ``released`` held: (rows,
    moved), the releases of their standalone claims recorded (made after
    the commit, ``release_allocations``); (rows, None), writing only the
    marks of what they hold now (``_mark``), if not.  ``owed``: as for
    ``_unbind_released``."""
    owed.clear()
    rows = _deletable(context, arq_uuids, instance_uuid, guard_holding)
    if _holdings(rows) - _holdings(released):
        _mark(context, mark, rows)
        return rows, None
    moved = _leave_all(context, rows, states.DELETING, ANY_STATE,
                       delete=True, kept=kept, owed=owed)
    _owe_allocations(context, rows, moved)
    return rows, moved


def _holdings(rows):
    """What ARQ ``rows`` hold that is released outside the database."""
    return {(r.uuid, r.attach_handle_id, r.remote_handle_id, r.consumer_id,
             r.bind_id) for r in rows if _releases_outside(r)}


# -- a conductor starting again -----------------------------------------------

def recover(conf, context, started_at):
    """At start-up: fail at once the binds this conductor
    (``[DEFAULT]host``) started before ``started_at`` and left in
    BindStarted (it died in the middle), tell Nova, and re-send the events
    its previous run recorded and did not deliver, and finish the deletes
    it marked and did not end (``finish_deletes``).  Binds, events and
    deletes of other conductors are left to them.  Returns the binds
    failed."""
    owned = arq_db.owned_binding(context, conf.host, started_at)
    failed = _fail_abandoned(
        conf, context, owned, f'the conductor {conf.host} restarted while '
                              f'the bind was under way')
    if failed:
        LOG.warning('Failed %d bind(s) this conductor left unfinished when '
                    'it stopped', failed)
    finish_deletes(conf, context, started_at=started_at)
    resent = nova.resend_owned(conf, context, started_at)
    LOG.info('Start-up recovery of %s done: %d bind(s) failed, %d Nova '
             'event(s) re-sent', conf.host, failed, resent)
    return failed


# -- deletes cut short --------------------------------------------------------

def finish_deletes(conf, context, started_at=None):
    """Finish the deletes left Deleting (``_mark``): their conductor died
    (or lost its database) after, or while, releasing their mdevs and
    fabric handles, before it deleted their rows.  By the periodic, those
    past their time (``delete_time``: their conductor may still
    be carrying them until then); with ``started_at``, at a conductor's
    start, those it marked itself before (its previous run's), at once.
    Each is taken over (marked again, for this conductor) in a
    transaction that reads it locked, so that two conductors do not both
    finish it, then released again (removing an mdev already gone, or
    detaching a handle already detached, changes nothing) and deleted as
    any delete is, ``arq.delete`` notified (``previous_state``
    Deleting).  Returns how many were deleted."""
    now = clock_db.utcnow()
    owner = None if started_at is None else conf.host
    left = arq_db.deletes_left(context, now=now, owner=owner,
                               started_before=started_at)
    if not left:
        return 0
    admin = cyborg_context.get_admin_context()
    mark = _Mark(conf)
    rows = db_api.write_retrying(admin, _take_over, admin, mark, left, now,
                                 owner, started_at)
    if not rows:
        return 0
    uuids = [row.uuid for row in rows]
    LOG.warning('Finishing the delete of accelerator request(s) %s, left '
                'Deleting by a conductor that stopped before it ended',
                ', '.join(uuids))
    rows, moved = _delete_releasing(conf, admin, uuids, None, False, rows,
                                    mark)
    if moved:
        _notify_left(conf, admin, notify.ARQ_DELETE, rows, moved,
                     states.DELETING)
    return len(moved)


def _take_over(context, mark, uuids, now, owner, started_at):
    """The rows (``arq_db.get_to_change``) of the ARQs among ``uuids``
    still left Deleting, read locked, marked again for this conductor."""
    arq_db.lock(context, uuids)
    left = arq_db.deletes_left(context, now=now, owner=owner,
                               started_before=started_at, uuids=uuids)
    if not left:
        return []
    rows = arq_db.get_to_change(context, left)
    _mark(context, mark, rows)
    return rows


# -- the stuck-bind periodic -------------------------------------------------

def fail_stuck(conf, context):
    """Periodic: fail ARQs in BindStarted past their bind's deadline
    (their conductor died, or their work hung) and tell Nova; first,
    release the claims standalone allocations could not release for ARQs
    deleted meanwhile (``arq_allocation.release_left_claims``), and
    finish the deletes left Deleting past their deadline
    (``finish_deletes``).

    The deadline is the bind's own, its start plus the ``bind_timeout``
    of the conductor that started it (recorded with its start): that
    conductor may still be carrying the bind while this one's
    ``bind_timeout``, lower, has passed.  A bind with none recorded (a
    conductor of the previous release started it) is held to this
    conductor's."""
    from cyborg.conductor import arq_allocation

    arq_allocation.release_left_claims(conf, context)
    try:
        finish_deletes(conf, context)
    except Exception:  # noqa: BLE001 - the binds are failed all the same
        LOG.exception('Could not finish the deletes of accelerator '
                      'requests left Deleting; the next check tries again')
    now = clock_db.utcnow()
    stuck = arq_db.stuck(
        context, now, now - datetime.timedelta(seconds=conf.bind_timeout))
    if not stuck:
        return 0
    reasons = {row.uuid: _timed_out(conf, row) for row in stuck}
    _fail_abandoned(conf, context, {row.uuid: row.bind_id for row in stuck},
                    reasons.get)
    return len(stuck)


def _timed_out(conf, row):
    """Why the stuck-bind check fails the bind of an ``arq_db.stuck``
    row: the time it had, its own where it has one recorded."""
    if row.bind_timeout is None:
        return f'bind did not finish within {conf.bind_timeout} seconds'
    return (f'bind did not finish within {row.bind_timeout} seconds, the '
            f'[DEFAULT]bind_timeout of the conductor that started it '
            f'({row.bind_owner})')


def _fail_abandoned(conf, context, abandoned, reason):
    """Fail binds nobody carries on any more (BindStarted ARQs of a dead
    conductor), undoing what the bind may already have done outside the
    database, and tell Nova; returns how many were failed.
    ``abandoned``: {ARQ uuid: the bind it was found in}: an ARQ that has
    left that bind since (it ended, or was unbound and bound again) is
    left alone, its remote handle not detached.  ``reason``: why, the
    same for each, or a function of the ARQ's uuid."""
    if not abandoned:
        return 0
    reason_of = reason if callable(reason) else (lambda _uuid: reason)
    batch_id = str(uuidlib.uuid4())
    rows = [r for r in arq_db.get_to_change(context, list(abandoned))
            if r.state == states.BIND_STARTED and
            r.bind_id == abandoned[r.uuid]]
    # A remote handle the bind may have attached is detached only once
    # its ARQ has failed, as a standalone claim is released (below):
    # detached first, a bind that was only slow, its attach answered,
    # could still end Bound in between, holding a handle no longer
    # attached.  The transaction that fails the ARQ unlinks the handle
    # without freeing it, kept out of use for the host the bind attached
    # it to as after a refused detach (a check whose conductor dies next
    # leaves it to the reconcile); detach_kept then detaches and frees
    # it.  A bind that ended Bound first keeps its handle, attached.
    kept = {r.remote_handle_id: r.hostname for r in rows
            if r.remote_handle_id is not None}
    failed = []
    for row in rows:
        # A standalone allocation's claim in Placement is released only
        # once its ARQ has failed, for the same reason.  The transaction
        # that fails it records the release, so that with Placement away
        # it is done later (release_left_claims); an allocation that
        # ended Bound first keeps its claim, nothing recorded.
        if _fail(conf, context, batch_id, row.uuid, reason_of(row.uuid),
                 clock_db.utcnow(), kept=kept, bind_id=row.bind_id,
                 owe_release=bool(row.consumer_id)):
            failed.append(row)
    if failed:
        # Nova first: the failures are committed, and a fabric slow to
        # detach (up to [fabric]detach_timeout) would otherwise hold
        # them back past Nova's arq_binding_timeout.
        nova.deliver_batch(conf, context, batch_id)
    remote_pools.detach_kept(conf, context,
                             [r.remote_handle_id for r in failed
                              if r.remote_handle_id is not None])
    if failed:
        from cyborg.conductor import arq_allocation

        # Only the claim of the bind failed, under that bind's own
        # consumer (arq_allocation.consumer_of): where the ARQ was
        # unbound and allocated again since, the newer allocation claims
        # under a consumer of its own, which release_claim leaves.
        arq_allocation.release_failed(
            conf, context, [r for r in failed if r.consumer_id])
    return len(failed)


# -- notifications ------------------------------------------------------------
# Called after the commit of the change they announce.  Each first asks
# whether notifications are on at all, so that with them off (the default)
# the hot path builds nothing.

# ARQPayload 1.0: every key is always present (None when not applicable).
_PAYLOAD_FIELDS = ('uuid', 'device_profile_name', 'device_profile_group_id',
                   'project_id', 'instance_uuid', 'hostname',
                   'device_rp_uuid', 'deployable_uuid', 'attach_handle_type',
                   'attach_handle_uuid', 'attach_handle_info')


def _best_effort(notifier):
    """A notification is never worth failing (or half-finishing) the
    change it announces: its errors are logged."""
    @functools.wraps(notifier)
    def wrapper(*args, **kwargs):
        try:
            notifier(*args, **kwargs)
        except Exception:
            LOG.exception('Could not build the notification of %s',
                          notifier.__name__)
    return wrapper


def _outbox(conf, context):
    """An outbox for this change's notifications, or None when they are
    off (or the caller has no configuration to tell)."""
    if conf is None or not notify.enabled(conf):
        return None
    return notify.Outbox(conf, context)


def _payload(fields, state, previous_state=None, reason=None):
    data = {name: fields.get(name) for name in _PAYLOAD_FIELDS}
    data.update(state=state, previous_state=previous_state, reason=reason)
    return data


def _handle_fields(attach_type, handle_uuid, attach_info):
    if attach_type is None:
        return {}
    return {'attach_handle_type': attach_type,
            'attach_handle_uuid': handle_uuid,
            'attach_handle_info': json.loads(attach_info or '{}')}


def _row_fields(row):
    """Payload fields of an ``arq_db.get_to_change`` row."""
    return dict(_handle_fields(row.attach_handle_type,
                               row.attach_handle_uuid,
                               row.attach_handle_info),
                uuid=row.uuid, device_profile_name=row.device_profile_name,
                device_profile_group_id=row.device_profile_group_id,
                project_id=row.project_id, instance_uuid=row.instance_uuid,
                hostname=row.hostname, device_rp_uuid=row.device_rp_uuid,
                deployable_uuid=row.deployable_uuid)


def _bind_notice(row, binding, deployable_uuid):
    """What a bind's notifications say besides the binding itself (kept
    on the job: the worker reads nothing more to notify)."""
    return {'device_profile_name': row.device_profile_name,
            'device_profile_group_id': row.device_profile_group_id,
            'project_id': binding.get('project_id') or row.project_id,
            'deployable_uuid': deployable_uuid}


def _job_fields(job):
    return dict(job.get('notice') or {}, uuid=job['uuid'],
                hostname=job['hostname'], instance_uuid=job['instance_uuid'],
                device_rp_uuid=job['device_rp_uuid'])


@_best_effort
def _notify_created(conf, context, arqs):
    outbox = _outbox(conf, context)
    if outbox is None:
        return
    for arq in arqs:
        outbox.add(notify.ARQ_CREATE, _payload(arq, arq['state']))
    outbox.send()


@_best_effort
def _notify_bound(conf, context, job, handle):
    if not notify.enabled(conf):
        return
    fields = dict(_job_fields(job), **_handle_fields(
        handle.attach_type, handle.uuid, handle.attach_info))
    notify.send(conf, context, notify.ARQ_BIND_END,
                _payload(fields, states.BOUND, states.BIND_STARTED))


@_best_effort
def _notify_failed(conf, context, arq_uuid, reason, job=None):
    """``arq.bind.error``; without the bind's ``job`` (a stuck bind) the
    ARQ is read back for its binding."""
    if not notify.enabled(conf):
        return
    if job is not None:
        fields = _job_fields(job)
    else:
        rows = arq_db.get_to_change(context, [arq_uuid])
        fields = _row_fields(rows[0]) if rows else {'uuid': arq_uuid}
    notify.send(conf, context, notify.ARQ_BIND_ERROR,
                _payload(fields, states.BIND_FAILED, states.BIND_STARTED,
                         reason),
                priority=notify.ERROR)


@_best_effort
def _notify_left(conf, context, event, rows, moved, state):
    """One ``event`` per ARQ of ``rows`` that moved, with the binding it
    had before."""
    outbox = _outbox(conf, context)
    if outbox is None:
        return
    for row in rows:
        previous = moved.get(row.uuid)
        if previous is not None:
            outbox.add(event, _payload(_row_fields(row), state, previous))
    outbox.send()
