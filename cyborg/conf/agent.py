"""[agent] options."""

from oslo_config import cfg

GROUP = 'agent'

opts = [
    cfg.ListOpt('enabled_drivers', default=[],
                help='Accelerator drivers the agent loads (entry points in '
                     'the cyborg.accelerator.driver namespace), e.g. '
                     'nvidia_gpu_driver, intel_fpga_driver, pci_driver; '
                     'fake_driver (a fake FPGA of 16 accelerators) for '
                     'trying cyborg out. None by default, as in OpenStack '
                     'Cyborg: an agent reports no devices until it is '
                     'told which drivers to run.'),
    cfg.StrOpt('resource_provider_name',
               help='Name of the compute node resource provider in '
                    'Placement under which this host\'s devices are '
                    'nested. Defaults to the host\'s FQDN, then '
                    '[DEFAULT]host.'),
    cfg.StrOpt('sysfs_root', default='/sys',
               help='Root of the sysfs tree drivers read, and the '
                    'privileged helper writes mdevs in (read from its own '
                    'configuration files); tests point it at a fake tree.'),
    cfg.BoolOpt('hotplug', default=True,
                help='Watch udev (subsystems pci and mdev) and report at '
                     'once when a device appears, disappears or changes '
                     'driver.'),
    cfg.FloatOpt('hotplug_debounce', default=0.3, min=0.0,
                 help='Seconds to wait after a udev event for more events '
                      'before reporting, so a burst yields one report.'),
    cfg.FloatOpt('discovery_timeout', default=60.0, min=0.1,
                 help='Seconds a report waits for a driver\'s discovery. '
                      'A driver that takes longer (a call into its '
                      'hardware hangs) is reported with the devices the '
                      'conductor last acknowledged for it, and is not '
                      'asked again until that discovery returns; the '
                      'other drivers\' devices are reported on time.'),
    cfg.FloatOpt('ready_timeout', default=60.0, min=0.0,
                 help='Under systemd (a unit of Type=notify): seconds '
                      'the agent waits for the conductor to list the '
                      'mdevs of the host\'s bound accelerator requests, '
                      'which it makes again at start (a reboot took them '
                      'away), before it tells systemd it is ready anyway '
                      '(units ordered after it, nova-compute, then start; '
                      'the mdevs are made once the conductor answers). '
                      'Ready sooner once they are made, or when no '
                      'enabled driver makes mdevs; 0: ready at once. '
                      'systemd is asked to wait that long, whatever the '
                      'unit\'s TimeoutStartSec.'),
    cfg.StrOpt('cache_file',
               help='File holding the last inventory the conductor '
                    'acknowledged. Defaults to '
                    '$state_path/agent-<host>.json.'),
    cfg.ListOpt('nvidia_excluded_devices', default=[],
                help='PCI addresses (dddd:bb:dd.f) of NVIDIA GPUs the host '
                     'keeps for itself (e.g. a display) and that must not '
                     'be offered.'),
    cfg.ListOpt('enabled_vgpu_types', default=[],
                help='For nvidia_gpu_driver: mdev types (e.g. nvidia-35) '
                     'offered as VGPU. A GPU that already hosts mdevs '
                     'offers their types too. A GPU without SR-IOV VFs and '
                     'without an enabled type is offered whole as PGPU. '
                     'Enable one type per GPU: types share its capacity.'),
    cfg.MultiStrOpt('passthrough_whitelist', default=[],
                    deprecated_name='device_spec',
                    help='For pci_driver: JSON device specs in Nova\'s '
                         '[pci]device_spec format, e.g. {"vendor_id": '
                         '"8086", "product_id": "0d5c"} or {"address": '
                         '"0000:81:00.*"}.'),
    # A list, not a dict: a dict splits each entry at its FIRST colon, and
    # two PCI addresses of one domain were then one key given twice.
    cfg.ListOpt('physical_device_mappings', default=[],
                help='For intel_nic_driver: PF interface name or PCI '
                     'address to physical network, each '
                     '<interface or address>:<physnet>, e.g. '
                     'enp3s0f0:physnet1,0000:3b:00.0:physnet2,'
                     '0000:3b:00.1:physnet3.'),
    cfg.IntOpt('aer_correctable_burst', default=10, min=0,
               help='Correctable errors (PCIe AER, PCIe replays of an '
                    'NVIDIA GPU, FPGA memory ECC, AMD GPU and QAT RAS) of '
                    'one device within one health check interval above '
                    'which the device is reported as having a transient '
                    'fault. Fewer are only counted: links and memories '
                    'correct the odd error by design.'),
    cfg.StrOpt('nvml_module', default='pynvml', advanced=True,
               help='Python module implementing the NVML API, for tests.'),
]


def register_opts(conf):
    conf.register_opts(opts, group=GROUP)


def list_opts():
    return {GROUP: opts}
