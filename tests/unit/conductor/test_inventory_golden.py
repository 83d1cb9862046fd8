"""Every golden host inventory of the drivers (tests/unit/drivers/golden)
lands in the real Placement as doc/source/contract.rst ("Placement")
says."""

import pytest
import requests

from cyborg.conductor import inventory_apply
from cyborg.objects import inventory
from tests.fixtures import placement as pf
from tests.fixtures import sysfs as fake_sysfs
from tests.fixtures.placement import placement  # noqa: F401
from tests.unit.drivers import golden_reports

HOST = fake_sysfs.HOST


def _get(url, path):
    resp = requests.get(url + path, headers=pf.HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.parametrize('scenario', sorted(fake_sysfs.SCENARIOS))
def test_golden_inventory_becomes_the_provider_tree(
        scenario, conf, db, admin_context, placement):  # noqa: F811
    pf.placement_conf(conf, placement.url)
    cn = requests.post(placement.url + '/resource_providers',
                       json={'name': HOST}, headers=pf.HEADERS,
                       timeout=10).json()['uuid']
    devices = [inventory.DriverDevice.from_dict(d)
               for d in golden_reports.load_golden(scenario)]
    report = {'digest': inventory.inventory_digest(devices),
              'base_digest': None, 'full': True,
              'devices': [d.to_dict() for d in devices], 'removed': []}
    reply = inventory_apply.handle_report(conf, admin_context, HOST, report)
    assert reply['need_full'] is False
    want = {}
    for device in devices:
        for dep in device.deployables:
            want[dep.name] = (
                {dep.resource_class: dep.num_accelerators}
                if dep.resource_class and dep.num_accelerators else {},
                set(dep.traits) | {'OWNER_CYBORG'})
    got = {}
    for rp in _get(placement.url, f'/resource_providers?in_tree={cn}')[
            'resource_providers']:
        if rp['uuid'] == cn:
            continue
        assert rp['uuid'] == inventory.provider_uuid(rp['name'])
        invs = _get(placement.url,
                    f"/resource_providers/{rp['uuid']}/inventories")
        traits = _get(placement.url,
                      f"/resource_providers/{rp['uuid']}/traits")
        got[rp['name']] = ({rc: v['total'] for rc, v in
                            invs['inventories'].items()},
                           set(traits['traits']))
    assert got == want
