"""A corrected ``[agent]resource_provider_name``, against the real
(embedded) Placement: the host's first reports named a provider that did
not exist (the conductor fell back to the host name's provider) and the
operator corrected the setting.  Before, the compute node found first
stayed the parent of the host's providers for as long as it existed; a
full report naming another existing provider now moves them under it
(re-parented: an allocation stays with its provider), and records it for
binds.  A name Placement does not know keeps the compute node recorded,
said once; an unchanged report is never compared."""

import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa

from cyborg.conductor import inventory_apply
from cyborg.conductor import placement_sync
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf
from tests.fixtures.placement import placement  # noqa: F401

HOST = 'compute-1'
FQDN = 'compute-1.example.org'
ADDRESSES = ('0000:81:00.0', '0000:82:00.0')
GPU = f'{HOST}_{ADDRESSES[0]}'
CONSUMER = '3c0f1a4e-6d2b-4f7a-9e8c-5b1d2a3c4e51'


def _node(placement, name):  # noqa: F811
    resp = requests.post(placement.url + '/resource_providers',
                         json={'name': name}, headers=pf.HEADERS,
                         timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()['uuid']


@pytest.fixture
def nodes(conf, db, admin_context, placement):  # noqa: F811
    """The host name's provider and the FQDN's (Nova's compute node);
    the host reported with a name Placement does not know, its providers
    under the host name's.  Returns {name: uuid}."""
    pf.placement_conf(conf, placement.url)
    found = {name: _node(placement, name) for name in (HOST, FQDN)}
    _report(conf, admin_context, 'compute-1.wrong.example.org')
    assert host_db.get(admin_context, HOST)['compute_rp_uuid'] == \
        found[HOST]
    return found


def _devices(host=HOST):
    return [cf.device(host, address) for address in ADDRESSES]


def _report(conf, context, name, full=True, host=HOST):
    report = cf.report(_devices(host)) if full else cf.unchanged(
        _devices(host))
    report['resource_provider_name'] = name
    reply = inventory_apply.handle_report(conf, context, host, report)
    assert reply['need_full'] is False
    return reply


def _children(placement, cn):  # noqa: F811
    """{name: reserved PGPU} of the providers under ``cn``."""
    found = {}
    for rp in requests.get(
            f'{placement.url}/resource_providers?in_tree={cn}',
            headers=pf.HEADERS, timeout=10).json()['resource_providers']:
        if rp['uuid'] == cn:
            continue
        inventories = requests.get(
            f"{placement.url}/resource_providers/{rp['uuid']}/inventories",
            headers=pf.HEADERS, timeout=10).json()['inventories']
        found[rp['name']] = inventories['PGPU']['reserved']
    return found


def _recorded(context, host=HOST):
    row = host_db.get(context, host)
    return row['compute_rp_uuid'], row['compute_node_name']


def test_a_corrected_name_moves_the_providers_under_its_provider(
        conf, db, admin_context, placement, nodes, caplog):  # noqa: F811
    caplog.set_level('INFO', logger='cyborg')
    # An instance holds one of the devices meanwhile.
    pf.hold_allocation(placement.url, CONSUMER,
                       {inventory.provider_uuid(GPU): {'PGPU': 1}})

    # The same inventory: nothing but the name changed.
    _report(conf, admin_context, FQDN)

    assert _children(placement, nodes[HOST]) == {}
    assert _children(placement, nodes[FQDN]) == {
        f'{HOST}_{address}': 0 for address in ADDRESSES}
    assert _recorded(admin_context) == (nodes[FQDN], FQDN)
    assert host_db.get(admin_context, HOST)['placement_synced']
    held = requests.get(f'{placement.url}/allocations/{CONSUMER}',
                        headers=pf.HEADERS, timeout=10).json()
    assert held['allocations'][inventory.provider_uuid(GPU)][
        'resources'] == {'PGPU': 1}
    (moved,) = [r.getMessage() for r in caplog.records
                if 'moving its providers' in r.getMessage()]
    assert f'from compute node provider {HOST} ({nodes[HOST]}) to {FQDN}' \
        in moved
    # Where they are now is where the reconcile keeps them.
    placement_sync.reconcile_all(conf, admin_context)
    assert set(_children(placement, nodes[FQDN])) == {
        f'{HOST}_{address}' for address in ADDRESSES}


def test_a_name_placement_does_not_know_keeps_the_compute_node(
        conf, db, admin_context, placement, nodes, caplog):  # noqa: F811
    caplog.set_level('DEBUG', logger='cyborg')
    # Said once per name (this process may have been told of another).
    name = f'nowhere-{uuidlib.uuid4().hex[:8]}.example.org'
    for _ in range(2):
        _report(conf, admin_context, name)
    assert _recorded(admin_context) == (nodes[HOST], HOST)
    assert set(_children(placement, nodes[HOST])) == {
        f'{HOST}_{address}' for address in ADDRESSES}
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if 'Placement does not know' in r.getMessage()]
    assert [level for level, _message in said] == ['WARNING', 'DEBUG']
    assert f'stay under compute node provider {HOST}' in said[0][1]


def test_an_unchanged_report_is_not_compared(
        conf, db, admin_context, placement, nodes):  # noqa: F811
    client = placement_client.get_client(conf)
    calls = client.calls
    seen = []

    def record(conn, cursor, statement, *args):
        seen.append(statement)
    sa.event.listen(db, 'before_cursor_execute', record)
    try:
        _report(conf, admin_context, FQDN, full=False)
    finally:
        sa.event.remove(db, 'before_cursor_execute', record)
    assert client.calls == calls
    assert len(seen) == 1, seen
    assert _recorded(admin_context) == (nodes[HOST], HOST)


def test_a_host_moved_off_a_shared_node_offers_the_newcomer_left_there(
        conf, db, admin_context, placement, nodes):  # noqa: F811
    """Another agent named this host's compute node by mistake: reported
    later, it was held there (a newcomer).  This host moving to its own
    compute node leaves the other alone there, offered at once."""
    other = 'compute-2'
    _report(conf, admin_context, HOST, host=other)
    assert set(_children(placement, nodes[HOST]).values()) == {0, 1}
    assert _children(placement, nodes[HOST])[f'{other}_{ADDRESSES[0]}'] == 1

    _report(conf, admin_context, FQDN)

    assert _children(placement, nodes[HOST]) == {
        f'{other}_{address}': 0 for address in ADDRESSES}
    assert set(_children(placement, nodes[FQDN]).values()) == {0}
