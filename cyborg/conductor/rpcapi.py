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

HISTORY = (
    ('1.0', 'Initial version: report_inventory, device profiles, ARQs, '
            'devices, deployables, attributes'),
    ('1.1', 'Added report_health (agents\' health readings)'),
)
RPC_API_VERSION = HISTORY[-1][0]

# Release name -> the conductor RPC version of that release (one line per
# release, added when it is cut).
RELEASES = {
    '2027.1': '1.1',
}


def resolve_cap(value):
    """The version an ``[upgrade_levels]conductor`` value caps at (None:
    no cap); ValueError for an unknown one."""
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

    # -- device profiles -----------------------------------------------

    def device_profile_create(self, context, values):
        """Create a profile from validated ``values``; returns its dict."""
        return self._call(context, '1.0', 'device_profile_create',
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

    def arq_bind(self, context, bindings):
        """Start binding: ``bindings`` maps ARQ uuid to {hostname,
        device_rp_uuid, instance_uuid}.  Returns once every ARQ is in
        BindStarted; the outcome is reported to Nova."""
        return self._call(context, '1.0', 'arq_bind', bindings=bindings)

    def arq_unbind(self, context, arq_uuids):
        return self._call(context, '1.0', 'arq_unbind', arq_uuids=arq_uuids)

    def arq_delete(self, context, arq_uuids=None, instance_uuid=None):
        """Delete ARQs by uuid or by instance; unbinds first if needed.

        Returns the uuids that were not found (the others are deleted).
        """
        return self._call(context, '1.0', 'arq_delete', arq_uuids=arq_uuids,
                          instance_uuid=instance_uuid)

    # -- devices, deployables, attributes --------------------------------

    def device_set_status(self, context, device_uuid, status):
        """Set 'enabled' or 'maintaining'; Placement reserved follows."""
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
