"""FPGA programming: at bind (profile group ``accel:bitstream_id`` or
``accel:function_id``) and by an admin (``PATCH
/deployables/{uuid}/program``).

One programming, in order:

1. the image's metadata from Glance, looked up for the project of the
   ARQ (of the administrator, for an admin programming): an image that
   project may not use is not found (``glance.usable``), and only the
   trusted owners', public and the project's own images count for a
   function id (``glance.function_id_candidates``); nothing to do
   when the deployable already runs it (so admin programming is
   idempotent); refused (400) when it is larger than
   ``[glance]max_bitstream_size`` (the bitstream goes to the agent
   inline, in one RPC message);
2. the data downloaded (refused as soon as it passes that size, where
   Glance gave none) and checked against Glance's digest;
3. the deployable marked as being programmed (``programming_until``: the
   deadline plus ``OVERDUE_AFTER``) and its card's providers synced: the
   mark reserves every provider of the card (each deployable of its
   device, every VF of a card with VFs) whole in Placement, so nothing
   is scheduled onto a device that is being rewritten, and every
   Placement sync meanwhile keeps them so;
4. the agent programs the device; the deployable's ``bitstream_id`` is
   set, and the new function's ``CUSTOM_FPGA_FUNCTION_ID_*`` trait kept
   as its ``trait_fpga_function_id`` attribute (a function id too long
   for a Placement trait is refused before step 1's download); the
   host's next report, which the agent may have read before the end,
   keeps that image (``inventory_apply.PROGRAMMED_DIGEST``);
5. the mark cleared and the card's providers synced from the database,
   whatever happened, except when the agent did not answer in time: their
   reservations and traits are what the deployables now are (the new
   function's trait; reserved still if the device went into maintenance
   or failed meanwhile).  A failure before step 4 leaves the traits and
   ``bitstream_id`` as they were, and is raised.

A programming has until its deadline (``[DEFAULT]bind_timeout`` after
the bind or the administrator's request began).  One whose time ran out
before the agent could be asked (the download took it) programs nothing
and raises ``ProgrammingTimedOut``: a 503 for an administrator's program,
the reason of a failed bind.

An agent that does not answer by the deadline may still be running the
vendor tool, and a tool that ran and failed may have written part of the
card (``ProgrammingOutcomeUnknown``), so what it holds is unknown: it
stays reserved, its ``bitstream_id`` and function trait are forgotten,
and it is marked ``unhealthy`` (a ``fatal`` reading made here, code
``program:unfinished``).
The health state machine brings it back: after the hold-down the agent
re-probes it, and answers "not yet" while the programming still runs.
The host's report digest is dropped with the image, so the agent's next
report is a full one: an image it reported already (the tool succeeded
after all, before the conductor gave up) is recorded again, as is one it
reports later, and the next programming asking for it advertises its
function trait without loading it again.  A conductor that dies
mid-programming leaves the mark set: once its time has passed, any
conductor's periodic ``take_out_overdue`` does the same to the card, one
conductor only: the one whose guarded update moves the mark on from the
overdue time it read (the card stays marked meanwhile, and goes overdue
again if that conductor stops too, not while it works: it keeps the mark
ahead of the clock however long the take-out takes, ``_Kept``).

Programming rewrites the whole card (one with VFs is programmed through
its PF, whichever of its deployables asks), so it is refused while
another instance holds a handle of any of the card's deployables
(counted again once the mark is committed, waiting for binds still
taking one); a bind whose programming surely loads another image than
the card runs is refused so in its PATCH (``loads_another_image``,
``arq_binding._refuse_in_use``).  The mark is on the deployable asked
for, and counts for the whole card: a bind's take checks every
deployable of the card
(``attach_handles.take``), so a bind on another VF of a card being
programmed is refused as one on the deployable itself is, unless it
programs the card itself.  A bind that programs counts its own handle
only while its ARQ still holds it for that bind (unbound meanwhile, it
programs nothing).  Programmings of one deployable are serialised in this
conductor, and those of one card across conductors by the mark itself:
it is set only where none of the card's deployables has one
(``claim_programming``, the card's rows locked), and a programming that
finds one, even for an image the card already runs, is refused (409; a
bind fails), as the card is about to change or, left behind by a
conductor that died, holds what nobody knows.

The agent's answer tells whether the card changed: a refusal it makes
before running the tool (a card or driver it does not have, a bad
bitstream, a card it is programming already, a tool it cannot find or
start) leaves the card as it was (409), its image still recorded; the
tool failing, or any other error of the agent's (the tool may have run),
is an unknown outcome, as above.  So is a call the message broker failed
after it may have taken it (one that hung rather than stopped delivers
it once it recovers); only a call never sent (its reply queue not open,
``rpc.ReplyQueueNotOpen``) leaves the card as it was (503).

A reboot or a power loss takes the image from a card (the agent's next
report shows none): where the card's Bound ARQs were programmed at bind
and all asked for one image, it is programmed again (``restore_lost``),
after that report's transaction and sync on a thread of the conductor
(``restore_later``: the agent waits for its report's answer), and by
the periodic check of every conductor (one that stopped before it
finished, an attempt that failed: this conductor's next one waits
``[conductor]reprogram_retry_interval``).  It is an ordinary
programming, of the image their bind chose (``image_for``, one every
holder's project may use, looked up once: ``_restored_image``), for
which their handles count as the caller's (``binds``), and which the
mark serialises across conductors like any other: one that sets the mark
after another conductor's restore of the card ended reads the card
again and finds the image (``_loaded_since``): it releases the mark
without asking the agent; one that finds the mark set tries at its next
attempt, without the back-off.  A stopping conductor waits for the
restores it runs (``stop_restores``).  Holders asking for
different images (or one for none) are left to the report's WARNING,
as is every card with ``[conductor]restore_fpga_images`` off.

Notifications (payload ``ProgramPayload``): ``deployable.program.start``
once the card is this programming's (the mark set, no handle taken
meanwhile), just before the agent is asked, then
``deployable.program.end`` or ``deployable.program.error`` (priority
error, with the reason) once the reservation is restored and the new
image recorded.  An image already loaded, a device in use, or the mark
set by another request (before or while the image downloaded) sends
nothing: no programming ran.  A download that fails (Glance, the digest,
the size) or a deadline gone before the agent could be asked sends its
start then, right before its error; its ``duration``, like every
programming's, counts from before the download.  A consumer reading the
info and error topics apart orders them by the envelope's
``timestamp``, not by arrival.
``cyborg_conductor_programmings_total`` counts the programmings this
conductor ran: not those refused before anything ran on the card (the
mark set by another request, a handle taken while the image downloaded,
the request never sent to the agent).  Only the last sends anything:
its start, sent as the agent was asked, answered by an error.
"""

import base64
import contextlib
import datetime
import itertools
import json
import threading
import time
import uuid as uuidlib

import futurist
from futurist import waiters
from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_utils import uuidutils

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import notify
from cyborg.common import rpc
from cyborg.common import states
from cyborg.conductor import glance
from cyborg.conductor import health
from cyborg.conductor import health_machine
from cyborg.conductor import inventory_apply
from cyborg.conductor import placement_sync
from cyborg.conductor import silence
from cyborg.db import api as db_api
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import clock as clock_db
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import hosts as host_db
from cyborg.objects import base as objects_base
from cyborg.objects import deployables
from cyborg.objects import health as health_objects
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

# The deployable attribute holding its function trait: a ``trait*`` key,
# so the conductor's Placement sync keeps advertising it.
TRAIT_ATTRIBUTE = 'trait_fpga_function_id'

# The end of the message of a programming whose outcome is unknown.
_OUT = 'the card is out of the schedule until a re-probe finds it well'

# Seconds after a programming's deadline before another conductor takes
# its mark for one its conductor left behind (dead mid-programming): the
# live conductor gives up at the deadline and clears the mark itself.
OVERDUE_AFTER = 60

# Seconds between two moves of a mark that this conductor holds while it
# takes a card out (``_Kept``): well within OVERDUE_AFTER.
_KEEP_EVERY = OVERDUE_AFTER / 4

_LOCKS = {}
_LOCKS_LOCK = threading.Lock()

# What an agent answers when it refuses a programming before running the
# vendor tool (``AgentManager.fpga_program``): the card is as it was.
_REFUSED_BEFORE = (exception.ResourceNotFound, exception.Invalid,
                   exception.Conflict)


def function_trait(function_id):
    """The Placement trait advertising an FPGA function id: the one the
    agent's drivers report for it (``inventory.function_trait``).
    Invalid when Placement would refuse it
    (``inventory.function_trait_problem``): checked before anything is
    downloaded or written."""
    problem = inventory.function_trait_problem(function_id)
    if problem is not None:
        raise exception.Invalid(reason=problem)
    return inventory.function_trait(function_id)


def program_deployable(conf, context, deployable_uuid, image_uuid):
    """Admin programming: load Glance image ``image_uuid`` onto the
    deployable; returns the deployable.  A no-op when it is loaded.  The
    image is one the administrator's project may use
    (``glance.usable``)."""
    target = deployable_db.program_target(context, deployable_uuid)
    if target is None:
        raise exception.ResourceNotFound(resource='Deployable',
                                         id=deployable_uuid)
    if target.device_type != 'FPGA':
        raise exception.Invalid(
            reason=f'deployable {deployable_uuid} is a '
                   f'{target.device_type}, not an FPGA')
    image = glance.get_image(conf, image_uuid, context.project_id)
    deadline = clock_db.utcnow() + datetime.timedelta(
        seconds=conf.bind_timeout)
    program(conf, context, target, image, deadline, own_handles=0)
    return objects_base.to_dict(deployables.Deployable.get(context,
                                                           deployable_uuid))


def group_problem(group):
    """Why the programming a profile group asks for is refused before
    anything is read or downloaded (it names both an image and a
    function, or a function id too long for a Placement trait), or
    None."""
    function_id = group.get('accel:function_id')
    if function_id and group.get('accel:bitstream_id'):
        return 'a group may name accel:bitstream_id or accel:function_id, ' \
               'not both'
    if function_id:
        return inventory.function_trait_problem(function_id)
    return None


def program_for_bind(conf, context, deployable_id, group, deadline,
                     project_id, arq_uuid=None, bind=None):
    """Program the bound deployable as the profile group asks (the bind
    of ARQ ``arq_uuid`` has taken one of its handles); ``bind``: (ARQ
    uuid, bind id, handle id) of that bind, which must still hold the
    handle.  The image is one ``project_id``, the ARQ's project, may
    use (None: only images every project may use)."""
    image = image_for(conf, group, project_id)
    target = deployable_db.program_target_by_id(context, deployable_id)
    if target is None:
        raise exception.BindFailed(reason='the deployable is gone')
    program(conf, context, target, image, deadline, own_handles=1,
            function_id=group.get('accel:function_id'), arq_uuid=arq_uuid,
            binds=(bind,) if bind else ())


def image_for(conf, group, project_id):
    """The Glance image (its metadata) the profile group asks for, as
    ``project_id`` finds it: its ``accel:bitstream_id``
    (``glance.get_image``), or the one image with its
    ``accel:function_id`` (``glance.find_by_function_id``).  Invalid
    for a group ``group_problem`` refuses, before Glance is asked."""
    problem = group_problem(group)
    if problem is not None:
        raise exception.Invalid(reason=problem)
    bitstream_id = group.get('accel:bitstream_id')
    if bitstream_id:
        return glance.get_image(conf, bitstream_id, project_id)
    return glance.find_by_function_id(conf, group.get('accel:function_id'),
                                      project_id)


def program(conf, context, target, image, deadline, own_handles,
            function_id=None, arq_uuid=None, binds=()):
    """Steps 2-6 above; returns False when the image was already loaded.
    ``own_handles``: handles of the card the caller holds;
    ``arq_uuid``: the ARQ whose bind programs, for the notifications;
    ``binds``: (ARQ uuid, bind id, handle id) of each bind whose handle
    is counted among the caller's, only while its ARQ holds it for that
    bind (a bind that programs; the Bound ARQs whose image is restored,
    ``restore_lost``)."""
    asked_function = function_id
    function_id = function_id or image.get(glance.FUNCTION_ID_PROPERTY)
    # Refused before anything is read, downloaded or written.
    trait = function_trait(function_id) if function_id else None
    with _deployable_lock(target.deployable_id):
        current = deployable_db.program_target_by_id(
            context, target.deployable_id)
        marked = deployable_db.card_programming(context,
                                                target.deployable_id)
        if marked is not None:
            # Another conductor's programming (or one left behind), of
            # this deployable or of another of its card's: the card is
            # about to change, or holds what nobody knows.
            raise _marked_by_another(being_programmed(
                target.deployable_uuid, marked))
        if current.bitstream_id == image['id']:
            LOG.info('Deployable %s already runs image %s',
                     target.deployable_uuid, image['id'])
            if trait:
                _advertised(conf, context, target, trait)
            return False
        glance.check_size(conf, image)
        _check_unused(context, target, own_handles, binds)
        notice = _Notice(conf, context, target, image, function_id, arq_uuid)
        try:
            fetching = time.monotonic()
            data = glance.download(conf, image)
            fetched = time.monotonic() - fetching
            until = deadline + datetime.timedelta(seconds=OVERDUE_AFTER)
            with _reserved(conf, context, target, until):
                # Read again under the mark: another conductor's
                # programming may have loaded the image while this one
                # downloaded it.  Then the mark is released (``_reserved``
                # on its way out), the agent not asked.
                loaded = _loaded_since(context, target, image,
                                       asked_function, trait,
                                       current.bitstream_id)
                if not loaded:
                    _program_marked(conf, context, target, image, data,
                                    deadline, fetched, trait, own_handles,
                                    binds, notice)
        except exception.ProgrammingOutcomeUnknown as exc:
            LOG.warning('%s', exc)
            _out_until_probed(
                conf, context, target, until,
                f"programming with image {image['id']} "
                f"{exc.kwargs['outcome']}; the card's outcome is unknown")
            notice.failed(exc)
            raise
        except _Refused as refused:
            # Nothing ran on the card: no programming to count.
            notice.refused(refused.error)
            raise refused.error from refused.error.__cause__
        except Exception as exc:
            notice.failed(exc)
            raise
        if loaded:
            LOG.info('Deployable %s: image %s loaded by another '
                     'programming meanwhile', target.deployable_uuid,
                     image['id'])
            return False
        notice.ended()
    LOG.info('Deployable %s programmed with image %s',
             target.deployable_uuid, image['id'])
    return True


def _program_marked(conf, context, target, image, data, deadline, fetched,
                    trait, own_handles, binds, notice):
    """Step 4, the mark set: the handles counted again, the agent asked,
    the image recorded."""
    # Again now that binds see the mark: one that took a handle since
    # the first count would get a card rewritten under it.
    try:
        _check_unused(context, target, own_handles, binds)
    except (exception.InUse, exception.BindFailed) as exc:
        raise _Refused(exc) from None
    # The card is this programming's: it begins.
    notice.started()
    _run_agent(conf, context, target, image, data, deadline, fetched)
    db_api.write_retrying(context, _recorded, context, target, image['id'],
                          trait)


def _loaded_since(context, target, image, asked_function, trait, before):
    """Whether the deployable, read again once the mark is this
    programming's, runs the image: ``image`` itself, or, for a caller
    that asked for function ``asked_function``, another image recorded
    with its function trait since the first read (whose image was
    ``before``): another conductor's programming of the card (a restore
    of the same card, ``restore_lost``, or a bind asking for the same
    image) ended while this one downloaded.  Without it, that card would
    be programmed twice, the second time under the instance that the
    first programmed it for.  One statement (two for such a function
    id)."""
    current = deployable_db.program_target_by_id(context,
                                                 target.deployable_id)
    if current is None or current.bitstream_id is None:
        return False
    if current.bitstream_id == image['id']:
        return True
    return bool(asked_function and current.bitstream_id != before
                and deployable_db.function_trait(
                    context, target.deployable_id, TRAIT_ATTRIBUTE) == trait)


def being_programmed(deployable_uuid, marked):
    """Why deployable ``deployable_uuid`` cannot be programmed now:
    ``marked``, (uuid, mark) of the deployable of its card that a
    programming marks."""
    uuid, until = marked
    through = ('' if uuid == deployable_uuid
               else f' through deployable {uuid} of the same card')
    return (f'deployable {deployable_uuid} is being programmed'
            f'{through} (until {until:%Y-%m-%d %H:%M:%S} UTC)')


def _marked_by_another(reason):
    """The Conflict of a programming that finds the card marked by
    another (its ``marked`` attribute true): a restore (``_restore``)
    takes it as "not now", unlike an agent's refusal (also a
    Conflict)."""
    error = exception.Conflict(reason=reason)
    error.marked = True
    return error


def programming_here(deployable_id):
    """Whether a programming of the deployable runs, or waits to run, in
    this conductor (``_deployable_lock``): a bind that programs it waits
    for that one, then reads the card again."""
    with _LOCKS_LOCK:
        return deployable_id in _LOCKS


class _Refused(Exception):
    """A programming refused before anything ran on the card (the mark
    set by another request, a handle taken meanwhile, the agent not
    reached): ``error``, what the caller gets.  Never leaves this
    module."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class _Notice:
    """The notifications and metrics of one programming, its time counted
    from when it is made (before the download).  ``start`` is sent by
    ``started``, once the card is this programming's (its mark set, no
    handle taken meanwhile), just before the agent is asked; a failure
    before it (the download, the time gone) sends it then, before its
    error.  With notifications off it builds and sends nothing, and
    counts the outcome (``metrics.CONDUCTOR_PROGRAMMINGS``) all the
    same; a refusal (``refused``) is not counted."""

    def __init__(self, conf, context, target, image, function_id, arq_uuid):
        self._conf = conf
        self._context = context
        self._started = time.monotonic()
        self._announced = False
        self._data = None
        if not notify.enabled(conf):
            return
        self._data = {
            'host': target.hostname, 'deployable_uuid': target.deployable_uuid,
            'deployable_name': target.name, 'device_rp_uuid': target.rp_uuid,
            'image_uuid': image['id'], 'function_id': function_id,
            'arq_uuid': arq_uuid, 'duration': None, 'reason': None}

    def started(self):
        """Send ``start``, once."""
        if not self._announced:
            self._announced = True
            self._send(notify.PROGRAM_START, notify.INFO)

    def ended(self):
        self.started()
        self._send(notify.PROGRAM_END, notify.INFO,
                   duration=self._elapsed(metrics.PROGRAMMED))

    def failed(self, error):
        outcome = (metrics.PROGRAMMING_OUTCOME_UNKNOWN
                   if isinstance(error, exception.ProgrammingOutcomeUnknown)
                   else metrics.PROGRAMMING_FAILED)
        self.started()
        self._error(error, self._elapsed(outcome))

    def refused(self, error):
        """A refusal before anything ran on the card, nothing counted:
        nothing sent before the card was this programming's (the mark
        set by another request, a handle taken meanwhile); the agent not
        reached, its ``start`` (sent as the agent was asked) answered by
        an error."""
        if self._announced:
            self._error(error, round(time.monotonic() - self._started, 3))

    def _error(self, error, duration):
        self._send(notify.PROGRAM_ERROR, notify.ERROR, duration=duration,
                   reason=(str(error) or type(error).__name__)[:1000])

    def _elapsed(self, outcome):
        """Seconds since the start, counted and observed as ``outcome``."""
        seconds = time.monotonic() - self._started
        metrics.CONDUCTOR_PROGRAMMINGS.labels(outcome).inc()
        metrics.CONDUCTOR_PROGRAMMING_SECONDS.labels(outcome).observe(
            seconds)
        return round(seconds, 3)

    def _send(self, event, priority, **changes):
        if self._data is not None:
            notify.send(self._conf, self._context, event,
                        dict(self._data, **changes), priority=priority)


def _loaded(context, deployable_id, image_uuid, trait):
    deployable_db.set_bitstream(context, deployable_id, image_uuid)
    deployable_db.set_function_trait(context, deployable_id,
                                         TRAIT_ATTRIBUTE, trait)


def _recorded(context, target, image_uuid, trait):
    """The image the agent loaded and its function trait recorded, under
    the host's lock (serialised with its reports), and the host's digest
    made ``inventory_apply.PROGRAMMED_DIGEST``: the agent's report in
    flight may have been read before the programming ended, and would
    put the old image back; stored after this, it keeps this image, and
    the agent's next report says what the card runs."""
    host_db.lock(context, target.hostname)
    _loaded(context, target.deployable_id, image_uuid, trait)
    host_db.update(context, target.hostname,
                   report_digest=inventory_apply.PROGRAMMED_DIGEST)


def _check_unused(context, target, own_handles, binds=()):
    """InUse when an instance other than the caller's holds a handle."""
    held = db_api.write_retrying(context, _held, context, target, binds)
    if held > own_handles:
        raise in_use(target.deployable_uuid)


def in_use(deployable_uuid):
    """Why the deployable cannot be programmed: an instance other than
    the caller's holds a handle of its card."""
    return exception.InUse(
        resource='Deployable', id=deployable_uuid,
        reason='another instance uses it with its current bitstream')


def loads_another_image(context, deployable_id, group, current):
    """Whether programming the deployable as the profile group asks
    (``group_problem`` found nothing) surely loads an image other than
    ``current``, the one it runs (its ``bitstream_id``), known without
    asking Glance: ``program`` then counts its card's handles, rather
    than find the image loaded already.  So when it runs none; for
    ``accel:bitstream_id``, when that is another image; for
    ``accel:function_id``, when the function trait recorded with the
    image it runs (``_recorded``) is another function's: any image with
    the function id asked for is then another image.  False where only
    Glance can tell: the same trait (Glance may still pick another
    image), none recorded with an image (one a report recorded, after a
    programming whose outcome was unknown: ``_forgotten``), or a
    bitstream id that is no uuid.  Read in a bind's transaction (the
    trait with a share lock, as ``deployable_db.card_for_bind`` reads
    ``current``)."""
    if current is None:
        return True
    bitstream_id = group.get('accel:bitstream_id')
    if bitstream_id:
        # Glance names an image by its uuid however the profile spells it.
        return (uuidutils.is_uuid_like(bitstream_id)
                and uuidutils.is_uuid_like(current)
                and uuidlib.UUID(bitstream_id) != uuidlib.UUID(current))
    recorded = deployable_db.function_trait(context, deployable_id,
                                            TRAIT_ATTRIBUTE, lock=True)
    return (recorded is not None
            and recorded != function_trait(group['accel:function_id']))


def _held(context, target, binds):
    """How many of the deployable's handles are held (see
    ``count_held``), the caller's (``binds``) counted only while each ARQ
    still holds its handle for its bind: BindFailed when one does not (it
    was unbound, and another instance may hold the handle now)."""
    held = handle_db.count_held(context, target.deployable_id)
    for arq_uuid, bind_id, handle_id in binds:
        if arq_db.handle_holder(context, handle_id) != bind_id:
            raise exception.BindFailed(
                reason=f'accelerator request {arq_uuid} was unbound while '
                       f'its device was to be programmed')
    return held


def _advertised(conf, context, target, trait):
    """The function trait of an image the card runs already, advertised
    if it is not (the agent's report recorded an image that a programming
    given up on loaded after all, or one loaded before cyborg ran)."""
    if deployable_db.function_trait(context, target.deployable_id,
                                    TRAIT_ATTRIBUTE) == trait:
        return
    db_api.write_retrying(context, _advertise_in, context, target, trait)
    _sync(conf, context, target)


def _advertise_in(context, target, trait):
    """The function trait, and the host no longer taken as synced (a
    failed ``_sync`` is the reconcile's to finish).  The host's row
    first, as every writer of a host's rows: the attribute's insert
    share-locks the deployable (MariaDB's foreign key check), which a
    health write holding the host's row may be about to write."""
    host_db.update(context, target.hostname, placement_synced=False)
    deployable_db.set_function_trait(context, target.deployable_id,
                                     TRAIT_ATTRIBUTE, trait)


def _run_agent(conf, context, target, image, data, deadline, fetched):
    """Have the agent write ``data`` onto the card by ``deadline``;
    ``fetched``: the seconds its download from Glance took."""
    remaining = (deadline - clock_db.utcnow()).total_seconds()
    if remaining <= 0:
        raise exception.ProgrammingTimedOut(
            what=f"deployable {target.deployable_uuid} with image "
                 f"{image['id']}",
            reason=f'its time ([DEFAULT]bind_timeout, {conf.bind_timeout} '
                   f's) ran out before the agent could be asked; '
                   f'downloading the bitstream from Glance took '
                   f'{fetched:.0f} s')
    bitstream = {'image_uuid': image['id'],
                 'data': base64.b64encode(data).decode('ascii'),
                 'checksum': image.get('checksum')}
    agent = agent_rpcapi.AgentAPI(conf, timeout=max(int(remaining), 1))
    try:
        programmed = agent.fpga_program(context, target.hostname,
                                        target.cpid_info, bitstream,
                                        target.driver_name)
    except messaging.MessagingTimeout as exc:
        raise exception.ProgrammingUnfinished(
            reason=f'the agent on {target.hostname} did not finish '
                   f'programming {target.cpid_info} within '
                   f'{max(int(remaining), 1)} s; {_OUT}',
            outcome='did not end in time') from exc
    except Exception as exc:
        unreached = agent_rpcapi.not_reached(exc, target.hostname)
        if isinstance(exc, rpc.ReplyQueueNotOpen):
            # Never sent, nor goes out later: the card is as it was.
            error = exception.ServiceUnavailable(
                reason=f'{unreached}; {target.cpid_info} was not '
                       f'programmed')
            error.__cause__ = exc
            raise _Refused(error) from exc
        if unreached is not None:
            # Published perhaps: a broker that hung rather than stopped
            # delivers what it took once it recovers, after the mark is
            # gone.  The card's outcome is unknown.
            raise exception.ProgrammingUnfinished(
                reason=f'{unreached}; the request to program '
                       f'{target.cpid_info} may still reach it; {_OUT}',
                outcome='not known to have reached the agent') from exc
        reason = agent_rpcapi.refusal(exc)
        if reason is None:
            raise           # not reached: nothing ran
        refused = (f'the agent on {target.hostname} could not program '
                   f'{target.cpid_info}: {reason}')
        if any(agent_rpcapi.raised(exc, cls) for cls in _REFUSED_BEFORE):
            # Refused before the tool ran: the card is as it was.
            raise exception.Conflict(reason=refused) from exc
        # The tool failed, or something after it started (recording what
        # it loaded, the privileged daemon): the card may have changed.
        raise exception.ProgrammingFailed(
            reason=f'{refused}; {_OUT}',
            outcome=f'failed: {reason}') from exc
    if not programmed:
        raise exception.BindFailed(
            reason=f'the agent on {target.hostname} could not program '
                   f'{target.cpid_info}')


def take_out_overdue(conf, context):
    """Periodic (``periodics.JOBS``): programmings whose conductor died
    mid-way (their mark outlived its time) leave their card in an unknown
    state: take it out as for an unfinished one.  Returns how many."""
    overdue = deployable_db.overdue_programmings(context,
                                                 clock_db.utcnow())
    taken = 0
    for deployable_id, until in overdue:
        with _deployable_lock(deployable_id):
            # Read under the lock: a programming of this conductor that
            # just ended has cleared its mark, or set a new one.
            target = deployable_db.program_target_by_id(context,
                                                        deployable_id)
            if target is None or target.programming_until != until:
                continue
            # Every conductor runs this job: the one that moves the mark
            # on from the overdue time it read takes the card out, the
            # others find it moved.  Still set, it keeps binds and other
            # programmings off the card; left by a take-out that fails or
            # whose conductor stops, it goes overdue again.
            taking = clock_db.utcnow() + datetime.timedelta(
                seconds=OVERDUE_AFTER)
            if not db_api.write_retrying(
                    context, deployable_db.set_programming_until, context,
                    deployable_id, taking, was=until):
                continue
            LOG.warning('Deployable %s on %s: a programming did not end by '
                        '%s (its conductor stopped?); taking it out of the '
                        'schedule until a re-probe', target.deployable_uuid,
                        target.hostname, until)
            _out_until_probed(
                conf, context, target, taking,
                f"a programming did not end by {until:%Y-%m-%d %H:%M:%S} "
                f"UTC (its conductor stopped?); the card's outcome is "
                f"unknown")
            metrics.CONDUCTOR_PROGRAMMINGS.labels(
                metrics.PROGRAMMING_ABANDONED).inc()
            taken += 1
    return taken


def _out_until_probed(conf, context, target, until, reason):
    """The card's state after a programming that did not end in time: no
    image, no function trait, the agent asked for a full report
    (``_forgotten``), unhealthy (out of the schedule until the hold-down
    and a re-probe), then its programming mark (``until``) cleared and
    its provider synced.  Each step is tried; a failure is logged, and
    one before the mark is cleared leaves it for ``take_out_overdue`` to
    try again.  Meanwhile the mark is kept ahead of the clock (``_Kept``):
    a step that outlives ``OVERDUE_AFTER`` (the health change's Placement
    sync, Placement hung) must not make it overdue, for another conductor
    to take the card out again while this one still does; should another
    conductor have moved it all the same, the steps left and the mark are
    left to that one."""
    steps = (
        ('forget its image', lambda: db_api.write_retrying(
            context, _forgotten, context, target)),
        ('mark it unhealthy', lambda: health.apply_readings(
            conf, context, target.hostname, [health_objects.Reading(
                device=health.device_key(target._mapping),
                deployable=target.name, severity=states.FATAL,
                source='program', code=health_machine.PROGRAM_UNFINISHED,
                reason=reason)])),
    )
    failed = False
    with _Kept(target, until) as kept:
        for what, step in steps:
            if kept.lost:
                break
            try:
                step()
            except Exception:
                failed = True
                LOG.exception('Deployable %s: could not %s after its '
                              'unfinished programming',
                              target.deployable_uuid, what)
    if kept.lost:
        return
    if not failed:
        db_api.write_retrying(context, _unmarked, context, target,
                              kept.until)
    # The health change synced it if the health moved; not if the card
    # was out already, and its function trait is gone either way.
    _sync(conf, context, target)


class _Kept:
    """While the block runs, the deployable's programming mark, ``until``
    as it enters, is moved on every ``_KEEP_EVERY`` seconds to
    ``OVERDUE_AFTER`` from now, on a thread of its own (with a context of
    its own), where it still is what this conductor last set: it goes
    overdue only once this conductor stops.  ``until``: the mark as last
    set (the one to clear after the block); ``lost``: another conductor
    moved it (it took the card over), and it is no longer kept."""

    def __init__(self, target, until):
        self.until = until
        self.lost = False
        self._target = target
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._keep, daemon=True,
            name=f'keep-mark-{target.deployable_uuid}')

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()

    def _keep(self):
        context = cyborg_context.get_admin_context()
        while not self._stop.wait(_KEEP_EVERY):
            later = clock_db.utcnow() + datetime.timedelta(
                seconds=OVERDUE_AFTER)
            try:
                moved = db_api.write_retrying(
                    context, deployable_db.set_programming_until, context,
                    self._target.deployable_id, later, was=self.until)
            except Exception:
                LOG.exception('Deployable %s: could not keep its '
                              'programming mark ahead of the clock',
                              self._target.deployable_uuid)
                continue
            if not moved:
                LOG.warning('Deployable %s: its programming mark was moved '
                            'by another conductor while this one took the '
                            'card out; leaving the card to it',
                            self._target.deployable_uuid)
                self.lost = True
                return
            self.until = later


def _forgotten(context, target):
    """No image and no function trait recorded for the deployable, and
    no report digest for its host, under the host's lock (serialised with
    its reports).  The image may be one the agent has reported since the
    programming began: a tool that succeeded after all, reported before
    its conductor gave up or while a dead conductor's mark waited to go
    overdue.  The agent's inventory will not change again, so its next
    reports would be unchanged deltas that record nothing, and the card
    would be taken as running nothing until some full report.  With no
    digest stored, the next delta is answered ``need_full`` (as after
    ``cyborg-manage host forget``), and the full report records what the
    agent says the card runs: nothing while the tool runs or after it
    failed (the agent removes its record first), the image once it
    succeeded.  The host is no longer taken as synced: the trait goes."""
    host = host_db.lock(context, target.hostname)
    _loaded(context, target.deployable_id, None, None)
    # Another card's image recorded since the host's last report keeps
    # the next one from putting an older image back (``_recorded``); it
    # asks for a full report all the same.
    programmed = (host is not None and host['report_digest'] ==
                  inventory_apply.PROGRAMMED_DIGEST)
    host_db.update(context, target.hostname,
                   report_digest=(inventory_apply.PROGRAMMED_DIGEST
                                  if programmed else None),
                   placement_synced=False)


@contextlib.contextmanager
def _reserved(conf, context, target, until):
    """Mark the deployable as being programmed until ``until`` and sync
    its provider: the database's mark reserves it whole, in this sync and
    every other meanwhile.  Conflict, nothing written, when a mark is set
    already (another conductor programs it).  After
    ``ProgrammingOutcomeUnknown`` the mark is kept: ``_out_until_probed``
    takes it from there."""
    db_api.write_retrying(context, _claimed, context, target, until)
    try:
        _sync(conf, context, target)
        yield
    except exception.ProgrammingOutcomeUnknown:
        raise
    except BaseException:
        _release(conf, context, target, until)
        raise
    _release(conf, context, target, until)


def _release(conf, context, target, until):
    """Clear the programming mark, then sync the provider from the
    database: its reservation is what the card became meanwhile (back to
    0 unless it went into maintenance or failed), its traits those of
    what it now runs."""
    db_api.write_retrying(context, _unmarked, context, target, until)
    _sync(conf, context, target)


def _claimed(context, target, until):
    """Set the programming mark where none is on the card; the host
    unsynced.  Committed before the handles are counted again
    (``_check_unused``): a bind taking one meanwhile either finds the
    mark or holds the handle's lock, which the count waits for.

    The host's row is locked first, then the card's: the order of a
    report's or a health check's writes (the host, then its
    deployables), so a claim and one of them never wait for each other
    in a cycle (a deadlock on MariaDB and PostgreSQL)."""
    host_db.lock(context, target.hostname)
    if not deployable_db.claim_programming(context, target.deployable_id,
                                           until):
        raise _Refused(_marked_by_another(
            f'deployable {target.deployable_uuid} is being programmed by '
            f'another request (through it or another deployable of its '
            f'card)'))
    host_db.update(context, target.hostname, placement_synced=False)


def _unmarked(context, target, was):
    """Clear the programming mark if it is still ``was`` (a later
    programming's is left alone); the host is no longer taken as synced
    until a sync of it completes, so a failed ``_sync`` leaves it to the
    reconcile.  The host's row first, as in ``_claimed``."""
    host_db.lock(context, target.hostname)
    deployable_db.set_programming_until(context, target.deployable_id,
                                        None, was=was)
    host_db.update(context, target.hostname, placement_synced=False)


def _sync(conf, context, target):
    """Make the providers of the deployable's card (each of its device's
    deployables) what the database says: its mark, set or cleared,
    reserves or frees every one of them.  A failure is logged and left
    to the next report or the reconcile."""
    providers = deployable_db.card_providers(context, target.deployable_id)
    if providers:
        placement_sync.sync_providers(conf, context, target.hostname,
                                      providers)


@contextlib.contextmanager
def _deployable_lock(deployable_id):
    """Serialise the programmings of one deployable in this conductor.
    The lock lives while someone holds or waits for it: {deployable id:
    [lock, users]}."""
    with _LOCKS_LOCK:
        entry = _LOCKS.setdefault(deployable_id, [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _LOCKS_LOCK:
            entry[1] -= 1
            if not entry[1]:
                del _LOCKS[deployable_id]


# -- images a reboot took -----------------------------------------------------

# This conductor's restores (``restore_lost``): the cards
# (``deployables.card_key``) it is restoring now, {card: monotonic time
# of its last failed attempt}, the restores reports started
# (``restore_later``) not ended yet, and their executor.
_RESTORING = set()
_FAILED = {}
_PENDING = set()
_RESTORE_LOCK = threading.Lock()
_RESTORER = None


def ask_of(profile_json, group_id):
    """The image an ARQ's profile group asked its card to run at bind:
    ``('accel:bitstream_id', image uuid)`` or ``('accel:function_id',
    function id)``; None for a group that programs nothing (or that
    ``group_problem`` refuses)."""
    try:
        group = json.loads(profile_json)[group_id]
    except (ValueError, LookupError, TypeError):
        return None
    if not isinstance(group, dict) or group_problem(group) is not None:
        return None
    bitstream_id = group.get('accel:bitstream_id')
    if bitstream_id:
        return ('accel:bitstream_id', _image_id(bitstream_id))
    function_id = group.get('accel:function_id')
    return ('accel:function_id', function_id) if function_id else None


def _image_id(text):
    """An image id as Glance names it (its uuid however ``text`` spells
    it); ``text`` itself when it is no uuid."""
    return str(uuidlib.UUID(text)) if uuidutils.is_uuid_like(text) else text


class LostCard:
    """A card whose holders (rows of ``arqs.holding_programmed_cards``,
    all Bound) asked for one image, ``ask`` (``ask_of``), which none of
    the deployables they hold runs any more."""

    def __init__(self, card, ask, holders):
        self.card = card
        self.ask = ask
        self.holders = holders

    @property
    def arqs(self):
        return ', '.join(f'{h.uuid} (instance {h.instance_uuid})'
                         for h in self.holders)

    @property
    def image(self):
        return ('function id ' if self.ask[0] == 'accel:function_id'
                else 'image ') + self.ask[1]


def lost_cards(context, hostname=None):
    """The cards (of ``hostname``'s devices, or every host's) whose image
    ``restore_lost`` programs again (``LostCard``): every ARQ holding a
    handle of the card is Bound and asked for the same image, none of
    their deployables is gone, and none runs that image (``_runs``).  A
    card held by ARQs asking for different images, or by one that asked
    for none, or still binding, is left as it is.  One query, plus one
    per deployable running an unknown image under an
    ``accel:function_id``."""
    found = []
    rows = arq_db.holding_programmed_cards(context, hostname)
    for card, holders in itertools.groupby(rows, key=lambda row: row.card):
        holders = list(holders)
        asks = {ask_of(h.profile_json, h.device_profile_group_id)
                if h.state == states.BOUND else None for h in holders}
        if len(asks) != 1 or None in asks or any(h.gone for h in holders):
            continue
        ask = asks.pop()
        if not _runs(context, holders, ask):
            found.append(LostCard(card, ask, holders))
    return found


def _runs(context, holders, ask):
    """Whether a deployable the holders hold runs what they asked for:
    the image of an ``accel:bitstream_id``; for an ``accel:function_id``,
    an image recorded with that function's trait (``_recorded``), or
    with none (only Glance could tell, and it may pick another image
    since: the card is left as it is).  A reboot leaves the card
    reported with no image (the agent's record of what it programmed
    does not outlive it)."""
    key, wanted = ask
    for holder in holders:
        current = holder.bitstream_id
        if current is None:
            continue
        if key == 'accel:bitstream_id':
            if _image_id(current) == wanted:
                return True
            continue
        recorded = deployable_db.function_trait(
            context, holder.deployable_id, TRAIT_ATTRIBUTE)
        if recorded is None or recorded == function_trait(wanted):
            return True
    return False


def restore_lost(conf, context, hostname=None):
    """Periodic (``periodics.JOBS``), and after a report that took an
    image from under Bound ARQs (``restore_later``: that host's cards):
    program again the image of each ``lost_cards`` card, through
    ``program`` (the card's mark reserving its providers, the agent, the
    image and its function trait recorded), the handles of the ARQs that
    asked for it counted as the caller's (only while each still holds
    its own for its bind).  With ``[conductor]restore_fpga_images`` off,
    nothing.  One attempt at a time per card in this conductor, none
    while a programming marks the card (across conductors: the mark,
    ``claim_programming``, lets one of two that start at once program
    it), and after a failed one, none in this conductor for
    ``[conductor]reprogram_retry_interval`` seconds.  Returns how many
    cards it programmed."""
    if not conf.conductor.restore_fpga_images:
        return 0
    lost = lost_cards(context, hostname)
    if hostname is None:
        with _RESTORE_LOCK:
            for card in set(_FAILED) - {c.card for c in lost}:
                del _FAILED[card]
    restored = 0
    for card in lost:
        if not _attempt(conf, card.card):
            continue
        try:
            restored += _restore(conf, context, card)
        finally:
            with _RESTORE_LOCK:
                _RESTORING.discard(card.card)
    return restored


def _attempt(conf, card):
    """Whether this conductor tries the card now (and it is then marked
    as being restored here): no attempt of its own runs, and its last one
    did not fail within ``[conductor]reprogram_retry_interval``."""
    with _RESTORE_LOCK:
        failed = _FAILED.get(card)
        if card in _RESTORING or (
                failed is not None and time.monotonic() - failed <
                conf.conductor.reprogram_retry_interval):
            return False
        _RESTORING.add(card)
        return True


def _restore(conf, context, card):
    """Program the card's image again through its first holder's
    deployable: 1 when it did, 0 when another programming has it (its
    mark, found before or when this one sets its own: DEBUG, read again
    at the next attempt), its agent is silent (``silence``), or this
    attempt failed (a WARNING; retried after the back-off)."""
    first = card.holders[0]
    if deployable_db.card_programming(context, first.deployable_id):
        return 0        # another programming's: read again next time
    silent = silence.why_silent(conf, context, first.device_hostname)
    if silent is not None:
        # Not asked (the call would wait out the deadline, and take the
        # card out); its next report starts a restore.
        LOG.debug('Deployable %s: not programmed again: %s',
                  first.deployable_uuid, silent)
        return 0
    LOG.info('Deployable %s on %s no longer runs the %s that ARQ(s) %s '
             'were bound with (a reboot or a power loss?): programming it '
             'again', first.deployable_uuid, first.device_hostname,
             card.image, card.arqs)
    deadline = clock_db.utcnow() + datetime.timedelta(
        seconds=conf.bind_timeout)
    try:
        image = _restored_image(conf, context, card)
        target = deployable_db.program_target_by_id(context,
                                                    first.deployable_id)
        if target is None:
            raise exception.ResourceNotFound(resource='Deployable',
                                             id=first.deployable_uuid)
        programmed = program(
            conf, context, target, image, deadline,
            own_handles=len(card.holders),
            function_id=(card.ask[1] if card.ask[0] == 'accel:function_id'
                         else None),
            arq_uuid=first.uuid,
            binds=[(h.uuid, h.bind_id or '', h.attach_handle_id)
                   for h in card.holders])
    except exception.Conflict as exc:
        if not getattr(exc, 'marked', False):
            _failed(conf, card, first, exc)
            return 0
        # Another programming took the card first (another conductor's
        # restore of it, most often): not now, no back-off; the next
        # attempt reads the card again.
        LOG.debug('Deployable %s: not programmed again now: %s',
                  first.deployable_uuid, exception.first_line(exc))
        return 0
    except Exception as exc:
        _failed(conf, card, first, exc)
        return 0
    with _RESTORE_LOCK:
        _FAILED.pop(card.card, None)
    if not programmed:
        return 0        # loaded by another programming meanwhile
    LOG.info('Deployable %s on %s programmed again with image %s for '
             'ARQ(s) %s', first.deployable_uuid, first.device_hostname,
             image['id'], card.arqs)
    return 1


def _restored_image(conf, context, card):
    """The image of the card's ask that every one of its holders'
    projects (as ``lost_cards`` read them) may use, looked up once, else
    Invalid.  An ``accel:bitstream_id``: the image, which each project
    must be able to use (``glance.usable``).  An ``accel:function_id``:
    the one image of it among the trusted owners' and the public ones
    (no holder's own: one project's image cannot stop, nor stand in
    for, another's restore); where there is none and every holder is
    of one project, the one ``image_for`` finds for that project."""
    problem = group_problem(dict([card.ask]))
    if problem is not None:
        raise exception.Invalid(reason=problem)
    projects = sorted({h.project_id for h in card.holders},
                      key=str) or [None]
    key, value = card.ask
    if key == 'accel:bitstream_id':
        return glance.get_image_for_all(conf, value, projects)
    images = glance.function_id_candidates(conf, value, None)
    if not images and len(projects) == 1 and projects[0] is not None:
        return glance.find_by_function_id(conf, value, projects[0])
    return glance.one_by_function_id(conf, value, None, images)


def _failed(conf, card, first, exc):
    """A failed restore of the card: a WARNING, and the back-off."""
    with _RESTORE_LOCK:
        _FAILED[card.card] = time.monotonic()
    LOG.warning('Deployable %s on %s: programming the %s again for ARQ(s) '
                '%s failed (tried again in %d s at the soonest): %s',
                first.deployable_uuid, first.device_hostname, card.image,
                card.arqs, conf.conductor.reprogram_retry_interval,
                exception.first_line(exc))


def restorable(conf, context, hostname, images_lost):
    """After a report's transaction committed: ``images_lost``, [(its
    deployable row, the image it reports, [(ARQ uuid, instance uuid)])]
    of the cards whose image it changed under Bound ARQs
    (``inventory_apply._images_lost``).  Returns the uuids of those
    deployables ``restore_later`` programs again: their ARQs hold a card
    of ``hostname`` that ``lost_cards`` finds (the rule ``restore_lost``
    follows: every holder Bound, all asking for one image); the others
    are the report's WARNING.  One query (``lost_cards``), only when
    such a report comes."""
    if not conf.conductor.restore_fpga_images or not images_lost:
        return set()
    restored = {holder.uuid for card in lost_cards(context, hostname)
                for holder in card.holders}
    return {row['uuid'] for row, _image, arqs in images_lost
            if all(arq in restored for arq, _instance in arqs)}


def restore_later(conf, hostname):
    """``restore_lost`` of ``hostname`` on a thread of this conductor's
    restore executor, not in the report's RPC call (the agent waits for
    its answer, and a programming takes its download and the vendor
    tool's time).  A conductor that stops meanwhile leaves it to the
    periodic check of any conductor (a programming it cut short: to
    ``take_out_overdue`` first)."""
    global _RESTORER
    with _RESTORE_LOCK:
        if _RESTORER is None:
            _RESTORER = futurist.ThreadPoolExecutor(
                max_workers=conf.conductor.workers)
        future = _RESTORER.submit(_restore_host, conf, hostname)
        _PENDING.add(future)
    future.add_done_callback(_ended)


def _ended(future):
    with _RESTORE_LOCK:
        _PENDING.discard(future)


def _restore_host(conf, hostname):
    try:
        restore_lost(conf, cyborg_context.get_admin_context(), hostname)
    except Exception:
        # The periodic tries again.
        LOG.exception('Restoring the FPGA images of %s failed', hostname)


def wait_restores(timeout=None):
    """Wait for the restores reports started (``restore_later``) to
    end; returns whether they all did within ``timeout`` seconds."""
    with _RESTORE_LOCK:
        pending = list(_PENDING)
    return not waiters.wait_for_all(pending, timeout).not_done


def stop_restores():
    """At conductor stop (``arq_binding.BackgroundBinds.wait``, bounded
    by ``[DEFAULT]graceful_shutdown_timeout``): no restore starts any
    more on this conductor's restore executor, and those running or
    queued end, rather than be cut off mid-programming (the card would
    then wait for ``take_out_overdue``, out of the schedule).  What the
    grace time cuts off is the periodic check's of any conductor."""
    global _RESTORER
    with _RESTORE_LOCK:
        executor, _RESTORER = _RESTORER, None
    if executor is not None:
        executor.shutdown(wait=True)
