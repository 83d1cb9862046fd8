"""What the FPGA drivers share: programming through the vendor's tool.

The tool runs privileged (``cyborg.agent.privileged.run_fpga_tool``); the
driver only says which tool and arguments, and refuses an address that is
not one of its FPGAs, so a bad request never reaches a vendor tool.
"""

import abc

from oslo_log import log as logging

from cyborg.common import exception
from cyborg.drivers import base
from cyborg.objects import inventory

LOG = logging.getLogger(__name__)


class ToolProgrammable(base.Programmable):
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
        privileged.run_fpga_tool(argv)


def opae_argv(address, image_path):
    """OPAE's ``fpgaconf`` for the FPGA at PCI ``address``."""
    info = inventory.pci_info(address)
    return ['fpgaconf', '--segment', '0x' + info['domain'],
            '--bus', '0x' + info['bus'], '--device', '0x' + info['device'],
            '--function', '0x' + info['function'], image_path]
