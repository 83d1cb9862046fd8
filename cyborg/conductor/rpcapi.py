"""Client side of the conductor RPC API: the only way into the conductor.

Every database write of the service goes through here.  The topic is
``cyborg-conductor``; any conductor may serve any call.

``HISTORY`` is the API's version history, one line per change: bump the
minor version for each added method or argument and pin the version each
call needs.  ``RELEASES`` maps a release name to the version its
conductors serve: what ``[upgrade_levels]conductor`` accepts besides a
version, to cap what upgraded agents and APIs send while older conductors
remain (doc/source/upgrade.rst).
"""

from cyborg.common import rpc

TOPIC = 'cyborg-conductor'
# Profile values only a 1.2 conductor understands.
_SHARING = frozenset(('project_id', 'visibility', 'projects'))

HISTORY = (
    ('1.0', 'Initial version: report_inventory, device profiles, ARQs, '
            'devices, deployables, attributes'),
    ('1.1', 'Added report_health (agents\' health readings)'),
    ('1.2', 'Added arq_allocate (standalone allocation); '
            'device_profile_create takes project_id, visibility and '
            'projects in its values'),
    ('1.3', 'Added remote_pool_create and remote_pool_delete (remote, '
            'fabric-attached accelerator pools)'),
    ('1.4', 'arq_create takes device_profile_name and visible_to (the '
            'caller\'s view of profiles) instead of device_profile_uuid: '
            'the API no longer reads the profile first'),
    ('1.5', 'arq_delete takes guard_holding: the conductor refuses to '
            'delete an ARQ holding a device without a service token (the '
            'API no longer reads the ARQs first)'),
    ('1.6', 'device_set_status takes wait: how long the caller waits '
            'for the answer, so that preparing a device gives up first'),
    ('1.7', 'report_health: a re-probe\'s transient reading ("not yet") '
            'is a verdict only for what the conductor probes, so agents '
            'send it for the device too'),
    ('1.8', 'Added host_list and host_forget (cyborg-manage host: '
            'retiring a compute host)'),
    ('1.9', 'Added bound_mdevs (the mdevs an agent recreates at start)'),
)
RPC_API_VERSION = HISTORY[-1][0]

# Release name -> the conductor RPC version of that release (one line per
# release, added when it is cut).
RELEASES = {
    '2027.1': '1.4',
}


def resolve_cap(value):
    """The version an ``[upgrade_levels]conductor`` value caps at (None:
    no cap); ValueError for an unknown one, or one older than the oldest
    release in ``RELEASES`` (an API capped there could not even create a
    device profile: it always sends 1.2)."""
    return rpc.resolve_cap(value, HISTORY, RELEASES, 'conductor')


class ConductorAPI:
    """Conductor RPC client.  Calls block until the conductor answers.

    ``require_queue``: fail at once (``MessageUndeliverable``) when no
    conductor ever listened on the broker, rather than wait out the
    timeout (what agents want: they retry)."""

    def __init__(self, conf, timeout=None, retry=None, require_queue=False):
        self.version_cap = resolve_cap(conf.upgrade_levels.conductor)
        self._client = rpc.get_client(conf, TOPIC, RPC_API_VERSION,
                                      timeout=timeout, retry=retry,
                                      version_cap=self.version_cap,
                                      require_queue=require_queue)

    def _call(self, context, version, method, **kwargs):
        cctxt = self._client.prepare(version=version)
        return cctxt.call(context, method, **kwargs)

    def can_send(self, version):
        """Whether the version cap lets ``version`` through."""
        return self._client.can_send_version(version)

    # -- agents ---------------------------------------------------------

    def report_inventory(self, context, hostname, report):
        """Send a host's inventory report (see cyborg.agent.reporter).

        Returns ``{'digest': <acknowledged digest>, 'need_full': bool}``.
        """
        return self._call(context, '1.0', 'report_inventory',
                          hostname=hostname, report=report)

    def reads_not_yet_as_verdict(self):
        """Whether the conductors leave a healthy device alone when a
        re-probe answers "not yet" for it (1.7): older ones count it as
        a transient fault."""
        return self.can_send('1.7')

    def report_health(self, context, hostname, report):
        """Send a host's health readings (see cyborg.objects.health).

        Returns ``{'accepted': <number of readings applied>}``; None,
        sending nothing, while ``[upgrade_levels]conductor`` caps below
        1.1 (conductors that old keep no health).
        """
        if not self.can_send('1.1'):
            rpc.skip_capped('conductor', 'report_health', '1.1',
                            self.version_cap, 'device health readings are '
                            'dropped until the cap is raised')
            return None
        return self._call(context, '1.1', 'report_health',
                          hostname=hostname, report=report)

    def can_list_bound_mdevs(self):
        """Whether the version cap lets ``bound_mdevs`` (1.9) through."""
        return self.can_send('1.9')

    def bound_mdevs(self, context, hostname):
        """The mdevs of the Bound ARQs on ``hostname``'s devices, which
        its agent recreates when it starts (``cyborg.agent.mdevs``):
        [{arq_uuid, mdev_uuid (the MDEV handle's uuid), pci_address (its
        parent function), mdev_type}].  A conductor older than 1.9
        refuses it (``rpc.peer_too_old``)."""
        return self._call(context, '1.9', 'bound_mdevs', hostname=hostname)

    # -- hosts (cyborg-manage) -------------------------------------------

    def can_manage_hosts(self):
        """Whether the conductors take ``host_list`` and ``host_forget``
        (1.8)."""
        return self.can_send('1.8')

    def host_list(self, context):
        """Every host: [{hostname, compute_node_name, last_report_at
        (ISO 8601, UTC, or None), silent, devices, placement_synced}]."""
        return self._call(context, '1.8', 'host_list')

    def host_forget(self, context, hostname):
        """Forget a retired host: its devices, deployables, attach
        handles, Placement providers and row; 409 while it reports or
        something holds its devices.  Returns how many {devices,
        deployables, attach_handles, providers} went."""
        return self._call(context, '1.8', 'host_forget', hostname=hostname)

    # -- device profiles -----------------------------------------------

    def device_profile_create(self, context, values):
        """Create a profile from validated ``values``; returns its dict.

        Values naming an owner, a visibility or projects need 1.2: an
        older conductor would create the profile public."""
        version = '1.2' if set(values) & _SHARING else '1.0'
        return self._call(context, version, 'device_profile_create',
                          values=values)

    def device_profile_delete(self, context, uuids):
        """Delete the profiles (all or none); 409 if any is in use."""
        return self._call(context, '1.0', 'device_profile_delete',
                          uuids=uuids)

    # -- accelerator requests ------------------------------------------

    def arq_create(self, context, device_profile_uuid, project_id):
        """Create the ARQs for a profile; returns their dicts."""
        return self._call(context, '1.0', 'arq_create',
                          device_profile_uuid=device_profile_uuid,
                          project_id=project_id)

    def can_create_by_name(self):
        """Whether the conductors take ``arq_create_by_name`` (1.4)."""
        return self.can_send('1.4')

    def arq_create_by_name(self, context, device_profile_name, project_id,
                           visible_to):
        """Create the ARQs for the profile of that name, among those the
        project ``visible_to`` may see (None: all); returns their dicts,
        or a 404 when there is no such profile."""
        return self._call(context, '1.4', 'arq_create',
                          device_profile_uuid=None, project_id=project_id,
                          device_profile_name=device_profile_name,
                          visible_to=visible_to)

    def arq_bind(self, context, bindings):
        """Start binding: ``bindings`` maps ARQ uuid to {hostname,
        device_rp_uuid, instance_uuid}.  Returns once every ARQ is in
        BindStarted; the outcome is reported to Nova."""
        return self._call(context, '1.0', 'arq_bind', bindings=bindings)

    def arq_allocate(self, context, arq_uuid, consumer_id, consumer_type,
                     hostname=None):
        """Claim an accelerator in Placement for the ARQ (its own
        consumer) and bind it, without Nova; returns ``{uuid,
        device_rp_uuid, hostname}`` once it is Bound."""
        return self._call(context, '1.2', 'arq_allocate', arq_uuid=arq_uuid,
                          consumer_id=consumer_id,
                          consumer_type=consumer_type, hostname=hostname)

    def arq_unbind(self, context, arq_uuids):
        return self._call(context, '1.0', 'arq_unbind', arq_uuids=arq_uuids)

    def arq_delete(self, context, arq_uuids=None, instance_uuid=None):
        """Delete ARQs by uuid or by instance; unbinds first if needed.

        Returns the uuids that were not found (the others are deleted).
        """
        return self._call(context, '1.0', 'arq_delete', arq_uuids=arq_uuids,
                          instance_uuid=instance_uuid)

    def can_guard_delete(self):
        """Whether the conductors take ``arq_delete_guarded`` (1.5)."""
        return self.can_send('1.5')

    def arq_delete_guarded(self, context, arq_uuids):
        """``arq_delete`` by uuid, refused (403, nothing deleted) when an
        ARQ holding a device goes without a service token (see
        ``cyborg.objects.accelerator_requests.check_may_delete``)."""
        return self._call(context, '1.5', 'arq_delete', arq_uuids=arq_uuids,
                          instance_uuid=None, guard_holding=True)

    # -- remote pools ------------------------------------------------------

    def remote_pool_create(self, context, values):
        """Register a remote pool from validated ``values``; returns its
        uuid once Placement holds its provider."""
        return self._call(context, '1.3', 'remote_pool_create',
                          values=values)

    def remote_pool_delete(self, context, pool_uuid):
        """Delete a remote pool and its provider; 409 while in use."""
        return self._call(context, '1.3', 'remote_pool_delete',
                          pool_uuid=pool_uuid)

    # -- devices, deployables, attributes --------------------------------

    def device_set_status(self, context, device_uuid, status, wait=None):
        """Set 'enabled' or 'maintaining'; Placement reserved follows.

        ``wait``: the seconds the caller waits for the answer (sent to 1.6
        conductors, which then give the agent less time to prepare the
        device than that)."""
        if wait is not None and self.can_send('1.6'):
            return self._call(context, '1.6', 'device_set_status',
                              device_uuid=device_uuid, status=status,
                              wait=wait)
        return self._call(context, '1.0', 'device_set_status',
                          device_uuid=device_uuid, status=status)

    def deployable_program(self, context, deployable_uuid, image_uuid):
        """Program an FPGA deployable with a Glance image (idempotent)."""
        return self._call(context, '1.0', 'deployable_program',
                          deployable_uuid=deployable_uuid,
                          image_uuid=image_uuid)

    def attribute_create(self, context, deployable_uuid, key, value):
        return self._call(context, '1.0', 'attribute_create',
                          deployable_uuid=deployable_uuid, key=key,
                          value=value)

    def attribute_delete(self, context, attribute_uuid):
        return self._call(context, '1.0', 'attribute_delete',
                          attribute_uuid=attribute_uuid)
