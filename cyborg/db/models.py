"""SQLAlchemy models. Column names follow OpenStack Cyborg's schema so that
a Cyborg database's meaning carries over; additions are commented.

Identity rule: devices, deployables, attach handles and attributes get
deterministic uuids derived from the host and the hardware address (see
``cyborg.objects.inventory``), so two conductors handling the same report
collide on a unique key instead of creating duplicates.
"""

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import mysql

from cyborg.common import states
from cyborg.db.api import clock as clock_db

DEVICE_TYPES = ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD')
ATTACH_TYPES = ('PCI', 'MDEV', 'TEST_PCI')
CPID_TYPES = ('PCI',)
# The state vocabularies of the enum columns, spelled in cyborg.common.states
# (named here too for code that reads them with the models).
ARQ_STATES = states.ARQ_STATES
DEVICE_STATUSES = states.DEVICE_STATUSES
HEALTH_STATES = states.HEALTH_STATES

# Long enough for any UUID, host name, project id (opaque) and PCI address.
UUID = sa.String(36)
NAME = sa.String(255)
# A NAME compared exactly, as SQLite and PostgreSQL compare every string:
# MariaDB's and MySQL's default collations ignore case (and accents), so
# there ``?name=FPGA-SMALL`` found the profile ``fpga-small`` and a
# profile ``FPGA-SMALL`` could not be made beside it.  Host names too:
# ``Compute-1`` and ``compute-1`` are two hosts.  On MariaDB (10.2 and
# later) the collation is NO PAD as well, ``utf8mb4_nopad_bin``: ``k``
# and ``k `` are two attribute keys.  MySQL's, ``utf8mb4_bin``, is PAD
# SPACE: it ignores trailing spaces, so there the two are one (a unique
# key holds one of them) and readers by name check the name they got.
# ``exact_collation`` chooses by the server a connection found.  The
# exact-name migrations gave EXACT_COLLATION on both; 6b2d8f4e1c07 moves
# MariaDB's columns on to NO PAD.
EXACT_COLLATION = 'utf8mb4_bin'
EXACT_COLLATION_MARIADB = 'utf8mb4_nopad_bin'


def exact_collation(dialect):
    """The collation of EXACT_NAME columns on a MariaDB or MySQL
    ``dialect`` (one that has connected: only then does it know which
    server it talks to)."""
    if dialect.is_mariadb:
        return EXACT_COLLATION_MARIADB
    return EXACT_COLLATION


class _ExactName(sa.types.TypeDecorator):
    """NAME, in ``exact_collation`` on MariaDB and MySQL."""

    impl = NAME
    cache_ok = True

    def load_dialect_impl(self, dialect):
        if dialect.name in ('mysql', 'mariadb'):
            return dialect.type_descriptor(sa.String(
                NAME.length, collation=exact_collation(dialect)))
        return dialect.type_descriptor(NAME)


EXACT_NAME = _ExactName()
# Every timestamp column: MariaDB's and MySQL's DATETIME keeps whole
# seconds unless asked for a fraction, where PostgreSQL and SQLite keep
# microseconds.  Cut to seconds, two changes within one second shared an
# export's pool generation, and health and programming timers moved by up
# to a second.  Migrations adding a timestamp column use it too.
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6),
                                      'mysql', 'mariadb')
# What a TEXT column holds on MariaDB and MySQL: 65535 bytes (of UTF-8).
# PostgreSQL and SQLite hold more; what cyborg accepts for one (report
# values, profile groups, attribute values) is bounded by this, so that
# what one database stores, every one does.
TEXT_BYTES = 2 ** 16 - 1


def _now():
    # By the clock every conductor shares, not this host's.
    return clock_db.utcnow()


class Base(orm.DeclarativeBase):
    """Every table has an integer id and created/updated timestamps."""

    id = sa.Column(sa.Integer, primary_key=True, autoincrement=True)
    created_at = sa.Column(DATETIME, default=_now, nullable=True)
    updated_at = sa.Column(DATETIME, onupdate=_now, nullable=True)

    def as_dict(self):
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


class Host(Base):
    """Ours: one row per agent host, so an unchanged report costs O(1)."""

    __tablename__ = 'hosts'
    __table_args__ = (
        sa.UniqueConstraint('hostname', name='uniq_hosts0hostname'),
        # Whether another host row records the same compute node provider
        # (shared: cyborg.db.api.hosts.has_sharer), read by every
        # bind's take, sync and export.
        sa.Index('hosts_compute_rp_uuid_idx', 'compute_rp_uuid'),
    )

    hostname = sa.Column(EXACT_NAME, nullable=False)
    # Digest of the inventory last written for this host.
    report_digest = sa.Column(sa.String(64), nullable=True)
    # The compute node provider, once found in Placement.
    compute_rp_uuid = sa.Column(UUID, nullable=True)
    # Its name (Nova's hypervisor host name, which may differ from
    # ``hostname``): a bind naming it is a bind on this host.
    compute_node_name = sa.Column(EXACT_NAME, nullable=True)
    # False while Placement still lags the database for this host.
    placement_synced = sa.Column(sa.Boolean, nullable=False, default=False)
    # One more for each change that set placement_synced false: a sync
    # marks the host synced only if it has not moved since the sync read
    # it (cyborg.db.api.hosts.update).
    sync_serial = sa.Column(sa.Integer, nullable=False, default=0,
                            server_default='0')
    last_report_at = sa.Column(DATETIME, nullable=True)


class HealthSender(Base):
    """Ours: per host and agent health monitor (``sender``, one per agent
    start), the highest reading number (``seq``) whose readings are
    applied.  Read and moved on in the transaction that applies a
    numbered health report, under the host's row lock, so that a send
    delivered late and its re-send are applied once whichever conductors
    serve them (cyborg.conductor.health).  ``updated_at`` is when it was
    last moved on: a host keeps the few senders moved on last."""

    __tablename__ = 'health_senders'
    __table_args__ = (
        sa.UniqueConstraint('hostname', 'sender',
                            name='uniq_health_senders0hostname0sender'),
    )

    hostname = sa.Column(EXACT_NAME, nullable=False)
    sender = sa.Column(EXACT_NAME, nullable=False)
    seq = sa.Column(sa.BigInteger, nullable=False)


class HealthColumns:
    """Ours: the health state machine's state (cyborg.conductor.health).

    ``health_faults`` counts transient faults while the device stays
    suspect (each within the suspect window of the one before), and
    re-probes failed in a row while it is unhealthy or probing (which
    lengthen the wait for the next one), ``health_flaps`` re-admissions
    within the flap window (which lengthen the hold-down),
    ``health_due_at`` is when the next timed step is due (suspect
    expiry, end of the hold-down, probe timeout), and
    ``health_readmitted_at`` the last re-admission.  ``health_code``
    says why it is in its health, for the state machine
    (``health_machine.code_of``; ``health_reason`` is for people): NULL
    when healthy, and on rows a conductor of the release before it
    wrote.
    """

    health = sa.Column(sa.String(16), nullable=False,
                       default=states.HEALTHY,
                       server_default=states.HEALTHY)
    health_reason = sa.Column(sa.Text, nullable=True)
    health_code = sa.Column(sa.String(32), nullable=True)
    health_updated_at = sa.Column(DATETIME, nullable=True)
    health_faults = sa.Column(sa.Integer, nullable=False, default=0,
                              server_default='0')
    health_flaps = sa.Column(sa.Integer, nullable=False, default=0,
                             server_default='0')
    health_due_at = sa.Column(DATETIME, nullable=True)
    health_readmitted_at = sa.Column(DATETIME, nullable=True)


class Device(HealthColumns, Base):
    __tablename__ = 'devices'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_devices0uuid'),
        sa.Index('devices_hostname_idx', 'hostname'),
        sa.Index('devices_health_idx', 'health'),
    )

    uuid = sa.Column(UUID, nullable=False)
    type = sa.Column(sa.Enum(*DEVICE_TYPES, name='device_type'),
                     nullable=False)
    vendor = sa.Column(NAME, nullable=False)
    model = sa.Column(NAME, nullable=False)
    std_board_info = sa.Column(sa.Text, nullable=True)
    vendor_board_info = sa.Column(sa.Text, nullable=True)
    hostname = sa.Column(EXACT_NAME, nullable=False)
    status = sa.Column(sa.Enum(*DEVICE_STATUSES, name='device_status'),
                       nullable=False, default=states.ENABLED)


class ControlpathID(Base):
    __tablename__ = 'controlpath_ids'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_controlpath_ids0uuid'),
        sa.Index('controlpath_ids_device_id_idx', 'device_id'),
    )

    uuid = sa.Column(UUID, nullable=False)
    device_id = sa.Column(sa.Integer,
                          sa.ForeignKey('devices.id', ondelete='CASCADE'),
                          nullable=False)
    cpid_type = sa.Column(sa.Enum(*CPID_TYPES, name='cpid_type'),
                          nullable=False)
    cpid_info = sa.Column(NAME, nullable=False)


class Deployable(HealthColumns, Base):
    __tablename__ = 'deployables'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_deployables0uuid'),
        sa.UniqueConstraint('name', name='uniq_deployables0name'),
        sa.Index('deployables_device_id_idx', 'device_id'),
        sa.Index('deployables_rp_uuid_idx', 'rp_uuid'),
        sa.Index('deployables_health_idx', 'health'),
        sa.Index('deployables_gone_idx', 'gone'),
        sa.Index('deployables_programming_until_idx', 'programming_until'),
    )

    uuid = sa.Column(UUID, nullable=False)
    parent_id = sa.Column(sa.Integer,
                          sa.ForeignKey('deployables.id',
                                        ondelete='CASCADE'),
                          nullable=True)
    root_id = sa.Column(sa.Integer,
                        sa.ForeignKey('deployables.id', ondelete='CASCADE'),
                        nullable=True)
    name = sa.Column(EXACT_NAME, nullable=False)
    num_accelerators = sa.Column(sa.Integer, nullable=False, default=1)
    device_id = sa.Column(sa.Integer,
                          sa.ForeignKey('devices.id', ondelete='CASCADE'),
                          nullable=False)
    driver_name = sa.Column(NAME, nullable=True)
    rp_uuid = sa.Column(UUID, nullable=True)
    bitstream_id = sa.Column(UUID, nullable=True)
    # Ours: the hardware is gone but Placement still held allocations
    # against it when it went; kept (reserved = total) until released.
    gone = sa.Column(sa.Boolean, nullable=False, default=False)
    # Ours: set while a conductor programs the deployable, to the time by
    # which that must have ended; reserved = total meanwhile.  Still set
    # after it: its conductor died mid-programming (what the card holds is
    # unknown; cyborg.conductor.programming.take_out_overdue).
    programming_until = sa.Column(DATETIME, nullable=True)


class Attribute(Base):
    __tablename__ = 'attributes'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_attributes0uuid'),
        sa.UniqueConstraint('deployable_id', 'key',
                            name='uniq_attributes0deployable_id0key'),
    )

    uuid = sa.Column(UUID, nullable=False)
    deployable_id = sa.Column(sa.Integer,
                              sa.ForeignKey('deployables.id',
                                            ondelete='CASCADE'),
                              nullable=False)
    key = sa.Column(EXACT_NAME, nullable=False)
    value = sa.Column(sa.Text, nullable=False)


class AttachHandle(Base):
    __tablename__ = 'attach_handles'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_attach_handles0uuid'),
        sa.Index('attach_handles_deployable_id_in_use_idx',
                 'deployable_id', 'in_use'),
    )

    uuid = sa.Column(UUID, nullable=False)
    deployable_id = sa.Column(sa.Integer,
                              sa.ForeignKey('deployables.id',
                                            ondelete='CASCADE'),
                              nullable=False)
    cpid_id = sa.Column(sa.Integer,
                        sa.ForeignKey('controlpath_ids.id',
                                      ondelete='CASCADE'),
                        nullable=False)
    in_use = sa.Column(sa.Boolean, nullable=False, default=False)
    attach_type = sa.Column(sa.Enum(*ATTACH_TYPES, name='attach_type'),
                            nullable=False)
    attach_info = sa.Column(sa.Text, nullable=False)
    # Ours: no longer reported, kept while an ARQ holds it
    # (cyborg.conductor.inventory_plan): never taken again once freed;
    # the next full report deletes it.
    gone = sa.Column(sa.Boolean, nullable=False, default=False,
                     server_default='0')


class DeviceProfile(Base):
    __tablename__ = 'device_profiles'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_device_profiles0uuid'),
        sa.UniqueConstraint('name', name='uniq_device_profiles0name'),
    )

    uuid = sa.Column(UUID, nullable=False)
    name = sa.Column(EXACT_NAME, nullable=False)
    description = sa.Column(sa.Text, nullable=True)
    # JSON list of groups, each a dict of string to string.
    profile_json = sa.Column(sa.Text, nullable=False)
    # Ours (microversion 2.5): the project that created the profile, and
    # who sees it: 'public' (every project, as in Cyborg) or 'private'
    # (the owner's project and those of device_profile_projects).  A short
    # string validated by the application (cyborg.common.states).
    project_id = sa.Column(EXACT_NAME, nullable=True)
    visibility = sa.Column(sa.String(16), nullable=False,
                           default=states.PUBLIC,
                           server_default=states.PUBLIC)


class DeviceProfileProject(Base):
    """Ours: a project a private device profile is shared with."""

    __tablename__ = 'device_profile_projects'
    __table_args__ = (
        sa.UniqueConstraint('profile_id', 'project_id',
                            name='uniq_device_profile_projects0'
                                 'profile_id0project_id'),
        sa.Index('device_profile_projects_project_id_idx', 'project_id'),
    )

    profile_id = sa.Column(sa.Integer,
                           sa.ForeignKey('device_profiles.id',
                                         ondelete='CASCADE'),
                           nullable=False)
    project_id = sa.Column(EXACT_NAME, nullable=False)


class ExtARQ(Base):
    """An accelerator request (ARQ)."""

    __tablename__ = 'extended_accelerator_requests'
    __table_args__ = (
        sa.UniqueConstraint('uuid',
                            name='uniq_extended_accelerator_requests0uuid'),
        # A handle serves one ARQ at most, whatever the code above does.
        sa.UniqueConstraint('attach_handle_id',
                            name='uniq_extended_accelerator_requests0'
                                 'attach_handle_id'),
        sa.Index('extended_arqs_instance_uuid_idx', 'instance_uuid'),
        sa.Index('extended_arqs_project_id_idx', 'project_id'),
        sa.Index('extended_arqs_state_idx', 'state'),
        sa.Index('extended_arqs_device_profile_id_idx', 'device_profile_id'),
        sa.Index('extended_arqs_bind_owner_idx', 'bind_owner'),
        sa.UniqueConstraint('remote_handle_id',
                            name='uniq_extended_accelerator_requests0'
                                 'remote_handle_id'),
        sa.Index('extended_arqs_remote_pool_id_idx', 'remote_pool_id'),
    )

    uuid = sa.Column(UUID, nullable=False)
    state = sa.Column(sa.Enum(*ARQ_STATES, name='arq_state'),
                      nullable=False, default=states.INITIAL)
    device_profile_id = sa.Column(sa.Integer,
                                  sa.ForeignKey('device_profiles.id',
                                                ondelete='RESTRICT'),
                                  nullable=False)
    device_profile_group_id = sa.Column(sa.Integer, nullable=False)
    # Opaque: project ids need not be UUIDs.
    project_id = sa.Column(EXACT_NAME, nullable=True)
    hostname = sa.Column(NAME, nullable=True)
    device_rp_uuid = sa.Column(UUID, nullable=True)
    instance_uuid = sa.Column(UUID, nullable=True)
    attach_handle_id = sa.Column(sa.Integer,
                                 sa.ForeignKey('attach_handles.id',
                                               ondelete='SET NULL'),
                                 nullable=True)
    deployable_id = sa.Column(sa.Integer,
                              sa.ForeignKey('deployables.id',
                                            ondelete='SET NULL'),
                              nullable=True)
    # Ours: the remote pool an ARQ binding or bound to a remote
    # (fabric-attached) accelerator holds, and its fabric handle, in place
    # of deployable_id and attach_handle_id.
    remote_pool_id = sa.Column(sa.Integer,
                               sa.ForeignKey('remote_pools.id',
                                             ondelete='SET NULL'),
                               nullable=True)
    remote_handle_id = sa.Column(sa.Integer,
                                 sa.ForeignKey('remote_pool_handles.id',
                                               ondelete='SET NULL'),
                                 nullable=True)
    # Ours: when binding began (for the stuck-bind periodic), the
    # conductor ([DEFAULT]host) carrying the bind through (a restarted one
    # fails its own leftovers at once), and why a bind (BindFailed) or an
    # unbind (UnbindFailed) failed.
    bind_started_at = sa.Column(DATETIME, nullable=True)
    # Ours: while the ARQ is in BindStarted, the [DEFAULT]bind_timeout
    # (seconds) of the conductor that started its bind, written with
    # bind_started_at and cleared when the ARQ leaves BindStarted.  The
    # stuck-bind periodic of every conductor holds the bind to its start
    # plus this, not to its own bind_timeout.  NULL: a bind started by a
    # conductor of the previous release.  Seconds, not a time: a value
    # left by an earlier bind (that release does not clear it) holds a
    # later bind to a real conductor's bind_timeout from its own start.
    # While the ARQ is Deleting: the seconds the delete that marked it
    # has from bind_started_at (arq_binding.finish_deletes).
    bind_timeout = sa.Column(sa.Integer, nullable=True)
    bind_owner = sa.Column(NAME, nullable=True)
    bind_failure_reason = sa.Column(sa.Text, nullable=True)
    # Ours: the bind (its batch) an ARQ in BindStarted or Bound belongs
    # to; a bind's late work writes only while the ARQ is still its own.
    bind_id = sa.Column(UUID, nullable=True)
    # Ours (microversion 2.6): who holds an ARQ allocated without Nova
    # (POST /accelerator_requests/{uuid}/allocate), e.g. a pod's uid and
    # 'k8s-pod'.  Such an ARQ is its own Placement consumer.
    consumer_id = sa.Column(NAME, nullable=True)
    consumer_type = sa.Column(NAME, nullable=True)


class RemotePool(Base):
    """Ours: a pool of remote (fabric-attached) accelerators that no agent
    discovers, registered by an admin (cyborg.conductor.remote_pools).

    Placement holds it as a sharing provider (``rp_uuid``, trait
    MISC_SHARES_VIA_AGGREGATE) in ``aggregates`` (a JSON list of aggregate
    uuids), with ``resource_class`` inventory of one unit per handle and
    ``traits`` (a JSON list).  ``fabric_driver`` names the entry point of
    ``cyborg.fabric.driver`` that attaches its handles to hosts.
    """

    __tablename__ = 'remote_pools'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_remote_pools0uuid'),
        sa.UniqueConstraint('name', name='uniq_remote_pools0name'),
        sa.UniqueConstraint('rp_uuid', name='uniq_remote_pools0rp_uuid'),
    )

    uuid = sa.Column(UUID, nullable=False)
    name = sa.Column(EXACT_NAME, nullable=False)
    description = sa.Column(sa.Text, nullable=True)
    resource_class = sa.Column(NAME, nullable=False)
    traits = sa.Column(sa.Text, nullable=False)
    aggregates = sa.Column(sa.Text, nullable=False)
    fabric_driver = sa.Column(NAME, nullable=False)
    rp_uuid = sa.Column(UUID, nullable=False)
    # A word of states.POOL_STATES (a string, not an enum: see the health
    # columns).
    state = sa.Column(sa.String(16), nullable=False,
                      default=states.POOL_ACTIVE,
                      server_default=states.POOL_ACTIVE)
    # False until Placement is known to hold the provider as described.
    placement_synced = sa.Column(sa.Boolean, nullable=False, default=False)


class RemotePoolHandle(Base):
    """Ours: one remote accelerator of a pool, known by its fabric address
    (an NVMe-oF NQN, a fabric manager's device id...).  While in use,
    ``hostname`` is the host it is attached to and ``attach_info`` (JSON)
    what the fabric driver answered, plus the address."""

    __tablename__ = 'remote_pool_handles'
    __table_args__ = (
        sa.UniqueConstraint('uuid', name='uniq_remote_pool_handles0uuid'),
        sa.UniqueConstraint('pool_id', 'fabric_address',
                            name='uniq_remote_pool_handles0pool_id0'
                                 'fabric_address'),
        sa.Index('remote_pool_handles_pool_id_in_use_idx',
                 'pool_id', 'in_use'),
    )

    uuid = sa.Column(UUID, nullable=False)
    pool_id = sa.Column(sa.Integer,
                        sa.ForeignKey('remote_pools.id', ondelete='CASCADE'),
                        nullable=False)
    fabric_address = sa.Column(EXACT_NAME, nullable=False)
    in_use = sa.Column(sa.Boolean, nullable=False, default=False)
    hostname = sa.Column(NAME, nullable=True)
    attach_info = sa.Column(sa.Text, nullable=False)


class NovaEvent(Base):
    """Ours: a bind outcome Nova has not yet accepted (at-least-once)."""

    __tablename__ = 'nova_events'
    __table_args__ = (
        sa.Index('nova_events_next_attempt_at_idx', 'next_attempt_at'),
        sa.Index('nova_events_owner_idx', 'owner'),
        # Each batch is read, claimed, postponed and forgotten by its id.
        sa.Index('nova_events_batch_id_idx', 'batch_id'),
    )

    # Events of one PATCH share a batch and reach Nova in one request.
    batch_id = sa.Column(UUID, nullable=False)
    instance_uuid = sa.Column(UUID, nullable=False)
    arq_uuid = sa.Column(UUID, nullable=False)
    status = sa.Column(sa.Enum('completed', 'failed',
                               name='nova_event_status'), nullable=False)
    attempts = sa.Column(sa.Integer, nullable=False, default=0)
    next_attempt_at = sa.Column(DATETIME, nullable=True)
    # The conductor ([DEFAULT]host) that recorded it and delivers its
    # batch; restarted, it re-sends its own batches at once.
    owner = sa.Column(NAME, nullable=True)


class QuotaLock(Base):
    """Ours: one row per project that created accelerator requests under
    quotas.  Its row lock serialises the project's quota-checked creates,
    so two of them cannot both count the usage before the other's rows
    exist (cyborg.db.api.quotas)."""

    __tablename__ = 'quota_locks'
    __table_args__ = (
        sa.UniqueConstraint('project_id',
                            name='uniq_quota_locks0project_id'),
    )

    project_id = sa.Column(EXACT_NAME, nullable=False)
    # Moved on by every lock (cyborg.db.api.quotas.lock_project): a write
    # that changes nothing (updated_at alone, which held whole seconds on
    # MariaDB before migration 6b2d8f4e1c07) sends Galera no write set,
    # and creates on two nodes then both passed a limit.
    generation = sa.Column(sa.BigInteger, nullable=False, default=0,
                           server_default='0')


class PlacementRelease(Base):
    """Ours: a Placement consumer whose allocations cyborg owes a release:
    the claim of a standalone allocation whose accelerator request was
    deleted or unbound while it was made (that release ran before the
    claim landed), which Placement could not release then, of one the
    stuck-bind check failed (recorded in the transaction that failed it,
    released just after), or of one unbound or deleted (recorded in the
    transaction that unbound or deleted it, released just after the
    commit).  No ARQ row says the claim is there any more;
    this one does until it is released (cyborg.conductor.arq_allocation).
    """

    __tablename__ = 'placement_releases'
    __table_args__ = (
        sa.UniqueConstraint('consumer_uuid',
                            name='uniq_placement_releases0consumer_uuid'),
    )

    consumer_uuid = sa.Column(UUID, nullable=False)
