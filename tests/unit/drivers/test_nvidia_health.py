"""NVIDIA GPU health through NVML (the file-backed fake NVML)."""

import collections
import datetime
import os
import sys
import time

from cyborg.common import metrics, states
from cyborg.conductor import health_machine
from cyborg.drivers import nvidia_gpu, nvml_health, pci_health
from tests.fixtures import fake_nvml
from tests.fixtures import sysfs as fake_sysfs

WHOLE = '0000:3b:00.0'          # offered whole (or as MIG instances)
VGPU = '0000:5e:00.0'           # offered as vGPUs
MIG = [{'gpu_instance_id': 1, 'profile': '3g.20gb', 'memory_mb': 20096,
        'uuid': 'MIG-aaaa'},
       {'gpu_instance_id': 5, 'profile': '1g.5gb', 'memory_mb': 4864,
        'uuid': 'MIG-bbbb'}]


def _gpu(uuid, **more):
    gpu = {'name': 'NVIDIA A100-PCIE-40GB', 'uuid': uuid, 'serial': '1',
           'memory_mb': 40960, 'memory_used_mb': 0, 'utilization': 0,
           'ecc_uncorrected': 0,
           'remapped_rows': {'correctable': 0, 'uncorrectable': 0,
                             'pending': False, 'failure': False}}
    gpu.update(more)
    return gpu


def _setup(conf, scenario, tmp_path, gpus=None):
    scenario('nvidia_sriov')
    nvml = fake_nvml.create(tmp_path / 'nvml.json', gpus or {
        WHOLE: _gpu('GPU-1', mig=MIG), VGPU: _gpu('GPU-2')})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    driver.name = 'nvidia_gpu_driver'
    return driver, nvml, driver.discover()


def _check(driver, devices, address=WHOLE):
    """[(severity, code, deployable)] of one check of one GPU."""
    return sorted((r.severity, r.code or '', r.deployable or '')
                  for r in driver.check_health(devices)
                  if r.device == 'PCI:' + address)


def test_xids_are_classified_and_scoped(conf, scenario, tmp_path):
    driver, nvml, devices = _setup(conf, scenario, tmp_path)
    nvml.add_xid(WHOLE, 79)
    # Events from before the first check (registration) are not replayed.
    assert _check(driver, devices) == [(states.OK, '', '')]
    before = metrics.REGISTRY.get_sample_value(
        'cyborg_agent_xid_events_total',
        {'device': 'PCI:' + WHOLE, 'xid': '13', 'severity': 'application'})
    nvml.add_xid(WHOLE, 13)
    nvml.add_xid(WHOLE, 31, gpu_instance_id=5)
    nvml.add_xid(WHOLE, 79, gpu_instance_id=1)
    nvml.add_xid(VGPU, 48)
    assert _check(driver, devices) == [
        (states.APPLICATION, 'xid:13', ''),
        # An application XID in a MIG instance concerns that instance...
        (states.APPLICATION, 'xid:31', 'h_0000:3b:00.0_MIG5'),
        # ...a fatal one the whole GPU, whatever instance it names.
        (states.FATAL, 'xid:79', '')]
    after = metrics.REGISTRY.get_sample_value(
        'cyborg_agent_xid_events_total',
        {'device': 'PCI:' + WHOLE, 'xid': '13', 'severity': 'application'})
    assert after == (before or 0) + 1
    # Each event is seen once; the other GPU's event was its own.
    assert _check(driver, devices) == [(states.OK, '', '')]
    nvml.add_xid(VGPU, 999)
    reading = [r for r in driver.check_health(devices)
               if r.device == 'PCI:' + VGPU]
    assert [(r.severity, r.code) for r in reading] == [
        (states.TRANSIENT, 'xid:999')]
    assert reading[0].counters['xid'] == 2


def test_a_fatal_xid_is_stamped_with_its_time(conf, scenario, tmp_path):
    """When the GPU last reported each fatal XID, for an alert on "in the
    last 10 minutes" that the XID counter cannot give: its series comes
    back at the value it had after the agent restarts, or after the GPU
    was gone and is back, and increase() then sees nothing."""
    driver, nvml, devices = _setup(conf, scenario, tmp_path)
    _check(driver, devices)

    def stamp(xid, address=WHOLE):
        return metrics.REGISTRY.get_sample_value(
            'cyborg_agent_gpu_last_fatal_xid_timestamp_seconds',
            {'device': 'PCI:' + address, 'xid': xid})

    before = time.time()
    nvml.add_xid(WHOLE, 79)
    nvml.add_xid(WHOLE, 13)
    nvml.add_xid(VGPU, 61)
    driver.check_health(devices)
    assert before <= stamp('79') <= time.time()
    # Application and transient XIDs are not fatal ones.
    assert stamp('13') is None and stamp('61', VGPU) is None
    time.sleep(0.01)
    nvml.add_xid(WHOLE, 79)
    first = stamp('79')
    driver.check_health(devices)
    assert stamp('79') > first


def test_ecc_errors_counted_while_the_agent_was_down_are_reported(
        conf, scenario, tmp_path):
    """Given the counters an earlier agent last saw (its driver's health
    record, ``PCIHealth.health_counters``), the first check compares with
    them: an uncorrectable ECC error counted meanwhile is reported, PCIe
    replays that piled up meanwhile are no burst."""
    driver, nvml, devices = _setup(conf, scenario, tmp_path, gpus={
        WHOLE: _gpu('GPU-1', ecc_uncorrected=4, pcie_replays=0)})
    [device] = [d for d in devices if d.controlpath_id.cpid_info == WHOLE]
    before = pci_health.CounterTracker()
    watcher = nvml_health.NvmlWatcher(nvml, counters=before)
    assert watcher.check(device, {}) == []
    watcher.close()
    nvml.update_gpu(WHOLE, ecc_uncorrected=5, pcie_replays=500)
    carried = pci_health.CounterTracker()
    carried.restore(before.values())
    restarted = nvml_health.NvmlWatcher(nvml, counters=carried)
    assert [(r.severity, r.code) for r in restarted.check(device, {})] == [
        (states.FATAL, 'ecc:uncorrected')]
    assert restarted.check(device, {}) == []


def test_a_restarted_driver_reports_ecc_errors_counted_while_down(
        conf, scenario, tmp_path):
    """The driver gives its watcher the counters of its health record:
    an agent restarted (a new driver on the same state_path) reports an
    uncorrectable ECC error counted while it was down, where it took the
    new count for a baseline."""
    # The agent's state directory (its report cache makes it).
    (tmp_path / 'state').mkdir()
    conf.set_override('state_path', str(tmp_path / 'state'))
    driver, nvml, devices = _setup(conf, scenario, tmp_path, gpus={
        WHOLE: _gpu('GPU-1', ecc_uncorrected=4, pcie_replays=0)})
    assert _check(driver, devices) == [(states.OK, '', '')]
    driver._watcher.close()
    nvml.update_gpu(WHOLE, ecc_uncorrected=5, pcie_replays=500)
    restarted = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    restarted.name = 'nvidia_gpu_driver'
    assert _check(restarted, restarted.discover()) == [
        (states.FATAL, 'ecc:uncorrected', '')]


def test_repeated_xids_are_one_reading(conf, scenario, tmp_path):
    driver, nvml, devices = _setup(conf, scenario, tmp_path)
    _check(driver, devices)
    for _ in range(3):
        nvml.add_xid(WHOLE, 45)
    [r] = [r for r in driver.check_health(devices)
           if r.device == 'PCI:' + WHOLE]
    assert r.reason == 'XID 45: Preemptive cleanup, due to previous ' \
        'errors (x3)'


def test_ecc_and_row_remapping(conf, scenario, tmp_path):
    driver, nvml, devices = _setup(conf, scenario, tmp_path, gpus={
        WHOLE: _gpu('GPU-1', ecc_uncorrected=4, retired_pages_pending=False)})
    [r] = driver.check_health(devices)[:1]
    assert r.severity == states.OK
    assert r.counters['ecc_uncorrected'] == 4       # a baseline
    nvml.update_gpu(WHOLE, ecc_uncorrected=5)
    assert _check(driver, devices) == [(states.FATAL, 'ecc:uncorrected', '')]
    assert _check(driver, devices) == [(states.OK, '', '')]

    nvml.update_gpu(WHOLE, remapped_rows={'pending': True})
    # A condition: reported until the GPU is reset.
    for _ in range(2):
        assert _check(driver, devices) == [
            (states.TRANSIENT, 'ecc:row_remap_pending', '')]
    nvml.update_gpu(WHOLE, remapped_rows={'pending': True, 'failure': True})
    assert _check(driver, devices) == [
        (states.FATAL, 'ecc:row_remap_failure', '')]
    nvml.update_gpu(WHOLE, remapped_rows={}, retired_pages_pending=True)
    assert _check(driver, devices) == [
        (states.TRANSIENT, 'ecc:retired_pages_pending', '')]


def test_a_row_remap_recorded_is_transient_its_failure_fatal(
        conf, scenario, tmp_path):
    """XID 63 comes when a row remap becomes pending (effective at the
    next GPU reset; the GPU works on meanwhile): transient, like the
    pending remap the row remapper reports, so that max_suspect_time = 0
    keeps such a GPU in the schedule.  A remap that could not be recorded
    (XID 64) is fatal."""
    driver, nvml, devices = _setup(conf, scenario, tmp_path)
    _check(driver, devices)
    nvml.add_xid(WHOLE, 63)
    found = [r for r in driver.check_health(devices)
             if r.device == 'PCI:' + WHOLE]
    # No pending remap read (yet): the XID is the one sign of it.
    assert [(r.severity, r.code) for r in found] == [
        (states.TRANSIENT, 'xid:63')]
    settings = health_machine.Settings(max_suspect_time=0)
    record = health_machine.step(health_machine.Record(), found,
                                 datetime.datetime(2025, 1, 1), settings)
    assert record.health == states.SUSPECT
    nvml.add_xid(WHOLE, 64)
    nvml.update_gpu(WHOLE, remapped_rows={'pending': True, 'failure': True})
    assert _check(driver, devices) == [
        (states.FATAL, 'ecc:row_remap_failure', ''),
        (states.FATAL, 'xid:64', '')]


def _xid_63_count():
    return metrics.REGISTRY.get_sample_value(
        'cyborg_agent_xid_events_total',
        {'device': 'PCI:' + WHOLE, 'xid': '63',
         'severity': states.TRANSIENT}) or 0


def test_one_row_remap_is_one_fault(conf, scenario, tmp_path):
    """A row remap raises XID 63 and makes the remap pending, which the
    row remapper reports as a condition: one remap, counted once.  Were
    the XID a reading too, one remap would be two transient faults of
    [health]suspect_threshold (3) in one check, and any fault soon after
    would take the GPU out."""
    driver, nvml, devices = _setup(conf, scenario, tmp_path)
    _check(driver, devices)
    xids = _xid_63_count()
    nvml.add_xid(WHOLE, 63)
    nvml.update_gpu(WHOLE, remapped_rows={'pending': True})
    found = [r for r in driver.check_health(devices)
             if r.device == 'PCI:' + WHOLE]
    assert [(r.severity, r.code) for r in found] == [
        (states.TRANSIENT, 'ecc:row_remap_pending')]
    # The XID is still counted.
    assert _xid_63_count() == xids + 1
    now = datetime.datetime(2025, 1, 1)
    settings = health_machine.Settings()
    record = health_machine.step(health_machine.Record(), found, now,
                                 settings)
    assert (record.health, record.faults) == (states.SUSPECT, 1)
    # One more transient fault soon after leaves it suspect.
    nvml.update_gpu(WHOLE, clock_events=['hw_thermal_slowdown'])
    slowdown = [r for r in driver.check_health(devices)
                if r.code == 'clocks:hw_thermal_slowdown']
    assert len(slowdown) == 1
    record = health_machine.step(
        record, slowdown, now + datetime.timedelta(seconds=10), settings)
    assert (record.health, record.faults) == (states.SUSPECT, 2)
    # Another remap while one is pending: the condition still holds.
    nvml.update_gpu(WHOLE, clock_events=[])
    nvml.add_xid(WHOLE, 63)
    assert _check(driver, devices) == [
        (states.TRANSIENT, 'ecc:row_remap_pending', '')]
    assert _xid_63_count() == xids + 2
    # The same for a page retirement (GPUs before Ampere).
    nvml.update_gpu(WHOLE, remapped_rows={}, retired_pages_pending=True)
    nvml.add_xid(WHOLE, 63)
    assert _check(driver, devices) == [
        (states.TRANSIENT, 'ecc:retired_pages_pending', '')]


def test_a_burst_of_pcie_replays_is_transient(conf, scenario, tmp_path):
    """PCIe replays count as correctable AER errors do: above
    [agent]aer_correctable_burst between two checks the link is faulty."""
    conf.set_override('aer_correctable_burst', 10, group='agent')
    driver, nvml, devices = _setup(conf, scenario, tmp_path, gpus={
        WHOLE: _gpu('GPU-1', pcie_replays=500)})
    [r] = driver.check_health(devices)[:1]
    # What a GPU has replayed since it was reset is a baseline.
    assert (r.severity, r.counters['pcie_replays']) == (states.OK, 500)
    nvml.update_gpu(WHOLE, pcie_replays=510)       # the odd replay
    assert _check(driver, devices) == [(states.OK, '', '')]
    nvml.update_gpu(WHOLE, pcie_replays=521)
    [r] = [r for r in driver.check_health(devices)
           if r.device == 'PCI:' + WHOLE]
    assert (r.severity, r.code, r.counters['pcie_replays']) == (
        states.TRANSIENT, 'pcie:replays', 521)
    assert r.reason.startswith('11 PCIe replays since the last check')
    # The link quietens: well again at the next check.
    assert _check(driver, devices) == [(states.OK, '', '')]


def test_a_hardware_slowdown_is_transient(conf, scenario, tmp_path):
    """The GPU cutting its clocks for heat or a power brake is a
    transient fault at each check that sees it; the software limits of a
    busy GPU are not."""
    driver, nvml, devices = _setup(conf, scenario, tmp_path, gpus={
        WHOLE: _gpu('GPU-1', clock_events=['sw_power_cap'])})
    assert _check(driver, devices) == [(states.OK, '', '')]
    nvml.update_gpu(WHOLE, clock_events=['sw_thermal_slowdown',
                                         'sw_power_cap'])
    assert _check(driver, devices) == [(states.OK, '', '')]
    nvml.update_gpu(WHOLE, clock_events=['hw_slowdown',
                                         'hw_thermal_slowdown'])
    [r] = [r for r in driver.check_health(devices)
           if r.device == 'PCI:' + WHOLE]
    assert (r.severity, r.code, r.deployable) == (
        states.TRANSIENT, 'clocks:hw_thermal_slowdown', None)
    assert r.reason.startswith('Hardware slowdown (hw_thermal_slowdown)')
    nvml.update_gpu(WHOLE, clock_events=['hw_slowdown',
                                         'hw_power_brake_slowdown'])
    assert _check(driver, devices) == [
        (states.TRANSIENT, 'clocks:hw_power_brake_slowdown', '')]
    nvml.update_gpu(WHOLE, clock_events=['gpu_idle'])
    assert _check(driver, devices) == [(states.OK, '', '')]


def test_the_generic_hardware_slowdown_counts_when_it_lasts(
        conf, scenario, tmp_path):
    """NVML may show hw_slowdown alone for a moment while the GPU
    changes performance state: a fault only when two checks in a row see
    it."""
    driver, nvml, devices = _setup(conf, scenario, tmp_path, gpus={
        WHOLE: _gpu('GPU-1', clock_events=['hw_slowdown'])})
    assert _check(driver, devices) == [(states.OK, '', '')]
    nvml.update_gpu(WHOLE, clock_events=[])
    assert _check(driver, devices) == [(states.OK, '', '')]
    nvml.update_gpu(WHOLE, clock_events=['hw_slowdown'])
    assert _check(driver, devices) == [(states.OK, '', '')]
    for _ in range(2):
        assert _check(driver, devices) == [
            (states.TRANSIENT, 'clocks:hw_slowdown', '')]


def test_not_supported_sources_are_skipped(conf, scenario, tmp_path):
    bare = {'name': 'Tesla T4', 'uuid': 'GPU-3', 'serial': '3',
            'memory_mb': 15360, 'events': False}
    driver, nvml, devices = _setup(conf, scenario, tmp_path,
                                   gpus={WHOLE: bare})
    assert _check(driver, devices) == [(states.OK, '', '')]
    nvml.add_xid(WHOLE, 79)
    assert _check(driver, devices) == [(states.OK, '', '')]
    assert driver.usage(devices) == {}


def test_a_failed_event_registration_is_tried_again(
        conf, scenario, tmp_path, monkeypatch):
    """An NVML error registering a GPU's events (other than "not
    supported") is retried at a later check: the GPU's XIDs are watched
    from then on, not lost until the agent restarts."""
    monkeypatch.setattr(nvml_health, 'EVENTS_RETRY', 0)
    driver, nvml, devices = _setup(conf, scenario, tmp_path, gpus={
        WHOLE: _gpu('GPU-1', events_error='UNKNOWN')})
    assert _check(driver, devices) == [(states.OK, '', '')]
    nvml.update_gpu(WHOLE, events_error=None)
    assert _check(driver, devices) == [(states.OK, '', '')]   # registers
    nvml.add_xid(WHOLE, 79)
    assert _check(driver, devices) == [(states.FATAL, 'xid:79', '')]


def test_event_registration_retries_back_off(
        conf, scenario, tmp_path, monkeypatch, caplog):
    """A registration that keeps failing is not tried (and logged) at
    every check; the GPU's other sources are read meanwhile."""
    caplog.set_level('WARNING', logger='cyborg.drivers.nvml_health')
    monkeypatch.setattr(nvml_health, 'EVENTS_RETRY', 3600)
    driver, nvml, devices = _setup(conf, scenario, tmp_path, gpus={
        WHOLE: _gpu('GPU-1', events_error='UNKNOWN')})
    for _ in range(3):
        assert _check(driver, devices) == [(states.OK, '', '')]
    assert len([r for r in caplog.records
                if 'cannot register the events' in r.getMessage()]) == 1
    nvml.update_gpu(WHOLE, ecc_uncorrected=1)
    assert _check(driver, devices) == [(states.FATAL, 'ecc:uncorrected', '')]


def test_lost_gpu_is_fatal_and_found_again(conf, scenario, tmp_path):
    driver, nvml, devices = _setup(conf, scenario, tmp_path)
    _check(driver, devices)
    nvml.update_gpu(WHOLE, lost=True)
    [r] = [r for r in driver.check_health(devices)
           if r.device == 'PCI:' + WHOLE]
    assert (r.severity, r.code, r.reason) == (
        states.FATAL, 'nvml:gpu_lost', 'GPU has fallen off the bus')
    nvml.update_gpu(WHOLE, lost=False)
    assert _check(driver, devices) == [(states.OK, '', '')]
    # The GPU's new event set sees new XIDs.
    nvml.add_xid(WHOLE, 13)
    assert _check(driver, devices) == [(states.APPLICATION, 'xid:13', '')]


def test_session_is_kept_and_reopened_after_a_driver_reload(
        conf, scenario, tmp_path):
    driver, nvml, devices = _setup(conf, scenario, tmp_path)
    for _ in range(3):
        _check(driver, devices)
    assert nvml.initialised == 1          # one session, not one per check
    nvml.nvmlShutdown()                   # the driver went away under us
    assert _check(driver, devices) == [(states.OK, '', '')]
    _check(driver, devices)
    assert nvml.initialised == 1
    nvml.add_xid(WHOLE, 79)
    assert _check(driver, devices) == [(states.FATAL, 'xid:79', '')]


def test_no_nvml_means_pci_health_only(conf, scenario, tmp_path):
    scenario('nvidia_sriov')
    nvml = fake_nvml.create(tmp_path / 'nvml.json', {}, driver_loaded=False)
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    devices = driver.discover()
    readings = driver.check_health(devices)
    assert {r.severity for r in readings} == {states.OK}
    assert len(readings) == len(devices)


def test_usage(conf, scenario, tmp_path):
    driver, nvml, devices = _setup(conf, scenario, tmp_path)
    nvml.update_gpu(VGPU, utilization=35, memory_used_mb=1024)
    usage = driver.usage(devices)
    # Temperature, power and clock events are left out where NVML does
    # not answer them...
    assert usage['PCI:' + VGPU] == {'utilization': 0.35,
                                    'memory_used_bytes': 1024 ** 3}
    # ...and added where it does (power in watts, the reasons by name).
    nvml.update_gpu(VGPU, temperature=61, power_mw=690150,
                    clock_events=['sw_power_cap'])
    assert driver.usage(devices)['PCI:' + VGPU] == {
        'utilization': 0.35, 'memory_used_bytes': 1024 ** 3,
        'temperature_celsius': 61, 'power_watts': 690.15,
        'clock_events': ['sw_power_cap']}
    # A GPU NVML does not know (not in the fake) is left out.
    assert 'PCI:0000:86:00.0' not in usage


def test_nvml_module_comes_from_the_option(conf, tmp_path, monkeypatch):
    conf.set_override('state_path', str(tmp_path / 'state'))
    path = tmp_path / 'nvml.json'
    fake_nvml.create(path, {WHOLE: _gpu('GPU-1')})
    monkeypatch.setenv(fake_nvml.ENV, str(path))
    monkeypatch.setattr(fake_nvml, '_DEFAULT', None)
    conf.set_override('nvml_module', 'tests.fixtures.fake_nvml', 'agent')
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    tree.add_pci(WHOLE, *fake_sysfs.A100, driver='nvidia')
    conf.set_override('sysfs_root', str(tmp_path / 'sys'), 'agent')
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h')
    [device] = driver.discover()
    assert device.deployables[0].attributes['gpu_uuid'] == 'GPU-1'
    driver.check_health([device])
    fake_nvml.FakeNVML(path).add_xid(WHOLE, 95)
    [r] = driver.check_health([device])
    assert (r.severity, r.code) == (states.FATAL, 'xid:95')


class _Counting:
    """The fake NVML, counting the NVML functions called through it."""

    def __init__(self, nvml):
        self._nvml = nvml
        self.calls = collections.Counter()

    def __getattr__(self, name):
        value = getattr(self._nvml, name)
        if not callable(value) or not name.startswith('nvml'):
            return value            # constants and error classes

        def call(*args, **kwargs):
            self.calls[name] += 1
            return value(*args, **kwargs)
        return call


def _counting_opens():
    """A counter of the files this process opens while ``counting`` is
    set (an audit hook: it stays for the process, counting nothing
    after)."""
    opened = collections.Counter()
    state = {'counting': False}

    def hook(event, args):
        if state['counting'] and event == 'open':
            opened[str(args[0])] += 1
    sys.addaudithook(hook)
    return opened, state


def test_checking_8_gpus_is_cheap(conf, tmp_path):
    """What a check costs per GPU, counted rather than timed (a timed
    bound failed on loaded machines; tools/bench measures time): a few
    NVML calls on handles taken once, the AER counters read, nothing
    discovered again."""
    conf.set_override('state_path', str(tmp_path / 'state'))
    tree = fake_sysfs.FakeSysfs(tmp_path / 'sys')
    gpus = {}
    for index in range(8):
        address = f'0000:{0x18 + index:02x}:00.0'
        tree.add_pci(address, *fake_sysfs.A100, driver='nvidia')
        tree.set_aer(address, fatal={}, nonfatal={}, correctable={})
        gpus[address] = _gpu(f'GPU-{index}')
    conf.set_override('sysfs_root', str(tmp_path / 'sys'), 'agent')
    nvml = _Counting(fake_nvml.create(tmp_path / 'nvml.json', gpus))
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    devices = driver.discover()
    assert len(devices) == 8
    driver.check_health(devices)
    opened, state = _counting_opens()
    nvml.calls.clear()
    state['counting'] = True
    checks = 10
    for _ in range(checks):
        readings = driver.check_health(devices)
    state['counting'] = False
    assert {r.severity for r in readings} == {states.OK}
    # Handles are taken once and NVML initialised once, not per check.
    assert not {'nvmlInit', 'nvmlDeviceGetHandleByPciBusId',
                'nvmlDeviceGetCount'} & set(nvml.calls), nvml.calls
    per_gpu = sum(nvml.calls.values()) / (checks * 8)
    assert per_gpu <= 6, nvml.calls
    # The AER counters (fatal, non-fatal, correctable) and nothing else.
    assert {os.path.basename(path) for path in opened} <= {
        'aer_dev_fatal', 'aer_dev_nonfatal', 'aer_dev_correctable'}, opened
    assert sum(opened.values()) <= checks * 8 * 3, opened


def test_fake_nvml_works_in_another_process(tmp_path):
    import subprocess
    import sys
    path = tmp_path / 'nvml.json'
    fake = fake_nvml.create(path, {WHOLE: _gpu('GPU-1')})
    script = (
        'import sys\n'
        'from tests.fixtures import fake_nvml as n\n'
        'n.nvmlInit()\n'
        f'h = n.nvmlDeviceGetHandleByPciBusId("{WHOLE}")\n'
        's = n.nvmlEventSetCreate()\n'
        'n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, s)\n'
        'print("ready", flush=True)\n'
        'sys.stdin.readline()\n'
        'print(n.nvmlEventSetWait(s, 0).eventData, n.nvmlDeviceGetUUID(h))\n')
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    child = subprocess.Popen(
        [sys.executable, '-c', script], cwd=root, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={**os.environ, fake_nvml.ENV: str(path)})
    assert child.stdout.readline().strip() == 'ready'
    fake.add_xid(WHOLE, 79)
    out, _ = child.communicate('\n', timeout=30)
    assert out.split() == ['79', 'GPU-1']
