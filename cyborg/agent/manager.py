"""Agent RPC endpoints, served on topic ``cyborg-agent``, server = host.

Thin: the work lives in the drivers (programming, mdevs) and the reporter.
"""

import oslo_messaging as messaging

from cyborg.agent import rpcapi


class AgentManager:

    target = messaging.Target(version=rpcapi.RPC_API_VERSION)

    def __init__(self, conf, host, reporter=None, drivers=None):
        self.conf = conf
        self.host = host
        self.reporter = reporter
        self.drivers = drivers or {}

    def fpga_program(self, context, controlpath_id, bitstream, driver_name):
        raise NotImplementedError  # the agent issue fills this in

    def create_vgpu_mdev(self, context, pci_address, asked_type, mdev_uuid):
        raise NotImplementedError  # the agent issue fills this in

    def remove_vgpu_mdev(self, context, pci_address, mdev_uuid):
        raise NotImplementedError  # the agent issue fills this in

    def request_report(self, context):
        if self.reporter is not None:
            self.reporter.request_full_report()
