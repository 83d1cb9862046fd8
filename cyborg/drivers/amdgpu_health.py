"""AMD GPU health and usage from the amdgpu kernel driver's sysfs, on top
of the PCI sources (``pci_health``).

RAS (reliability, availability, serviceability; kernel documentation
``gpu/amdgpu/ras``), under the GPU's PCI function::

    <function>/ras/<block>_err_count   one per IP block with RAS (umc is
                                       the memory, then gfx, sdma, mmhub,
                                       xgmi_wafl, ...): lines "ue: N",
                                       "ce: N" and, for umc on recent
                                       kernels, "de: N" (deferred)
    <function>/ras/aca_<block>         the same counts where a kernel
                                       reports them through AMD's
                                       Accelerator Check Architecture
                                       (Instinct MI300): read when the
                                       block has no <block>_err_count
    <function>/ras/gpu_vram_bad_pages  one line per bad memory page,
                                       "pfn : size : flag", flag R
                                       (retired), P (to be retired in the
                                       next window) or F (cannot be
                                       retired)

The counts are cumulative: an increase of uncorrectable errors in any
block is ``fatal``; correctable errors are counted, and ``transient``
when more than ``[agent]aer_correctable_burst`` arrive between two checks,
as correctable PCIe errors are.  Deferred errors are counted only (the
memory is poisoned; a workload that reads it gets an uncorrectable
error).  A page that cannot be retired (F) is ``fatal``: memory known to
be bad stays in use.  A count the driver cannot give right now ("Query
currently inaccessible", during a GPU reset) is skipped.  A GPU without
RAS (a Radeon) has no ``ras`` directory: nothing to read.

Usage (``usage``), for metrics and ``device.metrics`` notifications::

    <function>/gpu_busy_percent          utilization, 0..100
    <function>/mem_info_vram_used        memory in use, bytes
    <function>/hwmon/hwmon*/temp*_input  temperature, millidegrees C: the
                                         sensor labelled "edge", else
                                         "junction" (an Instinct GPU may
                                         not read its edge)
    <function>/hwmon/hwmon*/power1_average, else power1_input
                                         power, microwatts

This follows the kernel's documented ABI; it has not been read on an AMD
GPU here (no such hardware was at hand), unlike the NVIDIA driver.
"""

import os

from cyborg.common import states
from cyborg.drivers import pci_health, sysfs

RAS_DIR = 'ras'
ERR_COUNT_SUFFIX = '_err_count'
ACA_PREFIX = 'aca_'
BAD_PAGES = 'gpu_vram_bad_pages'
# The kinds of count an err_count file gives: (what they are, the counter
# each adds to, the severity of an increase (None: counted only), whether
# it counts only in bursts as corrected errors do).
_RAS_COUNTS = {
    'ue': ('uncorrectable', 'ras_uncorrectable', states.FATAL, False),
    'ce': ('correctable', 'ras_correctable', states.TRANSIENT, True),
    'de': ('deferred', 'ras_deferred', None, False),
}
# The flags of a bad page, and the counter of each.
_BAD_PAGE_FLAGS = {'R': 'bad_pages_retired', 'P': 'bad_pages_pending',
                   'F': 'bad_pages_unretirable'}
# hwmon sensors, best first.
_TEMPERATURE_LABELS = ('edge', 'junction')
_POWER_FILES = ('power1_average', 'power1_input')
_MICRO = 1000000.0


def parse_err_count(text):
    """``{'ue': n, 'ce': n, ...}`` of an err_count file; None when the
    driver cannot give the counts now (or the text is not counts)."""
    counts = {}
    for line in (text or '').splitlines():
        if not line.strip():
            continue
        kind, _, value = line.partition(':')
        try:
            counts[kind.strip()] = int(value)
        except ValueError:
            return None
    return counts or None


def _count_files(names):
    """``{block: file name}`` of a RAS directory's error count files:
    ``<block>_err_count``, else ``aca_<block>``."""
    found = {}
    for name in names:
        if name.startswith(ACA_PREFIX):
            found.setdefault(name[len(ACA_PREFIX):], name)
    for name in names:
        if name.endswith(ERR_COUNT_SUFFIX):
            found[name[:-len(ERR_COUNT_SUFFIX)]] = name
    return found


def parse_bad_pages(text):
    """``{flag: pages}`` of a gpu_vram_bad_pages file."""
    pages = dict.fromkeys(_BAD_PAGE_FLAGS, 0)
    for line in (text or '').splitlines():
        flag = line.rpartition(':')[2].strip()
        if flag in pages:
            pages[flag] += 1
    return pages


class AMDGPUHealth(pci_health.PCIHealth):
    """PCI health plus amdgpu's RAS error counts and bad pages."""

    def more_health(self, device, counters):
        # No RAS directory: a GPU without RAS, or not amdgpu's.
        ras = os.path.join(
            self.function_path(device.controlpath_id.cpid_info), RAS_DIR)
        names = sysfs.listdir(ras)
        readings = []
        for block, name in sorted(_count_files(names).items()):
            readings.extend(self._err_count(
                device, block, os.path.join(ras, name), counters))
        if BAD_PAGES in names:
            readings.extend(self._bad_pages(
                device, os.path.join(ras, BAD_PAGES), counters))
        return readings

    def _err_count(self, device, block, path, counters):
        counts = parse_err_count(sysfs.read_text(path))
        if counts is None:
            return []
        readings = []
        for kind, (what, counter, severity, correctable) in \
                _RAS_COUNTS.items():
            if kind not in counts:
                continue
            counters[counter] = counters.get(counter, 0) + counts[kind]
            if severity is None:
                continue
            new = self.new_errors(device, ('ras', block, kind),
                                  counts[kind], correctable=correctable)
            if new:
                readings.append(pci_health.reading(
                    device, severity, 'ras',
                    f'{new} new {what} errors in {block}',
                    f'ras:{block}_{kind}', event=True))
        return readings

    def _bad_pages(self, device, path, counters):
        pages = parse_bad_pages(sysfs.read_text(path))
        for flag, counter in _BAD_PAGE_FLAGS.items():
            counters[counter] = pages[flag]
        if not pages['F']:
            return []
        return [pci_health.reading(
            device, states.FATAL, 'ras',
            f"{pages['F']} bad memory pages cannot be retired",
            'ras:bad_pages_unretirable')]

    # -- usage -------------------------------------------------------------

    def usage(self, devices):
        """``{device key: values}`` for the GPUs amdgpu tells about:
        ``utilization`` (0..1) and ``memory_used_bytes``, with
        ``temperature_celsius`` and ``power_watts`` where its hwmon
        gives them."""
        found = {}
        for device in devices:
            values = self._usage(
                self.function_path(device.controlpath_id.cpid_info))
            if values:
                found[device.key()] = values
        return found

    def _usage(self, path):
        values = {}
        busy = sysfs.read_int(os.path.join(path, 'gpu_busy_percent'))
        if busy is not None:
            values['utilization'] = busy / 100.0
        used = sysfs.read_int(os.path.join(path, 'mem_info_vram_used'))
        if used is not None:
            values['memory_used_bytes'] = used
        temperature = sysfs.hwmon_temperature(path, _TEMPERATURE_LABELS)
        if temperature is not None:
            values['temperature_celsius'] = temperature
        power = _power(path)
        if power is not None:
            values['power_watts'] = power
        return values


def _power(path):
    """Watts from the first hwmon that reads a power file (microwatts)."""
    for hwmon in sysfs.hwmon_dirs(path):
        for name in _POWER_FILES:
            power = sysfs.read_int(os.path.join(hwmon, name))
            if power is not None:
                return power / _MICRO
    return None
