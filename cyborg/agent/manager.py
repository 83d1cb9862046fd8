"""Agent RPC endpoints, served on topic ``cyborg-agent``, server = host.

Thin: programming is the driver's (``Programmable``), mdevs are
``cyborg.agent.mdevs``'s (written by ``cyborg.agent.privileged``),
reports are the reporter's, health probes the health monitor's
(``cyborg.agent.health``).  Every change
made here is followed by a report, so the conductor's picture catches up
without waiting for the next period.
"""

import base64
import binascii
import contextlib
import functools
import hashlib
import os
import tempfile
import threading

import oslo_messaging as messaging
from oslo_log import log as logging

from cyborg.agent import health as agent_health
from cyborg.agent import mdevs as agent_mdevs
from cyborg.agent import programming
from cyborg.agent import reporter as agent_reporter
from cyborg.agent import rpcapi
from cyborg.common import exception
from cyborg.drivers import base

LOG = logging.getLogger(__name__)


def _answer(func):
    """Send a refusal (a 4xx CyborgException: an unknown device or mdev
    type, a bad bitstream, a card being programmed already) back to the
    conductor as an answer: oslo.messaging then logs no traceback for it,
    and the conductor gets the same exception.  A failure on the host (a
    5xx, anything else) stays a fault, logged with its traceback."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except exception.CyborgException as exc:
            if exc.code >= 500:
                raise
            raise messaging.ExpectedException()
    return wrapper


class AgentManager:

    target = messaging.Target(version=rpcapi.RPC_API_VERSION)

    def __init__(self, conf, host, reporter=None, drivers=None,
                 health_monitor=None, mdevs=None):
        self.conf = conf
        self.host = host
        self.reporter = reporter
        self.drivers = drivers or {}
        # The one that recreates the bound ARQs' mdevs at start, when the
        # agent's (``cmd.agent.build_services``): its creates and removals
        # and the endpoints' take turns.
        self.mdevs = mdevs or agent_mdevs.Mdevs(conf, host, self.drivers)
        self.health_monitor = health_monitor
        # The reporter's, which the health monitor shares: both must know.
        self.programming = (reporter.programming if reporter is not None
                            else programming.InProgress())
        # Probes asked for while health watching is off (probe_health).
        self._prober = None
        self._probe_lock = threading.Lock()
        _sweep_bitstreams(conf)

    # -- FPGA --------------------------------------------------------------

    @_answer
    def fpga_program(self, context, controlpath_id, bitstream, driver_name):
        """Program with ``bitstream`` (see ``AgentAPI.fpga_program``)."""
        driver = self.drivers.get(driver_name)
        if driver is None:
            raise exception.ResourceNotFound(resource='Accelerator driver',
                                             id=driver_name)
        if not isinstance(driver, base.Programmable):
            raise exception.Invalid(
                reason=f'driver {driver_name} cannot program devices')
        image_uuid = bitstream.get('image_uuid')
        if not image_uuid:
            raise exception.Invalid(reason='bitstream has no image_uuid')
        with self.programming.alone(controlpath_id), \
                _bitstream_file(self.conf, bitstream) as path:
            driver.program(controlpath_id, path, image_uuid)
        self._report_soon()
        return True

    # -- vGPU mdevs ------------------------------------------------------

    @_answer
    def create_vgpu_mdev(self, context, pci_address, asked_type, mdev_uuid):
        """Create the mdev; creating one that exists, of that type on that
        parent, is a success (one of that uuid otherwise is a refusal)."""
        if self.mdevs.create(pci_address, asked_type, mdev_uuid):
            self._report_soon()
        return True

    @_answer
    def remove_vgpu_mdev(self, context, pci_address, mdev_uuid,
                         asked_type=None):
        """Remove the mdev of the GPU at ``pci_address`` (of type
        ``asked_type`` when given: conductors send it from agent RPC 1.2,
        not while capped below); removing one that is gone is a success.
        A uuid of another parent's (or type's) mdev is a refusal
        (Conflict), nothing removed: a wrong parent would remove someone
        else's vGPU."""
        if self.mdevs.remove(pci_address, mdev_uuid, asked_type):
            self._report_soon()
        return True

    # -- health and preparation ------------------------------------------

    @_answer
    def probe_health(self, context, device_keys):
        """Re-probe devices (a cast): the probes run on the health
        monitor's thread, their verdicts go back as a health report.
        With health watching off (``[health]enabled``) they run here and
        their verdicts go at once: the conductor still takes devices out
        that nothing else brings back (a programming whose outcome is
        unknown), and an operator enabling one asks for this probe."""
        if self.health_monitor is not None:
            self.health_monitor.request_probe(device_keys)
            return
        if self.reporter is None:
            LOG.warning('Asked to probe %s but health watching is off '
                        '([health]enabled); ignoring.', device_keys)
            return
        with self._probe_lock:
            if self._prober is None:
                self._prober = agent_health.HealthMonitor(
                    self.conf, self.host, self.drivers,
                    self.reporter.known_devices,
                    in_progress=self.programming)
            LOG.info('Probing %s on request (health watching is off)',
                     ', '.join(device_keys))
            self._prober.probe_now(device_keys)

    @_answer
    def prepare_device(self, context, device_key):
        """Run the driver's preparation step for the device (``Preparable``)
        and return True; True at once for a driver without one."""
        device = self._find_device(device_key)
        name = agent_reporter.driver_of(device)
        driver = self.drivers.get(name)
        if driver is None:
            raise exception.ResourceNotFound(resource='Accelerator driver',
                                             id=name)
        if isinstance(driver, base.Preparable):
            LOG.info('Preparing device %s (driver %s)', device_key, name)
            driver.prepare(device)
            # Preparation may change what discovery sees (an FPGA image).
            self._report_soon()
        return True

    def _find_device(self, device_key):
        """The ``DriverDevice`` with this key: among those the conductor
        knows, else in a fresh discovery (a device just plugged in)."""
        known = self.reporter.known_devices() if self.reporter else []
        for device in known:
            if device.key() == device_key:
                return device
        if self.reporter is not None:
            for device in self.reporter.discover(known):
                if device.key() == device_key:
                    return device
        raise exception.ResourceNotFound(resource='Device', id=device_key)

    # -- reports -----------------------------------------------------------

    @_answer
    def request_report(self, context):
        """The conductor wants a full snapshot (it lost or distrusts its
        picture of this host)."""
        if self.reporter is not None:
            self.reporter.request_full_report()

    def _report_soon(self):
        if self.reporter is not None:
            self.reporter.request_report()


_BITSTREAM_PREFIX = 'cyborg-bitstream-'


def _sweep_bitstreams(conf):
    """Remove the bitstream files an agent stopped mid-programming left
    (each the size of an image) before this one serves programmings."""
    try:
        names = os.listdir(conf.state_path)
    except OSError:
        return
    for name in names:
        if name.startswith(_BITSTREAM_PREFIX) and name.endswith('.bin'):
            try:
                os.unlink(os.path.join(conf.state_path, name))
                LOG.info('Removed %s, left by an earlier programming', name)
            except OSError as exc:
                LOG.warning('Could not remove %s: %s', name, exc)


class _bitstream_file:
    """The bitstream's content, checked against its checksum, as a
    temporary file (removed afterwards) in the state directory: the one
    place the agent writes (a container may have no writable /tmp), and
    the one place the privileged helper takes a bitstream from.  Sent
    inline, or named by a path on this host, which is copied there.  A
    file that cannot be written (a full disk) is a refusal that says the
    card was not touched: the vendor tool never ran."""

    def __init__(self, conf, bitstream):
        self._conf = conf
        self._bitstream = bitstream
        self._tmp = None

    def __enter__(self):
        data = self._content()
        _verify(data, self._bitstream.get('checksum'))
        state_path = self._conf.state_path
        try:
            os.makedirs(state_path, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=_BITSTREAM_PREFIX,
                                             suffix='.bin', dir=state_path)
            with os.fdopen(fd, 'wb') as f:
                f.write(data)
        except BaseException as exc:
            # __exit__ does not run when __enter__ raises.
            self.__exit__(None, None, None)
            if isinstance(exc, OSError):
                raise exception.Conflict(
                    message=f'Could not write the bitstream to '
                            f'{state_path} ({exc.strerror or exc}); the '
                            f'card was not touched') from exc
            raise
        return self._tmp

    def _content(self):
        bitstream = self._bitstream
        if bitstream.get('data') is not None:
            try:
                return base64.b64decode(bitstream['data'], validate=True)
            except (binascii.Error, TypeError) as exc:
                raise exception.Invalid(
                    reason=f'bitstream data is not base64: {exc}')
        path = bitstream.get('path')
        try:
            if not path or not os.path.isfile(path):
                raise FileNotFoundError(path)
            with open(path, 'rb') as f:
                return f.read()
        except OSError:
            raise exception.Invalid(reason='bitstream has neither data nor '
                                           'a readable path') from None

    def __exit__(self, *exc_info):
        if self._tmp is not None:
            tmp, self._tmp = self._tmp, None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _verify(data, checksum):
    # Glance's 'checksum' is the md5 of the image data.
    if checksum and hashlib.md5(data, usedforsecurity=False
                                ).hexdigest() != checksum:
        raise exception.Invalid(reason='bitstream checksum mismatch')
