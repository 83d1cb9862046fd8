"""What a health check that cannot read everything says: an NVML error of
one source (a GPU that needs a reset answers NVML_ERROR_RESET_REQUIRED to
every query) and a check that raises for one device.  Never "all well":
that would clear the device's fault and start its re-admission."""

import pynvml

from cyborg.common import states
from cyborg.drivers import base, nvidia_gpu
from tests.fixtures import fake_nvml

WHOLE = '0000:3b:00.0'
VGPU = '0000:5e:00.0'
KEY = 'PCI:' + WHOLE


class FailingNVML(fake_nvml.FakeNVML):
    """The fake NVML whose calls named in ``failing`` raise that
    ``NVML_ERROR_*`` code, or that exception when it is one (the GPU's
    hardware and driver are what is faked: the watcher is real)."""

    def __init__(self, path):
        super().__init__(path)
        self.failing = {}

    def __getattribute__(self, name):
        failing = object.__getattribute__(self, '__dict__').get('failing')
        if failing and name in failing:
            error = failing[name]

            def fail(*args, **kwargs):
                if isinstance(error, Exception):
                    raise error
                raise pynvml.NVMLError(error)
            return fail
        return super().__getattribute__(name)


def _gpu(uuid, **more):
    gpu = {'name': 'NVIDIA A100-PCIE-40GB', 'uuid': uuid, 'serial': '1',
           'memory_mb': 40960, 'memory_used_mb': 0, 'utilization': 0,
           'ecc_uncorrected': 0, 'mig': False, 'pcie_replays': 0,
           'remapped_rows': {'correctable': 0, 'uncorrectable': 0,
                             'pending': False, 'failure': False}}
    gpu.update(more)
    return gpu


def _setup(conf, scenario, tmp_path, prepare=None):
    tree = scenario('nvidia_sriov')
    if prepare is not None:
        prepare(tree)
    nvml = FailingNVML(tmp_path / 'nvml.json')
    nvml.write({'driver_loaded': True, 'xids': [],
                'gpus': {WHOLE: _gpu('GPU-1'), VGPU: _gpu('GPU-2')}})
    driver = nvidia_gpu.NvidiaGPUDriver(conf, 'h', nvml=nvml)
    driver.name = 'nvidia_gpu_driver'
    devices = driver.discover()
    assert _check(driver, devices) == [(states.OK, '', False)]
    return driver, nvml, devices, tree


def _check(driver, devices):
    """[(severity, code, event)] of one check of the whole GPU."""
    return sorted((r.severity, r.code or '', r.event)
                  for r in driver.check_health(devices) if r.device == KEY)


def test_a_gpu_that_needs_a_reset_reads_fatal_with_its_xid(conf, scenario,
                                                          tmp_path):
    """XID 95 (uncontained ECC error), then NVML answers RESET_REQUIRED:
    the XID drained in that check was thrown away with the whole GPU's
    readings, the PCI path said "ok", and so did every check after it and
    the re-probe, which re-admitted the GPU."""
    driver, nvml, devices, _tree = _setup(conf, scenario, tmp_path)
    nvml.add_xid(WHOLE, 95)
    nvml.failing['nvmlDeviceGetTotalEccErrors'] = \
        pynvml.NVML_ERROR_RESET_REQUIRED
    nvml.failing['nvmlDeviceGetRemappedRows'] = \
        pynvml.NVML_ERROR_RESET_REQUIRED
    assert _check(driver, devices) == [
        (states.FATAL, 'nvml:reset_required', False),
        (states.FATAL, 'xid:95', True)]
    # A condition while NVML says so; one reading for both sources.
    found = [r for r in driver.check_health(devices) if r.device == KEY]
    assert [(r.severity, r.code) for r in found] == [
        (states.FATAL, 'nvml:reset_required')]
    assert 'needs a reset' in found[0].reason
    assert 'uncorrected ECC count, remapped rows' in found[0].reason
    # The re-probe does not re-admit it.
    [device] = [d for d in devices if d.key() == KEY]
    verdict = driver.probe(device)[0]
    assert (verdict.severity, verdict.code, verdict.source) == (
        states.FATAL, 'nvml:reset_required', 'probe')
    # Reset: it reads well again.
    nvml.failing.clear()
    assert _check(driver, devices) == [(states.OK, '', False)]


def test_an_error_of_one_source_is_transient_the_others_are_read(
        conf, scenario, tmp_path):
    driver, nvml, devices, _tree = _setup(conf, scenario, tmp_path)
    nvml.failing['nvmlDeviceGetPcieReplayCounter'] = \
        pynvml.NVML_ERROR_UNKNOWN
    nvml.update_gpu(WHOLE, remapped_rows={'pending': True})
    nvml.add_xid(WHOLE, 79)
    found = [r for r in driver.check_health(devices) if r.device == KEY]
    assert sorted((r.severity, r.code) for r in found) == [
        (states.FATAL, 'xid:79'),
        (states.TRANSIENT, 'ecc:row_remap_pending'),
        (states.TRANSIENT, 'nvml:error')]
    [error] = [r for r in found if r.code == 'nvml:error']
    assert error.reason == ('NVML cannot read PCIe replay counter: '
                            'Unknown Error')
    assert error.event is False
    # The other GPU (NVML fails the same query of every GPU here) has
    # nothing else to say.
    assert [(r.severity, r.code) for r in driver.check_health(devices)
            if r.device == 'PCI:' + VGPU] == [(states.TRANSIENT,
                                               'nvml:error')]


def test_xids_drained_before_an_event_error_are_kept(conf, scenario,
                                                    tmp_path):
    driver, nvml, devices, _tree = _setup(conf, scenario, tmp_path)
    nvml.add_xid(WHOLE, 48)
    wait = nvml.nvmlEventSetWait
    calls = []

    def once_then_fail(event_set, timeout_ms):
        calls.append(1)
        if len(calls) > 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return wait(event_set, timeout_ms)
    nvml.nvmlEventSetWait = once_then_fail
    assert _check(driver, devices) == [
        (states.FATAL, 'xid:48', True),
        (states.TRANSIENT, 'nvml:error', False)]


def test_an_error_finding_the_gpu_is_no_ok(conf, scenario, tmp_path):
    driver, nvml, devices, _tree = _setup(conf, scenario, tmp_path)
    driver._watcher.close()         # the handle is looked up again
    nvml.failing['nvmlDeviceGetHandleByPciBusId'] = \
        pynvml.NVML_ERROR_RESET_REQUIRED
    assert _check(driver, devices) == [
        (states.FATAL, 'nvml:reset_required', False)]


def test_a_check_that_raises_is_no_clearing(conf, scenario, tmp_path):
    """A check that raised for a device made an ok reading ("health check
    failed"), sent as a change: a device out for a fault started its
    re-admission, and an AER event read before the failure was lost."""
    driver, nvml, devices, tree = _setup(
        conf, scenario, tmp_path, prepare=lambda tree: tree.set_aer(
            WHOLE, fatal={'Surprise Down Error': 0}))
    tree.set_aer(WHOLE, fatal={'Surprise Down Error': 1})
    nvml.failing['nvmlDeviceGetHandleByPciBusId'] = ValueError('bad answer')
    driver._watcher.close()         # the handle is looked up again
    found = [r for r in driver.check_health(devices) if r.device == KEY]
    assert sorted((r.severity, r.code) for r in found) == [
        (states.FATAL, 'aer:fatal'), (states.TRANSIENT, base.CHECK_FAILED)]
    [failed] = [r for r in found if r.code == base.CHECK_FAILED]
    assert failed.reason.startswith('health check failed (ValueError')
    assert _check(driver, devices) == [
        (states.TRANSIENT, base.CHECK_FAILED, False)]


def _logged(caplog):
    """``[(level name, message, with a traceback)]`` logged by the PCI
    health code, the list emptied."""
    found = [(r.levelname, r.getMessage(), r.exc_info is not None)
             for r in caplog.records
             if r.name == 'cyborg.drivers.pci_health']
    caplog.clear()
    return found


def test_a_check_that_keeps_failing_logs_its_traceback_once(
        conf, scenario, tmp_path, caplog, monkeypatch):
    """Every check (every second) of a device whose check raised logged a
    full traceback, for as long as it kept failing: the agent's log
    filled with the same error.  The traceback comes once, then a
    reminder line now and then, and a line when it works again."""
    from cyborg.drivers import pci_health

    caplog.set_level('DEBUG', logger='cyborg.drivers.pci_health')
    driver, nvml, devices, _tree = _setup(conf, scenario, tmp_path)
    nvml.failing['nvmlDeviceGetHandleByPciBusId'] = ValueError('bad answer')
    driver._watcher.close()         # the handle is looked up again
    caplog.clear()
    for _ in range(5):
        assert _check(driver, devices) == [
            (states.TRANSIENT, base.CHECK_FAILED, False)]
    logged = _logged(caplog)
    # The first failure of each GPU (NVML fails them all here) with its
    # traceback; later ones at DEBUG, one line each.
    gpus = len(devices)
    assert sorted((level, tb) for level, _, tb in logged
                  if level != 'DEBUG') == [('ERROR', True)] * gpus
    assert [m for level, m, _ in logged if level == 'ERROR'][0] \
        .startswith('Health check of PCI:')
    assert all(not tb for level, _, tb in logged if level == 'DEBUG')
    # Past the reminder interval: one WARNING line per device, no
    # traceback.
    monkeypatch.setattr(pci_health, 'FAILING_REMINDER', 0)
    _check(driver, devices)
    assert sorted((level, tb) for level, _, tb in _logged(caplog)) == [
        ('WARNING', False)] * gpus
    # It works again: one INFO line per device.
    nvml.failing.clear()
    assert _check(driver, devices) == [(states.OK, '', False)]
    recovered = _logged(caplog)
    assert [level for level, _, _ in recovered] == ['INFO'] * gpus
    assert 'works again (after 6 failed checks' in recovered[0][1]
    _check(driver, devices)
    assert _logged(caplog) == []
