"""QAT endpoint health: the PF's error counters and state, as the in-tree
driver (``qat_ras/errors_*``, ``qat/state``) and Intel's out-of-tree
driver (``ras_*``) show them, in a fake sysfs tree."""

import pytest

from cyborg.common import states
from cyborg.drivers import intel_qat
from cyborg.drivers import sysfs
from tests.unit.drivers import conftest

PF = '0000:3d:00.0'
KEY = 'PCI:' + PF


def _setup(discovered, **qat):
    return discovered('qat', 'intel_qat_driver',
                      lambda tree: tree.set_qat(PF, **qat))


def _check(driver, devices):
    return conftest.one_check(driver, devices, KEY)


@pytest.mark.parametrize('out_of_tree', [False, True])
def test_new_errors_by_kind(conf, discovered, out_of_tree):
    conf.set_override('aer_correctable_burst', 10, 'agent')
    tree, driver, devices = _setup(discovered, fatal=1, nonfatal=2,
                                   correctable=30, state='up',
                                   out_of_tree=out_of_tree)
    readings, counters = _check(driver, devices)
    # What the endpoint counted before the agent started is a baseline.
    assert readings == [(states.OK, '')]
    assert counters == {'qat_errors_fatal': 1, 'qat_errors_nonfatal': 2,
                        'qat_errors_correctable': 30}
    # The odd corrected error is only counted; a non-fatal one is the
    # requests' in flight: transient.
    tree.set_qat(PF, nonfatal=3, correctable=35, out_of_tree=out_of_tree)
    assert _check(driver, devices)[0] == [
        (states.TRANSIENT, 'qat:errors_nonfatal')]
    tree.set_qat(PF, correctable=46, out_of_tree=out_of_tree)
    assert _check(driver, devices)[0] == [
        (states.TRANSIENT, 'qat:errors_correctable')]
    tree.set_qat(PF, fatal=2, out_of_tree=out_of_tree)
    readings, counters = _check(driver, devices)
    assert readings == [(states.FATAL, 'qat:errors_fatal')]
    assert counters['qat_errors_fatal'] == 2
    assert _check(driver, devices)[0] == [(states.OK, '')]


def test_an_endpoint_that_is_down_is_out_while_it_is(conf, discovered):
    tree, driver, devices = _setup(discovered, state='down')
    assert _check(driver, devices)[0] == [(states.FATAL, 'qat:down')]
    assert _check(driver, devices)[0] == [(states.FATAL, 'qat:down')]
    tree.set_qat(PF, state='up')
    assert _check(driver, devices)[0] == [(states.OK, '')]


def test_an_endpoint_without_counters_has_pci_health_only(discovered):
    _tree, driver, devices = discovered('qat', 'intel_qat_driver')
    assert _check(driver, devices) == ([(states.OK, '')], {})


def test_a_firmware_that_stops_answering_its_heartbeat_is_fatal(
        monkeypatch, discovered):
    tree, driver, devices = _setup(discovered, state='up')
    tree.set_qat_heartbeat(PF, failed=2)
    # Failures before the agent started are a baseline.
    readings, counters = _check(driver, devices)
    assert readings == [(states.OK, '')]
    assert counters['qat_heartbeat_failed'] == 2
    # The kernel's next check finds the firmware silent.
    tree.set_qat_heartbeat(PF, failed=3, alive=False)
    monkeypatch.setattr(intel_qat, 'HEARTBEAT_INTERVAL', 0)
    assert _check(driver, devices)[0] == [(states.FATAL, 'qat:heartbeat')]
    # A -1 the kernel did not count (a read sooner than its heartbeat
    # timer after another one, a device restarting) is no fault.
    assert _check(driver, devices)[0] == [(states.OK, '')]
    tree.set_qat_heartbeat(PF, failed=3, alive=True)
    assert _check(driver, devices)[0] == [(states.OK, '')]


def test_the_heartbeat_is_checked_once_per_interval(monkeypatch, discovered):
    """Each read of ``status`` has the kernel check the firmware."""
    tree, driver, devices = _setup(discovered, state='up')
    tree.set_qat_heartbeat(PF, failed=0)
    monkeypatch.setattr(intel_qat, 'HEARTBEAT_INTERVAL', 3600)
    _check(driver, devices)
    reads = []      # the heartbeat files read
    real = sysfs.read_int

    def read_int(path, *args):
        if '/heartbeat/' in path:
            reads.append(path)
        return real(path, *args)
    monkeypatch.setattr(sysfs, 'read_int', read_int)
    tree.set_qat_heartbeat(PF, failed=1, alive=False)
    assert _check(driver, devices)[0] == [(states.OK, '')]
    assert reads == []
    monkeypatch.setattr(intel_qat, 'HEARTBEAT_INTERVAL', 0)
    assert _check(driver, devices)[0] == [(states.FATAL, 'qat:heartbeat')]
    assert [p.rsplit('/', 1)[1] for p in reads] == ['status',
                                                    'queries_failed']


def test_no_heartbeat_where_debugfs_shows_none(discovered):
    tree, driver, devices = _setup(discovered, state='up')
    # Another endpoint's heartbeat only.
    tree.set_qat_heartbeat('0000:3f:00.0', failed=5, alive=False)
    readings, counters = _check(driver, devices)
    assert readings == [(states.OK, '')]
    assert 'qat_heartbeat_failed' not in counters
