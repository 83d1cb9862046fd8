"""Client side of the agent RPC API, used by the conductor.

Topic ``cyborg-agent``; each agent listens as server ``<its host>``.

With RabbitMQ away a call or cast fails within seconds with
``MessageDeliveryFailure`` (``rpc.BROKER_RETRIES`` more tries; a call
also when the conductor's reply queue is not open yet): the agent was not
reached, and the message does not go out later, once its caller has
given up (``not_reached`` says so; a broker that hung rather than
stopped may still deliver what it had taken).  A call's ``timeout``
bounds the wait for the agent's answer.

``HISTORY`` is the API's version history, one line per change (pin the
version each call needs); ``RELEASES`` maps a release name to the version
its agents serve, for ``[upgrade_levels]agent`` (doc/source/upgrade.rst).
"""

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import exception
from cyborg.common import rpc

LOG = logging.getLogger(__name__)

TOPIC = 'cyborg-agent'

HISTORY = (
    ('1.0', 'Initial version: fpga_program, create_vgpu_mdev, '
            'remove_vgpu_mdev, request_report'),
    ('1.1', 'Added probe_health (re-probe before re-admission) and '
            'prepare_device (the driver\'s preparation step on enable)'),
    ('1.2', 'remove_vgpu_mdev takes asked_type (the mdev\'s type, checked '
            'before removal)'),
)
RPC_API_VERSION = HISTORY[-1][0]

# Release name -> the agent RPC version of that release (one line per
# release, added when it is cut).
RELEASES = {
    '2027.1': '1.1',
}


def resolve_cap(value):
    """The version an ``[upgrade_levels]agent`` value caps at (None: no
    cap); ValueError for an unknown one, or one older than the oldest
    release in ``RELEASES``."""
    return rpc.resolve_cap(value, HISTORY, RELEASES, 'agent')


def refusal(error):
    """The agent's own reason, one line, when ``error`` is its answer to
    a call: a RemoteError, or the agent's exception rebuilt here by
    oslo.messaging (a card it cannot find, one being programmed already,
    a vendor tool failing).  None when the call got no answer (any other
    MessagingException: not reached, or not answered in time)."""
    if isinstance(error, messaging.RemoteError):
        return exception.first_line(error.value)
    if isinstance(error, messaging.MessagingException):
        return None
    return exception.first_line(error)


def not_reached(error, hostname):
    """What to say when ``error`` is a call's or cast's to the agent on
    ``hostname`` that did not reach it (the broker could not be reached);
    else None.  Nothing runs there later, unless a broker that hung
    rather than stopped had taken it (``rpc.ReplyQueueNotOpen`` alone
    says it was never sent)."""
    if isinstance(error, messaging.MessageDeliveryFailure):
        return f'the agent on {hostname} was not reached: {rpc.BROKER_AWAY}'
    return None


def raised(error, cls):
    """Whether the agent answered with a ``cls``: rebuilt here, or (its
    module not allowed to be rebuilt, as over RabbitMQ) a RemoteError
    naming it."""
    return (isinstance(error, cls) or
            getattr(error, 'exc_type', None) == cls.__name__)


class AgentAPI:

    def __init__(self, conf, timeout=None):
        self._conf = conf
        self._timeout = timeout
        self.version_cap = resolve_cap(conf.upgrade_levels.agent)

    def _client(self, hostname, timeout=None):
        return rpc.get_client(self._conf, TOPIC, RPC_API_VERSION,
                              server=hostname,
                              timeout=timeout or self._timeout,
                              retry=rpc.BROKER_RETRIES,
                              version_cap=self.version_cap)

    def _call(self, context, hostname, version, method, timeout=None,
              **kwargs):
        client = self._client(hostname, timeout)
        rpc.wait_reply_queue(client.transport, rpc.BROKER_RETRIES + 1)
        with rpc.broker_errors_undelivered():
            return client.prepare(version=version).call(context, method,
                                                        **kwargs)

    def _cast(self, context, hostname, version, method, **kwargs):
        client = self._client(hostname)
        with rpc.broker_errors_undelivered():
            client.prepare(version=version).cast(context, method, **kwargs)

    def can_send(self, version):
        """Whether ``[upgrade_levels]agent`` lets ``version`` through."""
        return self.version_cap is None or (
            rpc.version_tuple(version) <= rpc.version_tuple(self.version_cap))

    def fpga_program(self, context, hostname, controlpath_id, bitstream,
                     driver_name, timeout=None):
        """Program the FPGA at ``controlpath_id`` (a PCI address) with a
        bitstream; returns True once the device runs it.

        ``bitstream`` is a dict; ``image_uuid`` (the Glance image id, which
        becomes the deployable's ``bitstream_id``) is required, plus the
        content as ONE of:

        - ``data``: the image bytes, base64-encoded (what the conductor
          sends after downloading the image from Glance; fine up to the
          RabbitMQ message size, i.e. tens of MB);
        - ``path``: a file already on the agent's host.

        Optional ``checksum``: Glance's md5 ``checksum`` of the content,
        verified by the agent before programming.  ``driver_name`` is the
        deployable's ``driver_name``.  Errors come back as RemoteError
        (CyborgException subclasses), e.g. an unknown driver or address.
        """
        return self._call(context, hostname, '1.0', 'fpga_program',
                          timeout, controlpath_id=controlpath_id,
                          bitstream=bitstream, driver_name=driver_name)

    def create_vgpu_mdev(self, context, hostname, pci_address, asked_type,
                         mdev_uuid):
        """Create mdev ``mdev_uuid`` of ``asked_type`` on the parent GPU."""
        return self._call(context, hostname, '1.0', 'create_vgpu_mdev',
                          pci_address=pci_address, asked_type=asked_type,
                          mdev_uuid=mdev_uuid)

    def remove_vgpu_mdev(self, context, hostname, pci_address, mdev_uuid,
                         asked_type=None):
        """Remove mdev ``mdev_uuid``; no error if it is already gone.
        ``asked_type`` (the handle's mdev type) is sent from 1.2: the
        agent then refuses a uuid of an mdev of another type, as it does
        one of another parent.  While ``[upgrade_levels]agent`` caps
        below 1.2 the removal is sent without it (the parent alone is
        checked), as older agents take it; so is it, after a warning, where
        no cap is set and the agent refuses 1.2 (it is older)."""
        if asked_type is not None and self.can_send('1.2'):
            try:
                return self._call(context, hostname, '1.2',
                                  'remove_vgpu_mdev', pci_address=pci_address,
                                  mdev_uuid=mdev_uuid, asked_type=asked_type)
            except Exception as exc:
                if not rpc.peer_too_old(exc):
                    raise
                # An agent of 2027.1 (1.1) with no [upgrade_levels]agent
                # cap set: it refused before removing anything.
                LOG.warning('The agent on %s does not serve agent RPC 1.2: '
                            'removing mdev %s checking its parent only (set '
                            '[upgrade_levels]agent while agents of an older '
                            'release run).', hostname, mdev_uuid)
        return self._call(context, hostname, '1.0', 'remove_vgpu_mdev',
                          pci_address=pci_address, mdev_uuid=mdev_uuid)

    def request_report(self, context, hostname):
        """Ask the agent for a full inventory snapshot (cast)."""
        self._cast(context, hostname, '1.0', 'request_report')

    def probe_health(self, context, hostname, device_keys):
        """Ask the agent to actively re-probe devices (cast); the verdicts
        come back as a health report with readings of source 'probe'.
        Not sent while ``[upgrade_levels]agent`` caps below 1.1 (such
        agents cannot probe): the probe timeout then applies."""
        if not self.can_send('1.1'):
            rpc.skip_capped('agent', 'probe_health', '1.1', self.version_cap,
                            'devices waiting for a re-probe stay out of the '
                            'schedule until the agents are upgraded')
            return
        self._cast(context, hostname, '1.1', 'probe_health',
                   device_keys=device_keys)

    def prepare_device(self, context, hostname, device_key, timeout=None):
        """Run the driver's preparation step for a device (``Preparable``)
        before it is enabled; returns True, also for a driver that has no
        such step.  Errors come back as RemoteError.  While
        ``[upgrade_levels]agent`` caps below 1.1 nothing is sent and the
        answer is True: agents that old have no preparation step."""
        if not self.can_send('1.1'):
            rpc.skip_capped('agent', 'prepare_device', '1.1',
                            self.version_cap, 'devices are enabled without '
                            'their driver\'s preparation step')
            return True
        return self._call(context, hostname, '1.1', 'prepare_device',
                          timeout, device_key=device_key)
