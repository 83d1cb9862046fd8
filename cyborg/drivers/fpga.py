"""What the FPGA drivers share: programming through the vendor's tool, and
remembering what was programmed.

The tool runs privileged (``cyborg.agent.privileged.run_fpga_tool``); the
driver only says which tool and arguments, and refuses an address that is
not one of its FPGAs, so a bad request never reaches a vendor tool.

Hardware does not say which Glance image it runs, so the agent records
the image it programmed, per device, in a state file
(``$state_path/fpga-<driver>-<host>.json``) with the device's function ids
as they were right after programming; discovery reports the image as the
deployables' ``bitstream_id`` while those ids are unchanged (someone
reprogramming the card by hand makes it unknown again, not wrong).
"""

import abc
import json
import os

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.drivers import base
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)


class BitstreamRecord:
    """``{controlpath id: {'image_uuid', 'fingerprint'}}`` on disk."""

    def __init__(self, conf, driver_name, host):
        self.path = os.path.join(conf.state_path,
                                 f'fpga-{driver_name}-{host}.json')

    def load(self):
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}
        except ValueError:
            LOG.warning('Ignoring unreadable %s', self.path)
            return {}

    def save(self, controlpath_id, image_uuid, fingerprint):
        records = self.load()
        records[controlpath_id] = {'image_uuid': image_uuid,
                                   'fingerprint': fingerprint}
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(records, f, sort_keys=True)
        os.replace(tmp, self.path)


def fingerprint(device):
    """What identifies the loaded function(s): the deployables' function
    ids (empty for FPGAs that do not expose one)."""
    return sorted(d.attributes.get('function_id') or ''
                  for d in device.deployables)


class RecordsBitstreams(base.Programmable):
    """Sets ``bitstream_id`` on discovered devices from the record."""

    def _record(self):
        return BitstreamRecord(self.conf, self.name, self.host)

    def with_bitstreams(self, devices):
        records = self._record().load()
        for device in devices:
            record = records.get(device.controlpath_id.cpid_info)
            if record and record['fingerprint'] == fingerprint(device):
                for deployable in device.deployables:
                    deployable.bitstream_id = record['image_uuid']
        return devices

    def remember(self, controlpath_id, image_uuid):
        """Record ``image_uuid`` as what ``controlpath_id`` now runs."""
        found = [d for d in self.discover()
                 if d.controlpath_id.cpid_info == controlpath_id]
        marks = fingerprint(found[0]) if found else []
        self._record().save(controlpath_id, image_uuid, marks)


class ToolProgrammable(RecordsBitstreams):
    """``Programmable`` by running a command built by ``program_argv``."""

    @abc.abstractmethod
    def program_argv(self, controlpath_id, image_path):
        """The vendor tool's argv programming ``controlpath_id``."""

    def program(self, controlpath_id, image_path, image_uuid):
        if controlpath_id not in {d.controlpath_id.cpid_info
                                  for d in self.discover()}:
            raise exception.ResourceNotFound(resource='FPGA',
                                             id=controlpath_id)
        from cyborg.agent import privileged
        argv = self.program_argv(controlpath_id, image_path)
        LOG.info('Programming FPGA %s with image %s: %s', controlpath_id,
                 image_uuid, ' '.join(argv))
        try:
            privileged.run_fpga_tool(argv)
        except exception.FPGAToolFailed:
            # It may have written part of the card: the image it ran
            # before is no longer known to be there.
            try:
                self.remember(controlpath_id, None)
            except Exception:
                LOG.exception('Could not forget the image recorded for '
                              'FPGA %s', controlpath_id)
            raise
        self.remember(controlpath_id, image_uuid)


def opae_argv(address, image_path):
    """OPAE's ``fpgaconf`` for the FPGA at PCI ``address``."""
    info = inventory.pci_info(address)
    return ['fpgaconf', '--segment', '0x' + info['domain'],
            '--bus', '0x' + info['bus'], '--device', '0x' + info['device'],
            '--function', '0x' + info['function'], image_path]
