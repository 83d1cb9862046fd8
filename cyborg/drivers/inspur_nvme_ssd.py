"""Inspur NVMe SSDs (vendor 0x1bd4, class 0x0108): type SSD, rc
``CUSTOM_SSD``, each controller passed through whole.

Health: PCI and, while the host's nvme driver holds the controller (not
while it is passed through to an instance, bound to vfio-pci), its state
and its temperature alarm::

    <function>/nvme/nvme<N>/state     "dead": the kernel gave up on it
                                      (-> fatal); "resetting" or
                                      "connecting": a reset under way,
                                      the sign of a command that timed
                                      out (-> transient)
    <function>/nvme/nvme<N>/hwmon/hwmon<M>/temp1_alarm
                                      1: the SMART critical warning for
                                      temperature (-> transient); read at
                                      most every SMART_INTERVAL seconds
                                      (each read makes the kernel ask the
                                      drive for its SMART log)

Usage: the temperature (the "Composite" sensor of the same hwmon).
"""

import os

from cyborg.common import states
from cyborg.drivers import base, pci_health, sysfs

VENDOR = '1bd4'
NVME = '0108'
# Controller states (the nvme driver's ``state`` file) that are faults.
FAULTY_STATES = {'dead': states.FATAL, 'resetting': states.TRANSIENT,
                 'connecting': states.TRANSIENT}
# Seconds between two reads of a controller's temperature alarm.
SMART_INTERVAL = 30.0


class InspurNVMeSSDDriver(base.WholeFunctionDriver, pci_health.PCIHealth):

    name = 'inspur_nvme_ssd_driver'
    device_type = 'SSD'
    resource_class = 'CUSTOM_SSD'

    def matches(self, function):
        return function.vendor == VENDOR and function.base_class == NVME

    def traits(self, function):
        return ['CUSTOM_SSD_INSPUR',
                base.custom_name('SSD_INSPUR', function.device)]

    def more_health(self, device, counters):
        readings = []
        for controller in self._controllers(device):
            name = os.path.basename(controller)
            state = sysfs.read_text(os.path.join(controller, 'state'))
            if state in FAULTY_STATES:
                readings.append(pci_health.reading(
                    device, FAULTY_STATES[state], 'nvme',
                    f'NVMe controller {name} is {state}', f'nvme:{state}'))
            for hwmon in sysfs.hwmon_dirs(controller):
                if self.read_sparingly(
                        ('nvme_alarm', hwmon), SMART_INTERVAL,
                        lambda hwmon=hwmon: bool(sysfs.read_int(
                            os.path.join(hwmon, 'temp1_alarm')))):
                    readings.append(pci_health.reading(
                        device, states.TRANSIENT, 'nvme',
                        f'NVMe controller {name}: critical temperature '
                        f'warning', 'nvme:temperature'))
        return readings

    def usage(self, devices):
        """``{device key: {'temperature_celsius': t}}`` of the controllers
        the host's nvme driver holds."""
        found = {}
        for device in devices:
            for controller in self._controllers(device):
                temperature = sysfs.hwmon_temperature(controller,
                                                      ('Composite',))
                if temperature is not None:
                    found[device.key()] = {
                        'temperature_celsius': temperature}
                    break
        return found

    def _controllers(self, device):
        # Empty when the nvme driver does not hold the function.
        top = os.path.join(
            self.function_path(device.controlpath_id.cpid_info), 'nvme')
        return [os.path.join(top, name) for name in sysfs.listdir(top)]
