"""The fake driver: exactly the fake device of doc/source/contract.rst
("Placement").

Other projects' tests (and ours) schedule and bind against it without
hardware: device type FPGA, vendor ``0xABCD``, one deployable
``<host>_FakeDevice`` with 16 accelerators, 16 ``TEST_PCI`` attach handles,
rc ``FPGA`` and trait ``CUSTOM_FAKE_DEVICE``.  It reads no sysfs, so it is
reported even on a host whose tree has no devices.

It is ``Programmable``: programming records the image uuid in a state file
under ``[DEFAULT]state_path`` (as for real FPGAs, see ``fpga``), and the
next discovery carries it as the deployable's ``bitstream_id``, so FPGA
programming flows can be tested end to end.

It is ``HealthReporting``, with faults injected at run time: tests, and a
person trying the all-in-one, break the device by writing
``$state_path/fake_driver_health.json`` (``health_file``)::

    {"severity": "fatal", "reason": "injected", "code": "xid:79",
     "deployable": null, "probe": "ok"}

``severity`` (one of ``cyborg.common.states.SEVERITIES``, default ok) is
what every health check reports while the file says so, for the whole
device or, with ``deployable``, for that deployable only.  ``probe`` is
what an active re-probe answers (default: ok, unless ``severity`` is a
fault).  ``"program": "fail"`` makes programming fail as a vendor tool
that ran and failed does (``FPGAToolFailed``).  Deleting the file, or
writing ``"severity": "ok"``, heals the device.  The file is only re-read
when it changes; one that cannot be parsed is ignored (the previous state
holds) with a warning.
"""

import json
import os

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import states
from cyborg.drivers import base, fpga
from cyborg.objects import health
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

CONTROLPATH_ADDRESS = '0000:0c:00.0'
NUM_ACCELERATORS = 16
HEALTH_FILE = 'fake_driver_health.json'


def health_file(conf):
    """The fault injection file: ``$state_path/fake_driver_health.json``."""
    return os.path.join(conf.state_path, HEALTH_FILE)


class _Injection:
    """The fault injection file's content, re-read when it changes."""

    def __init__(self, path):
        self.path = path
        self._stamp = None
        self.values = {}

    def current(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._stamp, self.values = None, {}
            return self.values
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            self._load()
        return self.values

    def _load(self):
        try:
            with open(self.path) as f:
                values = json.load(f)
            if not isinstance(values, dict):
                raise ValueError('not a JSON object')
            for key in ('severity', 'probe'):
                if values.get(key, states.OK) not in states.SEVERITIES:
                    raise ValueError(f'unknown {key} {values[key]!r}')
        except (OSError, ValueError) as exc:
            LOG.warning('Ignoring fake driver health file %s: %s',
                        self.path, exc)
            return
        self.values = values


class FakeDriver(base.Driver, fpga.RecordsBitstreams, base.HealthReporting):

    name = 'fake_driver'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self._injection = _Injection(health_file(conf))

    def discover(self):
        handles = [
            inventory.AttachHandle(
                attach_type='TEST_PCI',
                attach_info={'domain': '0000', 'bus': '0c',
                             'device': f'{index:02x}', 'function': '0'})
            for index in range(NUM_ACCELERATORS)]
        deployable = inventory.Deployable(
            name=base.deployable_name(self.host, 'FakeDevice'),
            num_accelerators=NUM_ACCELERATORS,
            attributes=base.make_attributes('FPGA', ['CUSTOM_FAKE_DEVICE']),
            attach_handles=handles,
            driver_name=self.name)
        return self.with_bitstreams([inventory.DriverDevice(
            type='FPGA', vendor='0xABCD', model='miss model info',
            controlpath_id=inventory.ControlPathID(CONTROLPATH_ADDRESS),
            std_board_info={'product_id': '0xabcd', 'controller': None},
            deployables=[deployable])])

    def program(self, controlpath_id, image_path, image_uuid):
        if controlpath_id != CONTROLPATH_ADDRESS:
            raise exception.ResourceNotFound(resource='Fake FPGA',
                                             id=controlpath_id)
        if self._injection.current().get('program') == 'fail':
            # As a vendor tool that ran and failed (fpga.ToolProgrammable).
            self.remember(controlpath_id, None)
            raise exception.FPGAToolFailed(
                message='FPGA programming with the fake tool failed: '
                        'injected')
        self.remember(controlpath_id, image_uuid)
        LOG.info('Fake FPGA %s programmed with image %s', controlpath_id,
                 image_uuid)

    def check_health(self, devices):
        injected = self._injection.current()
        return [self._reading(device, injected.get('severity', states.OK),
                              injected, 'fake')
                for device in devices]

    def probe(self, device):
        injected = self._injection.current()
        severity = injected.get('severity', states.OK)
        default = states.OK if severity in states.HARMLESS else severity
        return self._reading(device, injected.get('probe', default),
                             injected, 'probe')

    @staticmethod
    def _reading(device, severity, injected, source):
        faulty = severity != states.OK
        return health.Reading(
            device=device.key(), severity=severity,
            reason=injected.get('reason', '') if faulty else '',
            deployable=injected.get('deployable') if faulty else None,
            source=source,
            code=injected.get('code') if faulty else None)
