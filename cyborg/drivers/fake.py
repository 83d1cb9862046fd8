"""The fake driver: exactly the fake device of CONTRACT.md §6.

Other projects' tests (and ours) schedule and bind against it without
hardware: device type FPGA, vendor ``0xABCD``, one deployable
``<host>_FakeDevice`` with 16 accelerators, 16 ``TEST_PCI`` attach handles,
rc ``FPGA`` and trait ``CUSTOM_FAKE_DEVICE``.  It reads no sysfs, so it is
reported even on a host whose tree has no devices.

It is ``Programmable``: programming records the image uuid in a state file
under ``[DEFAULT]state_path`` (as for real FPGAs, see ``fpga``), and the
next discovery carries it as the deployable's ``bitstream_id``, so FPGA
programming flows can be tested end to end.
"""

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.drivers import base, fpga
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)

CONTROLPATH_ADDRESS = '0000:0c:00.0'
NUM_ACCELERATORS = 16


class FakeDriver(base.Driver, fpga.RecordsBitstreams):

    name = 'fake_driver'

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
        self.remember(controlpath_id, image_uuid)
        LOG.info('Fake FPGA %s programmed with image %s', controlpath_id,
                 image_uuid)
