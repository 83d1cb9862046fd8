"""AMD GPU health and usage from amdgpu's sysfs (RAS error counts, bad
memory pages, utilization, memory, hwmon), in a fake sysfs tree written
as the kernel's ABI documentation describes the files."""

from cyborg.common import states
from cyborg.drivers import amdgpu_health
from tests.unit.drivers import conftest

MI210 = '0000:c3:00.0'          # amdgpu, RAS
RADEON = '0000:23:00.0'         # no RAS directory
KEY = 'PCI:' + MI210
CLEAN = {'umc': {'ue': 0, 'ce': 0, 'de': 0}, 'gfx': {'ue': 0, 'ce': 0},
         'sdma': {'ue': 0, 'ce': 0}}


def _setup(discovered, **amdgpu):
    return discovered('amd_gpu', 'amd_gpu_driver',
                      lambda tree: tree.set_amdgpu(MI210, **amdgpu))


def _check(driver, devices, key=KEY):
    return conftest.one_check(driver, devices, key)


def test_a_clean_gpu_reads_ok_with_its_counts(conf, discovered):
    _tree, driver, devices = _setup(discovered, ras=CLEAN,
                                    bad_pages=('R', 'R'))
    readings, counters = _check(driver, devices)
    assert readings == [(states.OK, '')]
    assert counters == {'ras_uncorrectable': 0, 'ras_correctable': 0,
                        'ras_deferred': 0, 'bad_pages_retired': 2,
                        'bad_pages_pending': 0, 'bad_pages_unretirable': 0}
    # A GPU without RAS (the Radeon) has PCI health only.
    readings, counters = _check(driver, devices, 'PCI:' + RADEON)
    assert (readings, counters) == ([(states.OK, '')], {})


def test_new_uncorrectable_errors_are_fatal(conf, discovered):
    tree, driver, devices = _setup(
        discovered, ras=dict(CLEAN, umc={'ue': 3, 'ce': 0, 'de': 0}))
    # What a GPU counted before the agent started is a baseline.
    assert _check(driver, devices)[0] == [(states.OK, '')]
    tree.set_amdgpu(MI210, ras=dict(CLEAN, umc={'ue': 5, 'ce': 1, 'de': 2},
                                    gfx={'ue': 1, 'ce': 0}))
    readings, counters = _check(driver, devices)
    assert readings == [(states.FATAL, 'ras:gfx_ue'),
                        (states.FATAL, 'ras:umc_ue')]
    assert counters['ras_uncorrectable'] == 6
    assert counters['ras_deferred'] == 2
    [umc] = [r for r in driver.check_health(devices) if r.device == KEY]
    assert umc.severity == states.OK        # counted once


def test_correctable_errors_count_only_in_bursts(conf, discovered):
    conf.set_override('aer_correctable_burst', 10, 'agent')
    tree, driver, devices = _setup(discovered, ras=CLEAN)
    _check(driver, devices)
    tree.set_amdgpu(MI210, ras=dict(CLEAN, umc={'ue': 0, 'ce': 10}))
    assert _check(driver, devices)[0] == [(states.OK, '')]
    tree.set_amdgpu(MI210, ras=dict(CLEAN, umc={'ue': 0, 'ce': 21}))
    readings, counters = _check(driver, devices)
    assert readings == [(states.TRANSIENT, 'ras:umc_ce')]
    assert counters['ras_correctable'] == 21


def test_counts_in_aca_files(conf, discovered):
    """A kernel that reports RAS through the Accelerator Check
    Architecture names the files aca_<block>; an <block>_err_count file,
    where there is one too, is the one read."""
    tree, driver, devices = _setup(discovered, ras=CLEAN, aca=True)
    assert _check(driver, devices)[0] == [(states.OK, '')]
    tree.set_amdgpu(MI210, ras={'umc': {'ue': 1, 'ce': 0}}, aca=True)
    readings, counters = _check(driver, devices)
    assert readings == [(states.FATAL, 'ras:umc_ue')]
    assert counters['ras_uncorrectable'] == 1
    # Both for gfx: the err_count file wins (and counts nothing new).
    tree.set_amdgpu(MI210, ras={'gfx': {'ue': 7, 'ce': 0}}, aca=True)
    tree.set_amdgpu(MI210, ras={'gfx': {'ue': 0, 'ce': 0}})
    assert _check(driver, devices)[0] == [(states.OK, '')]


def test_a_count_the_driver_cannot_give_now_is_skipped(conf, discovered):
    tree, driver, devices = _setup(discovered, ras=CLEAN)
    _check(driver, devices)
    tree.set_amdgpu(MI210, ras=dict(CLEAN,
                                    umc='Query currently inaccessible'))
    readings, counters = _check(driver, devices)
    assert readings == [(states.OK, '')]
    assert counters['ras_uncorrectable'] == 0
    # Back, and higher: the increase is seen.
    tree.set_amdgpu(MI210, ras=dict(CLEAN, umc={'ue': 1, 'ce': 0}))
    assert _check(driver, devices)[0] == [(states.FATAL, 'ras:umc_ue')]


def test_a_bad_page_that_cannot_be_retired_is_fatal(conf, discovered):
    tree, driver, devices = _setup(discovered, ras=CLEAN,
                                   bad_pages=('R', 'P'))
    readings, counters = _check(driver, devices)
    assert readings == [(states.OK, '')]
    assert counters['bad_pages_pending'] == 1
    tree.set_amdgpu(MI210, ras=CLEAN, bad_pages=('R', 'P', 'F'))
    readings, counters = _check(driver, devices)
    assert readings == [(states.FATAL, 'ras:bad_pages_unretirable')]
    assert counters['bad_pages_unretirable'] == 1


def test_usage_from_amdgpu_and_hwmon(conf, discovered):
    _tree, driver, devices = _setup(
        discovered,
        usage={'gpu_busy_percent': 87, 'mem_info_vram_used': 4294967296},
        hwmon={'temp1_label': 'edge', 'temp1_input': 'x',
               'temp2_label': 'junction', 'temp2_input': 71000,
               'power1_average': 289000000})
    usage = driver.usage(devices)
    # The edge sensor does not read: the junction's is taken.
    assert usage == {KEY: {'utilization': 0.87,
                           'memory_used_bytes': 4294967296,
                           'temperature_celsius': 71.0,
                           'power_watts': 289.0}}
    # The Radeon (vfio-pci) tells nothing: left out.
    assert 'PCI:' + RADEON not in usage


def test_power_input_where_there_is_no_average(conf, discovered):
    _tree, driver, devices = _setup(
        discovered, hwmon={'temp1_label': 'edge', 'temp1_input': 45000,
                           'power1_input': 512500000})
    assert driver.usage(devices) == {KEY: {'temperature_celsius': 45.0,
                                           'power_watts': 512.5}}


def test_err_count_text_is_parsed():
    assert amdgpu_health.parse_err_count('ue: 1\nce: 22\nde: 3') == {
        'ue': 1, 'ce': 22, 'de': 3}
    assert amdgpu_health.parse_err_count(
        'Query currently inaccessible') is None
    assert amdgpu_health.parse_err_count('') is None
    assert amdgpu_health.parse_bad_pages(
        '0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : P\n') == {
        'R': 1, 'P': 1, 'F': 0}
