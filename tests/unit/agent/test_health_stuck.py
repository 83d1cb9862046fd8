"""The health monitor when a driver's check does not answer, or cannot
read a device: each driver is checked on a thread of its own with a
deadline, a check that read nothing is no clearing, and a re-probe is
answered from the next periodic check rather than a check of its own.

Over oslo.messaging's fake:// transport, against the recording conductor
endpoint of ``test_health``; the hardware is the fake sysfs tree and the
fake NVML."""

import threading
import time

import pynvml

from cyborg.common import metrics
from cyborg.common import states
from cyborg.drivers import base
from cyborg.drivers import loader
from cyborg.drivers import nvidia_gpu
from cyborg.objects import health
from tests.fixtures import sysfs as fake_sysfs
from tests.unit.agent import test_health as monitor_tests
from tests.unit.agent.test_health import (
    GPU_A, HOST, KEY_A, KEY_B, MeteredDriver, WatchedDriver, _agent, _fault,
    _wait_for)
from tests.unit.drivers.test_health_check_errors import FailingNVML

# The fixtures of the monitor's own tests: its configuration, and the
# recording conductor endpoint over fake://.
conf = monitor_tests.conf
conductor = monitor_tests.conductor

NIC_KEY = 'PCI:0000:d8:00.0'


class HangingDriver(WatchedDriver):
    """GPUs whose check blocks while ``hang`` is set, as NVML does on a
    wedged GPU; counts the checks begun."""

    name = 'hanging_driver'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.hang = threading.Event()
        self.release = threading.Event()
        self.begun = 0

    def check_health(self, devices):
        self.begun += 1
        if self.hang.is_set():
            self.release.wait(60)
        return super().check_health(devices)


def _sent(conductor, since=0):
    """[(device, severity, code, source)] of the readings reported."""
    return [(r['device'], r['severity'], r['code'], r['source'])
            for report in conductor.health_reports[since:]
            for r in report['readings']]


def test_a_hung_check_holds_its_own_driver_only(conf, conductor):
    """One thread ran every driver's check without a time limit: one NVML
    call that never returned stopped every device's health readings (a
    NIC's link going down was never reported)."""
    conf.set_override('check_timeout', 0.5, 'health')
    gpus = HangingDriver(conf, HOST)
    nic = MeteredDriver(conf, HOST)         # one device, NIC_KEY
    _reporter, monitor = _agent(conf, gpus, nic)
    monitor.start()
    try:
        _wait_for(lambda: len(conductor.health_reports) == 1)
        gpus.hang.set()
        begun = gpus.begun
        _wait_for(lambda: gpus.begun == begun + 1)
        started = time.monotonic()
        nic.faults[NIC_KEY] = _fault(NIC_KEY, code='nic:link_down')
        _wait_for(lambda: (NIC_KEY, 'fatal', 'nic:link_down', 'test') in
                  _sent(conductor))
        assert time.monotonic() - started < 2
        # Past [health]check_timeout the hung driver's devices read "timed
        # out": suspect, not taken for well; said once.
        _wait_for(lambda: {(KEY_A, 'transient', base.CHECK_TIMEOUT, 'agent'),
                           (KEY_B, 'transient', base.CHECK_TIMEOUT, 'agent')}
                  <= set(_sent(conductor)))
        [reason] = {r['reason'] for report in conductor.health_reports
                    for r in report['readings']
                    if r['code'] == base.CHECK_TIMEOUT}
        assert 'hanging_driver' in reason and 'not watched' in reason
        checks = monitor.checks
        _wait_for(lambda: monitor.checks >= checks + 5)
        # Not started again while it hangs: one thread per driver.
        assert gpus.begun == begun + 1
        assert [c for c in _sent(conductor)
                if c[2] == base.CHECK_TIMEOUT] == [
            (KEY_A, 'transient', base.CHECK_TIMEOUT, 'agent'),
            (KEY_B, 'transient', base.CHECK_TIMEOUT, 'agent')]
        # It returns: its reading is taken, its devices read well again.
        reports = len(conductor.health_reports)
        gpus.hang.clear()
        gpus.release.set()
        _wait_for(lambda: {(KEY_A, 'ok', None, 'test'),
                           (KEY_B, 'ok', None, 'test')}
                  <= set(_sent(conductor, reports)))
        _wait_for(lambda: gpus.begun > begun + 1)
    finally:
        gpus.release.set()
        monitor.stop()


def test_a_probe_of_a_hung_driver_says_timed_out(conf, conductor):
    conf.set_override('check_timeout', 0.3, 'health')
    gpus = HangingDriver(conf, HOST)
    _reporter, monitor = _agent(conf, gpus)
    monitor.check_once()
    gpus.hang.set()
    try:
        monitor.check_once()
        monitor.request_probe([KEY_A])
        assert monitor.probe_once() == []       # from the next check
        time.sleep(0.3)
        monitor.check_once()
        verdicts = [r for r in monitor._pending if r.source == 'probe']
        assert [(v.device, v.severity, v.code) for v in verdicts] == [
            (KEY_A, states.TRANSIENT, base.CHECK_TIMEOUT)]
    finally:
        gpus.release.set()


def test_usage_of_a_hung_driver_is_skipped(conf, conductor):
    conf.set_override('check_timeout', 0.3, 'health')
    gpus = HangingDriver(conf, HOST)
    metered = MeteredDriver(conf, HOST)
    _reporter, monitor = _agent(conf, gpus, metered)
    monitor.check_once()
    gpus.hang.set()
    try:
        started = time.monotonic()
        monitor.check_once()
        assert set(monitor.sample_usage()) == {NIC_KEY}
        assert time.monotonic() - started < 1
    finally:
        gpus.release.set()


class HangingMeteredDriver(MeteredDriver):
    """A GPU, hot and slowed down, whose usage (``hang_usage``) or check
    (``hang_check``) blocks while set, as NVML does on a wedged GPU."""

    name = 'hanging_metered_driver'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.values.update(temperature_celsius=95,
                           clock_events=['hw_thermal_slowdown'])
        self.hang_usage = threading.Event()
        self.hang_check = threading.Event()
        self.release = threading.Event()

    def usage(self, devices):
        if self.hang_usage.is_set():
            self.release.wait(60)
        return super().usage(devices)

    def check_health(self, devices):
        if self.hang_check.is_set():
            self.release.wait(60)
        return super().check_health(devices)


def _usage_series(device=NIC_KEY):
    """(temperature, hw_thermal_slowdown active) of ``device``; None where
    it has no series."""
    return (metrics.REGISTRY.get_sample_value(
                'cyborg_agent_device_temperature_celsius',
                {'device': device}),
            metrics.REGISTRY.get_sample_value(
                'cyborg_agent_device_clock_event_active',
                {'device': device, 'reason': 'hw_thermal_slowdown'}))


def test_usage_series_go_while_the_usage_call_hangs(conf, conductor):
    """A usage sample that did not return was skipped, and the driver
    skipped as busy at every later sample: its GPU kept its last
    temperature and its hardware slowdown (CyborgGPUHardwareSlowdown
    firing on data nobody read any more) for as long as NVML hung.  Past
    [health]check_timeout its series go; the next good sample brings
    them back."""
    conf.set_override('check_timeout', 30, 'health')
    gpu = HangingMeteredDriver(conf, HOST)
    _reporter, monitor = _agent(conf, gpu)
    monitor.sample_usage()
    assert _usage_series() == (95, 1)
    gpu.hang_usage.set()
    try:
        # Late, within check_timeout: what was read last still holds.
        assert monitor.sample_usage() == {}
        assert _usage_series() == (95, 1)
        # Past check_timeout (the call has run for a round already).
        conf.set_override('check_timeout', 0.3, 'health')
        assert monitor.sample_usage() == {}
        assert _usage_series() == (None, None)
        monitor.check_once()
        monitor.sample_usage()
        assert _usage_series() == (None, None)
        gpu.hang_usage.clear()
        gpu.release.set()
        _wait_for(lambda: NIC_KEY in monitor.sample_usage())
        assert _usage_series() == (95, 1)
    finally:
        gpu.release.set()


def test_usage_series_go_while_the_check_hangs(conf, conductor):
    """A driver whose check hangs is busy: no usage sample of it, and past
    [health]check_timeout no series either."""
    conf.set_override('check_timeout', 30, 'health')
    gpu = HangingMeteredDriver(conf, HOST)
    _reporter, monitor = _agent(conf, gpu)
    monitor.check_once()
    monitor.sample_usage()
    assert _usage_series() == (95, 1)
    gpu.hang_check.set()
    try:
        monitor.check_once()
        assert monitor.sample_usage() == {}
        assert _usage_series() == (95, 1)
        time.sleep(0.4)
        conf.set_override('check_timeout', 0.3, 'health')
        assert monitor.sample_usage() == {}
        assert _usage_series() == (None, None)
        gpu.hang_check.clear()
        gpu.release.set()
        _wait_for(lambda: monitor.check_once() is not None and
                  NIC_KEY in monitor.sample_usage())
        assert _usage_series() == (95, 1)
    finally:
        gpu.release.set()


def _nvidia(conf, tmp_path):
    """The NVIDIA driver over a fake tree and a FailingNVML: one A100."""
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(GPU_A, *fake_sysfs.A100, driver='nvidia', numa_node=0)
    conf.set_override('sysfs_root', tree.root, 'agent')
    nvml = FailingNVML(tmp_path / 'nvml.json')
    nvml.write({'driver_loaded': True, 'xids': [], 'gpus': {GPU_A: {
        'name': 'NVIDIA A100', 'uuid': 'GPU-1', 'serial': '1',
        'memory_mb': 40960, 'mig': False, 'pcie_replays': 0,
        'remapped_rows': {'correctable': 0, 'uncorrectable': 0,
                          'pending': True, 'failure': False}}}})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, HOST, nvml=nvml)
    driver.name = 'nvidia_gpu_driver'
    return driver, nvml


def test_a_check_that_read_nothing_is_no_clearing(conf, conductor,
                                                  tmp_path):
    """A check that raised for a device sent an ok reading: the fault it
    had read as cleared (a device out started its re-admission), and the
    condition that still held was then sent again as a new fault."""
    driver, nvml = _nvidia(conf, tmp_path)
    _reporter, monitor = _agent(conf, driver)

    def sent():
        before = len(conductor.health_reports)
        monitor.check_once()
        assert monitor.send_once()
        return [(r['severity'], r['code'])
                for report in conductor.health_reports[before:]
                for r in report['readings']]

    assert sent() == [('transient', 'ecc:row_remap_pending')]
    nvml.failing['nvmlDeviceGetRemappedRows'] = ValueError('bad answer')
    assert sent() == [('transient', base.CHECK_FAILED)]
    assert sent() == []
    # The full report re-states the condition beside the failure.
    monitor._full_wanted = True
    assert sorted(sent()) == [('transient', base.CHECK_FAILED),
                              ('transient', 'ecc:row_remap_pending')]
    del nvml.failing['nvmlDeviceGetRemappedRows']
    # The condition held throughout: no new fault.
    assert sent() == []
    nvml.update_gpu(GPU_A, remapped_rows={'pending': False})
    assert sent() == [('ok', None)]


def test_a_gpu_that_needs_a_reset_is_never_reported_well(conf, conductor,
                                                        tmp_path):
    driver, nvml = _nvidia(conf, tmp_path)
    _reporter, monitor = _agent(conf, driver)
    monitor.check_once()
    assert monitor.send_once()
    nvml.add_xid(GPU_A, 95)
    for name in ('nvmlDeviceGetRemappedRows',
                 'nvmlDeviceGetPcieReplayCounter'):
        nvml.failing[name] = pynvml.NVML_ERROR_RESET_REQUIRED
    for _ in range(3):
        monitor.check_once()
    monitor.request_probe([KEY_A])
    assert monitor.probe_once() == []
    monitor.check_once()
    assert monitor.send_once()
    sent = [(r['severity'], r['code'], r['source'])
            for report in conductor.health_reports[1:]
            for r in report['readings']]
    assert sent == [('fatal', 'xid:95', 'nvml'),
                    ('fatal', 'nvml:reset_required', 'nvml'),
                    ('fatal', 'nvml:reset_required', 'probe')]


# -- re-probes -----------------------------------------------------------


def _nic_host(conf, tmp_path):
    root = tmp_path / 'sys'
    tree, options = fake_sysfs.build('nic', root)
    fake_sysfs.apply_options(conf, options, root, tmp_path / 'state')
    return tree, loader.load_driver(conf, HOST, 'intel_nic_driver')


def test_a_probe_moves_nothing_the_checks_compare(conf, conductor,
                                                  tmp_path):
    """A re-probe ran one more check of its own: caught between libvirt's
    unbind and rebind of a function, which the checks tolerate for one
    check, the probe was that function's second check without a driver,
    and its verdict "gone" sent the device back out.  The verdict now
    comes from the next periodic check."""
    tree, driver = _nic_host(conf, tmp_path)
    _reporter, monitor = _agent(conf, driver)
    key = 'PCI:0000:b1:00.0'
    monitor.check_once()
    assert monitor.send_once()
    tree.set_driver('0000:b1:00.0', None)           # libvirt unbinds...
    monitor.check_once()
    monitor.request_probe([key])
    assert monitor.probe_once() == []
    tree.set_driver('0000:b1:00.0', 'ice')          # ...and rebinds
    monitor.check_once()
    assert monitor.send_once()
    sent = [(r['device'], r['severity'], r['source'])
            for report in conductor.health_reports[1:]
            for r in report['readings']]
    assert sent == [(key, states.OK, 'probe')]


def test_a_probe_is_answered_by_a_check_begun_after_it(conf, conductor):
    watched = WatchedDriver(conf, HOST)
    _reporter, monitor = _agent(conf, watched)
    monitor.check_once()
    watched.faults[KEY_A] = _fault(KEY_A)
    monitor.request_probe([KEY_A])
    monitor.probe_once()
    monitor.check_once()
    verdicts = [(r.device, r.severity, r.source) for r in monitor._pending
                if r.source == 'probe']
    assert verdicts == [(KEY_A, states.FATAL, 'probe')]
    # A partition's fault goes beside the device's verdict.
    watched.faults[KEY_A] = health.Reading(
        device=KEY_A, severity=states.TRANSIENT, deployable='h_part',
        source='test', code='fpga:port_errors')
    monitor.request_probe([KEY_A])
    monitor.probe_once()
    monitor.check_once()
    verdicts = [(r.severity, r.deployable) for r in monitor._pending
                if r.source == 'probe']
    assert verdicts[1:] == [(states.OK, None),
                            (states.TRANSIENT, 'h_part')]
