"""What a host's first report costs in Placement: at most 2 calls per
device plus a constant.  Counted as the requests the real (embedded)
Placement served, and checked against what Placement then holds."""

import pytest
import requests

from cyborg.conductor import inventory_apply
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from cyborg.placement import embedded
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

# The compute node's lookup by name, the reshape that sets every new
# provider's inventory and the listing that reads their generations back.
CONSTANT = 3


class CountingPlacement(embedded.EmbeddedPlacement):
    """The real Placement, recording each request it serves."""

    def __init__(self):
        super().__init__('sqlite://')
        self.requests = []

    def _serve(self, app):
        def counting(environ, start_response):
            self.requests.append((environ['REQUEST_METHOD'],
                                  environ['PATH_INFO']))
            return app(environ, start_response)
        super()._serve(counting)


@pytest.fixture
def counted(conf):
    server = CountingPlacement()
    server.start()
    pf.placement_conf(conf, server.url)
    yield server
    server.stop()


def _host(server, name, count):
    """A compute node provider and ``count`` devices reported for it."""
    resp = requests.post(server.url + '/resource_providers',
                         json={'name': name}, headers=pf.HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    devices = [cf.device(name, f'0000:{0x10 + i:02x}:00.0',
                         traits=['CUSTOM_COUNTED'], num=1 + i % 3)
               for i in range(count)]
    return resp.json()['uuid'], devices


def _first_report(conf, context, server, name, count):
    """The requests a first report of ``count`` devices made; asserts
    that Placement then holds exactly the providers the devices need."""
    cn, devices = _host(server, name, count)
    before = len(server.requests)
    reply = inventory_apply.handle_report(conf, context, name,
                                          cf.report(devices))
    made = server.requests[before:]
    assert reply == {'digest': cf.report(devices)['digest'],
                     'need_full': False}
    assert _tree(server, cn) == {
        d.deployables[0].name: (
            {'PGPU': (d.deployables[0].num_accelerators, 0)},
            {'CUSTOM_COUNTED', 'OWNER_CYBORG'})
        for d in devices}
    return made, devices


def _tree(server, cn):
    """{name: ({rc: (total, reserved)}, traits)} under the compute node."""
    found = {}
    for rp in _get(server, f'/resource_providers?in_tree={cn}')[
            'resource_providers']:
        if rp['uuid'] == cn:
            continue
        assert rp['uuid'] == inventory.provider_uuid(rp['name'])
        invs = _get(server, f"/resource_providers/{rp['uuid']}/inventories")
        traits = _get(server, f"/resource_providers/{rp['uuid']}/traits")
        found[rp['name']] = (
            {rc: (v['total'], v['reserved'])
             for rc, v in invs['inventories'].items()},
            set(traits['traits']))
    return found


def _get(server, path):
    resp = requests.get(server.url + path, headers=pf.HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_first_report_costs_at_most_two_calls_per_device(
        conf, db, admin_context, counted):
    # The first host also creates the custom trait, once per process.
    _first_report(conf, admin_context, counted, 'warm', 1)
    for count in (1, 8, 32):
        name = f'host-{count}'
        made, devices = _first_report(conf, admin_context, counted, name,
                                      count)
        assert len(made) <= 2 * count + CONSTANT, made
        # And an unchanged report afterwards costs none.
        before = len(counted.requests)
        inventory_apply.handle_report(conf, admin_context, name,
                                      cf.unchanged(devices))
        assert counted.requests[before:] == []


def test_without_the_reshaper_inventories_are_set_one_by_one(
        conf, db, admin_context, counted, monkeypatch):
    # Calling as an admin that is not a service, Placement's own policy
    # refuses the reshaper: the client says so once and sets each new
    # provider's inventory with its own PUT.
    monkeypatch.setattr(placement_client, 'NOAUTH_ROLES', 'admin')
    _first_report(conf, admin_context, counted, 'warm', 1)
    made, _devices = _first_report(conf, admin_context, counted, 'host-8', 8)
    assert ('POST', '/reshaper') not in made
    assert len(made) <= 3 * 8 + 1, made
    assert len([r for r in made if r[1].endswith('/inventories')]) == 8
