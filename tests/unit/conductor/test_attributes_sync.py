"""An administrator's attribute writes (POST/DELETE /attributes) reach
Placement: a deployable's ``rc`` and ``trait*`` attributes make its
provider, and a write that only changed the row left the provider as it
was for as long as the conductor ran (the reconcile trusted the host's
synced mark and the provider's remembered generation)."""

import requests

from cyborg.conductor import attributes
from cyborg.conductor import inventory_apply, placement_sync
from cyborg.db.api import attributes as attribute_db
from cyborg.db.api import inventory as inventory_db
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

placement = pf.placement

HOST = 'host1'
TRAIT = 'CUSTOM_ADDED_BY_ADMIN'


def _traits(service, rp_uuid):
    response = requests.get(
        f'{service.url}/resource_providers/{rp_uuid}/traits',
        headers=pf.HEADERS, timeout=10)
    assert response.status_code == 200, response.text
    return set(response.json()['traits'])


def test_a_trait_an_admin_adds_or_removes_reaches_placement(
        conf, db, admin_context, placement):
    pf.compute_node(conf, placement, HOST)
    devices = [cf.device(HOST, '0000:81:00.0', traits=['CUSTOM_GPU_A100'])]
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(devices))
    deployable, = inventory_db.host_providers(admin_context, HOST)
    rp_uuid = deployable['rp_uuid']
    assert TRAIT not in _traits(placement, rp_uuid)

    added = attributes.create(conf, admin_context, deployable['uuid'],
                              'trait9', TRAIT)
    assert added['value'] == TRAIT
    assert TRAIT in _traits(placement, rp_uuid)
    # The reconcile and the agent's next report keep it.
    placement_sync.reconcile_all(conf, admin_context)
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.unchanged(devices))
    assert TRAIT in _traits(placement, rp_uuid)

    attributes.delete(conf, admin_context, added['uuid'])
    assert attribute_db.get(admin_context, added['uuid']) is None
    assert TRAIT not in _traits(placement, rp_uuid)
    assert 'CUSTOM_GPU_A100' in _traits(placement, rp_uuid)
