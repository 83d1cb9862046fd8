"""The vocabulary of states: the one home of these words.

The database columns, drivers, the agent, the conductor's state machines,
the API schemas and the tests import these names; nobody spells them out.

Accelerator request (ARQ) states, as Nova and the clients see them::

    Initial       made from a device profile, not bound
    BindStarted   a bind is under way (it holds a deployable, and soon a
                  handle)
    Bound         bound to an instance through an attach handle
    Unbound       unbound again; may be bound anew
    BindFailed    the bind failed (the reason is kept)
    UnbindFailed  the agent could not release its handle (an mdev it could
                  not remove); it keeps the handle, and the reason, until
                  unbound again or deleted
    Deleting      being deleted

Health states (``devices.health``, ``deployables.health``), in order of
how bad they are::

    healthy   -> works; schedulable
    suspect   -> saw a transient fault recently; still schedulable, watched
    probing   -> read well again after being unhealthy; an active re-probe
                 decides re-admission; not schedulable meanwhile
    unhealthy -> failed; out of the schedule (reserved = total, trait)
    lost      -> the hardware vanished while allocations still held it

Severities of one health reading (what a driver saw since its last check,
or a condition that still holds)::

    ok           nothing wrong
    application  a fault of the workload, not the device (e.g. XID 13, 31,
                 43, 94): counted, never changes health
    transient    the device recovered by itself (corrected ECC storm, a
                 non-fatal AER error): healthy -> suspect; repeated -> out
    fatal        the device cannot be trusted (uncorrectable ECC, row-remap
                 failure, fatal AER, fallen off the bus): unhealthy at once
    gone         the function disappeared or its kernel driver unbound
"""

INITIAL = 'Initial'
BIND_STARTED = 'BindStarted'
BOUND = 'Bound'
UNBOUND = 'Unbound'
BIND_FAILED = 'BindFailed'
UNBIND_FAILED = 'UnbindFailed'
DELETING = 'Deleting'

ARQ_STATES = (INITIAL, BIND_STARTED, BOUND, UNBOUND, BIND_FAILED,
              UNBIND_FAILED, DELETING)

# ARQs that hold (or are taking) a deployable and its handle.
ARQ_HOLDING = (BIND_STARTED, BOUND, UNBIND_FAILED)

# ARQs whose bind is over, one way or the other: what
# ``GET /accelerator_requests?bind_state=resolved`` waits for.
ARQ_RESOLVED = (BOUND, BIND_FAILED, DELETING)

HEALTHY = 'healthy'
SUSPECT = 'suspect'
PROBING = 'probing'
UNHEALTHY = 'unhealthy'
LOST = 'lost'

# Ordered from best to worst: the effective health of a deployable is the
# worst of its own and its device's.
HEALTH_STATES = (HEALTHY, SUSPECT, PROBING, UNHEALTHY, LOST)

# States in which a provider is kept out of the schedule.
OUT_OF_SCHEDULE = frozenset((PROBING, UNHEALTHY, LOST))

OK = 'ok'
APPLICATION = 'application'
TRANSIENT = 'transient'
FATAL = 'fatal'
GONE = 'gone'

SEVERITIES = (OK, APPLICATION, TRANSIENT, FATAL, GONE)

# Severities that say nothing is wrong with the device itself.
HARMLESS = frozenset((OK, APPLICATION))

# States whose ``health_due_at`` is a timed step of the state machine
# (suspect expiry, end of the hold-down, probe timeout).
TIMED = (SUSPECT, UNHEALTHY, PROBING)

# Device statuses: an operator's choice, not health.  'maintaining' keeps a
# device out of the schedule whatever its health.
ENABLED = 'enabled'
MAINTAINING = 'maintaining'
DEVICE_STATUSES = (ENABLED, MAINTAINING)

# Device profile visibility (microversion 2.5): a public profile is seen and
# used by every project; a private one by its owner's project and the
# projects it is shared with (admins see every profile).
PUBLIC = 'public'
PRIVATE = 'private'
PROFILE_VISIBILITIES = (PUBLIC, PRIVATE)

# The trait an out-of-schedule provider carries in Placement, so operators
# and request filters can see (and forbid) it.
UNHEALTHY_TRAIT = 'CUSTOM_ACCEL_UNHEALTHY'


def worst(*states):
    """The worst of health ``states`` (None entries ignored)."""
    present = [s for s in states if s is not None]
    if not present:
        return HEALTHY
    return max(present, key=HEALTH_STATES.index)


# Remote (fabric-attached) pools (``remote_pools.state``): registered by
# an admin, served through a fabric driver (cyborg.fabric), shared with
# the compute nodes of Placement aggregates.  'deleting' refuses new binds
# while the pool's Placement provider is being removed.
POOL_ACTIVE = 'active'
POOL_DELETING = 'deleting'
POOL_STATES = (POOL_ACTIVE, POOL_DELETING)

# The attach type an ARQ bound to a remote pool shows: its handle is a
# fabric address, attached to the instance's host by the pool's fabric
# driver (not a PCI function of the host).
FABRIC = 'FABRIC'

# The trait that makes a Placement provider share its inventory with the
# providers of its aggregates (os-traits).
SHARES_VIA_AGGREGATE = 'MISC_SHARES_VIA_AGGREGATE'
