"""Inspur FPGA cards (vendor 0x1bd4, processing accelerator class; the
same vendor's NVMe SSDs are ``inspur_nvme_ssd_driver``'s).  Each card is
passed through whole, rc FPGA; Inspur's cards (F10A, Arria 10 based) are
programmed with OPAE's ``fpgaconf``.

What proves which image a card runs (``fingerprint``): the ``afu_id`` of
its DFL port (shown while the DFL driver is bound to the card, not while
it is passed through on vfio-pci) and its PCI ids."""

from cyborg.drivers import base, fpga, fpga_health, sysfs

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

    def fingerprint(self, device):
        function = sysfs.Sysfs(self.sysfs_root).pci_function(
            device.controlpath_id.cpid_info)
        if function is None:
            return []
        proofs = ['function=' + function_id for function_id in
                  fpga.dfl_ids(function.path, 'afu_id')]
        return fpga.fingerprint_of(proofs, fpga.identity_marks(function))

    def fpga_tool(self, controlpath_id):
        return 'fpgaconf', controlpath_id
