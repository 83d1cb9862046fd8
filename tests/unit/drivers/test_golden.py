"""Each fake host reports exactly its golden inventory (see
golden_reports.py for how the golden files are made and reviewed)."""

import pytest

from tests.fixtures import sysfs as fake_sysfs
from tests.unit.drivers import golden_reports


@pytest.mark.parametrize('name', sorted(fake_sysfs.SCENARIOS))
def test_scenario_matches_golden(name, conf, scenario):
    scenario(name)
    report = golden_reports.inventory_json(golden_reports.discover(conf))
    assert report == golden_reports.load_golden(name)


def _deployables(report):
    return {dep['name']: dep for dev in report for dep in dev['deployables']}


def test_sriov_gpus_are_not_multiplied():
    """Cyborg offered each PF and each VF as a GPU: 4 A100s with 8 VFs
    became 12 providers.  Here: one whole GPU, two vGPU pools, and the
    excluded GPU absent."""
    report = golden_reports.load_golden('nvidia_sriov')
    deps = _deployables(report)
    assert sorted(deps) == [
        'compute-1_0000:3b:00.0',
        'compute-1_0000:5e:00.0_nvidia-471',
        'compute-1_0000:86:00.0_nvidia-471']
    assert deps['compute-1_0000:3b:00.0']['attributes']['rc'] == 'PGPU'
    # 2 VFs hold an mdev, 2 are free: all 4 are capacity of the type.
    in_use = deps['compute-1_0000:5e:00.0_nvidia-471']
    assert in_use['num_accelerators'] == 4
    assert [h['attach_info']['function'] for h in in_use['attach_handles']] \
        == ['4', '5', '6', '7']
    assert {h['attach_type'] for h in in_use['attach_handles']} == {'MDEV'}


def test_vgpu_capacity_counts_existing_mdevs():
    deps = _deployables(golden_reports.load_golden('vgpu'))
    used = deps['compute-1_0000:41:00.0_nvidia-223']
    # 6 available + 2 created = the T4-2B maximum of 8.
    assert used['num_accelerators'] == 8
    marks = [h['attach_info']['vgpu_mark'] for h in used['attach_handles']]
    assert len(set(marks)) == 8
