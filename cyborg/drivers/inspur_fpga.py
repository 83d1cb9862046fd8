"""Inspur FPGA cards (vendor 0x1bd4, processing accelerator class; the
same vendor's NVMe SSDs are ``inspur_nvme_ssd_driver``'s).  Each card is
passed through whole, rc FPGA; Inspur's cards (F10A, Arria 10 based) are
programmed with OPAE's ``fpgaconf``."""

from cyborg.drivers import base, fpga, fpga_health

VENDOR = '1bd4'
ACCELERATOR_CLASS = '1200'


class InspurFPGADriver(base.WholeFunctionDriver, fpga.ToolProgrammable,
                       fpga_health.DFLHealth):

    name = 'inspur_fpga_driver'
    device_type = 'FPGA'
    resource_class = 'FPGA'

    def matches(self, function):
        return (function.vendor == VENDOR and
                function.base_class == ACCELERATOR_CLASS)

    def traits(self, function):
        return ['CUSTOM_FPGA_INSPUR',
                base.custom_name('FPGA_INSPUR', function.device)]

    def discover(self):
        return self.with_bitstreams(super().discover())

    def fpga_tool(self, controlpath_id):
        return 'fpgaconf', controlpath_id
