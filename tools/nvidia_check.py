"""What cyborg's NVIDIA driver reads on this host, next to nvidia-smi.

Read-only (it changes no GPU setting): runs the agent's NVIDIA driver as
the agent would (``/sys`` and NVML), checks every GPU's health a few
times and reads its usage, then compares what the driver says with
``nvidia-smi -q -x``: name, UUID, serial, total memory, MIG mode, memory
in use, utilization, temperature, power draw and the active clock event
reasons.  Prints one JSON document; exits 1 when a value differs (memory
in use, utilization, temperature and power are compared with a tolerance:
the GPU may be working while both are read), 2 when there is nothing to
compare (no NVIDIA GPU, no nvidia-smi).

    python tools/nvidia_check.py [--sysfs-root /sys] [--checks 5]

Run it on a new kind of GPU, or a new driver, before trusting the agent's
report of it (doc/source/drivers.rst).
"""

import argparse
import dataclasses
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

from oslo_config import cfg

import cyborg.conf
from cyborg.drivers import nvidia_gpu

MIB = 1024 * 1024
# Memory in use may move between the two reads: this much is not a
# difference.
MEMORY_SLACK_MIB = 64
UTILIZATION_SLACK = 0.25
TEMPERATURE_SLACK_C = 5
POWER_SLACK_WATTS = 50
# Where nvidia-smi puts the clock event reasons: today's name, then the
# name before driver 535 ("throttle").
_CLOCK_EVENT_SECTIONS = (('clocks_event_reasons', 'clocks_event_reason_'),
                         ('clocks_throttle_reasons',
                          'clocks_throttle_reason_'))


def _conf(sysfs_root):
    conf = cfg.ConfigOpts()
    cyborg.conf.register_opts(conf)
    conf([], project='cyborg', default_config_files=[],
         default_config_dirs=[])
    conf.set_override('sysfs_root', sysfs_root, 'agent')
    return conf


def nvidia_smi():
    """{PCI address: what nvidia-smi says of that GPU}, or None when
    nvidia-smi cannot be run."""
    try:
        out = subprocess.run(['nvidia-smi', '-q', '-x'], check=True,
                             capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(out)


def parse_nvidia_smi(xml):
    """``nvidia_smi()``'s answer from the XML of ``nvidia-smi -q -x``."""
    gpus = {}
    for gpu in ElementTree.fromstring(xml).iter('gpu'):
        # '00000000:00:06.0' -> '0000:00:06.0', as sysfs names it.
        address = gpu.get('id', '').lower()[-12:]

        def text(path, gpu=gpu):
            node = gpu.find(path)
            return node.text.strip() if node is not None and node.text \
                else None

        gpus[address] = {
            'name': text('product_name'), 'uuid': text('uuid'),
            'serial': text('serial'),
            'memory_mb': _leading_number(text('fb_memory_usage/total')),
            'memory_used_mb': _leading_number(text('fb_memory_usage/used')),
            'utilization': _percent(text('utilization/gpu_util')),
            'mig_enabled': text('mig_mode/current_mig') == 'Enabled',
            'temperature_celsius': _leading_number(
                text('temperature/gpu_temp')),
            'power_watts': _leading_number(
                text('gpu_power_readings/average_power_draw') or
                text('power_readings/power_draw'), float),
            'clock_events': _clock_events(gpu)}
    return gpus


def _clock_events(gpu):
    """The active clock event reasons, by the driver's names; None when
    nvidia-smi lists none."""
    for section, prefix in _CLOCK_EVENT_SECTIONS:
        node = gpu.find(section)
        if node is not None:
            return sorted(child.tag[len(prefix):] for child in node
                          if (child.text or '').strip() == 'Active')
    return None


def _leading_number(value, kind=int):
    """81559 of '81559 MiB', 42 of '42 %' (``kind=float``: 692.46 of
    '692.46 W'); None when absent or not a number ('N/A')."""
    try:
        return kind(value.split()[0])
    except (AttributeError, ValueError, IndexError):
        return None


def _percent(value):
    number = _leading_number(value)
    return None if number is None else number / 100.0


def read_driver(conf, checks):
    """What the driver reports: devices, health checks, usage."""
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'nvidia-check')
    started = time.perf_counter()
    devices = driver.discover()
    discovery_s = time.perf_counter() - started
    health = []
    for _ in range(checks):
        started = time.perf_counter()
        readings = driver.check_health(devices)
        health.append({'seconds': round(time.perf_counter() - started, 4),
                       'readings': [dataclasses.asdict(r)
                                    for r in readings]})
    return devices, {'discovery_seconds': round(discovery_s, 4),
                     'devices': [d.to_dict() for d in devices],
                     'health_checks': health,
                     'usage': driver.usage(devices)}


def compare(devices, usage, smi):
    """[difference, ...] between the driver's view and nvidia-smi's."""
    differences = []
    seen = {d.controlpath_id.cpid_info: d for d in devices}
    for address in sorted(set(smi) - set(seen)):
        differences.append(f'{address}: nvidia-smi lists it, the driver '
                           f'does not (excluded, or offered as nothing)')
    for address, device in sorted(seen.items()):
        theirs = smi.get(address)
        if theirs is None:
            differences.append(f'{address}: the driver offers it, '
                               f'nvidia-smi does not list it')
            continue
        ours = _driver_values(device, usage.get(device.key()))
        # MIG instances carry their own memory and UUID, not the GPU's.
        keys = (('name', 'mig_enabled') if ours['mig_enabled'] else
                ('name', 'uuid', 'serial', 'memory_mb', 'mig_enabled'))
        for key in keys:
            if ours.get(key) != theirs.get(key):
                differences.append(f'{address} {key}: driver '
                                   f'{ours.get(key)!r}, nvidia-smi '
                                   f'{theirs.get(key)!r}')
        if not _close(ours.get('memory_used_mb'),
                      theirs.get('memory_used_mb'), MEMORY_SLACK_MIB):
            differences.append(f"{address} memory in use: driver "
                               f"{ours.get('memory_used_mb')} MiB, "
                               f"nvidia-smi {theirs.get('memory_used_mb')}"
                               f" MiB")
        for key, slack in (('utilization', UTILIZATION_SLACK),
                           ('temperature_celsius', TEMPERATURE_SLACK_C),
                           ('power_watts', POWER_SLACK_WATTS)):
            if not _close(ours.get(key), theirs.get(key), slack):
                differences.append(f'{address} {key}: driver '
                                   f'{ours.get(key)}, nvidia-smi '
                                   f'{theirs.get(key)}')
        if ours.get('clock_events') != theirs.get('clock_events'):
            differences.append(f"{address} clock_events: driver "
                               f"{ours.get('clock_events')}, nvidia-smi "
                               f"{theirs.get('clock_events')}")
    return differences


def _driver_values(device, usage):
    attributes = {}
    for deployable in device.deployables:
        attributes.update(deployable.attributes)
    values = {'name': device.model, 'uuid': attributes.get('gpu_uuid'),
              'serial': attributes.get('serial'),
              'memory_mb': _int(attributes.get('memory_mb')),
              'mig_enabled': attributes.get('mig_mode') == 'enabled'
              or any(d.attributes.get('mig_uuid')
                     for d in device.deployables)}
    if usage:
        values['memory_used_mb'] = usage['memory_used_bytes'] // MIB
        values['utilization'] = usage['utilization']
        for key in ('temperature_celsius', 'power_watts'):
            values[key] = usage.get(key)
        if usage.get('clock_events') is not None:
            values['clock_events'] = sorted(usage['clock_events'])
    return values


def _int(value):
    return int(value) if value is not None else None


def _close(a, b, slack):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= slack


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sysfs-root', default='/sys')
    parser.add_argument('--checks', type=int, default=5,
                        help='health checks to run, one after another')
    args = parser.parse_args(argv)
    devices, report = read_driver(_conf(args.sysfs_root), args.checks)
    smi = nvidia_smi()
    report['nvidia_smi'] = smi
    if not smi and not devices:
        report['differences'] = ['no NVIDIA GPU seen by the driver or '
                                 'nvidia-smi']
        print(json.dumps(report, indent=1, default=str))
        return 2
    report['differences'] = compare(devices, report['usage'], smi or {})
    print(json.dumps(report, indent=1, default=str))
    return 1 if report['differences'] else 0


if __name__ == '__main__':
    sys.exit(main())
