"""A corrected ``[agent]resource_provider_name``, against the real
(embedded) Placement: the host's first reports named a provider that did
not exist (the conductor fell back to the host name's provider) and the
operator corrected the setting.  Before, the compute node found first
stayed the parent of the host's providers for as long as it existed; a
full report naming another existing provider now moves them under it
(re-parented: an allocation stays with its provider), and records it for
binds.  A name Placement does not know keeps the compute node recorded,
said once, and is not looked up again (nor does it mark the host
unsynced); an unchanged report is never compared.  A name that is
another host's compute node, or no compute node at all, is not followed
either: before, the host's providers moved there, and the hosts then
shared it.  A reconcile racing the move neither moves the providers
back nor records the node left."""

import datetime
import threading
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.conductor import hosts
from cyborg.conductor import inventory_apply
from cyborg.conductor import placement_sync
from cyborg.db import models
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


def _not_known(caplog):
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if 'Placement does not know' in r.getMessage()]


def test_a_name_placement_does_not_know_keeps_the_compute_node(
        conf, db, admin_context, placement, nodes, caplog):  # noqa: F811
    """The agent's default name (its FQDN) where Nova named the compute
    node by the short host name, which the conductor fell back to: said
    once, at INFO, and then neither looked up again nor marking the host
    unsynced at each full report (before: a sync, a listing, a lookup
    each time)."""
    caplog.set_level('DEBUG', logger='cyborg')
    name = f'nowhere-{uuidlib.uuid4().hex[:8]}.example.org'
    _report(conf, admin_context, name)
    client = placement_client.get_client(conf)
    calls = client.calls
    serial = host_db.get(admin_context, HOST)['sync_serial']

    _report(conf, admin_context, name)

    assert client.calls == calls
    row = host_db.get(admin_context, HOST)
    assert row['placement_synced'] and row['sync_serial'] == serial
    assert _recorded(admin_context) == (nodes[HOST], HOST)
    assert set(_children(placement, nodes[HOST])) == {
        f'{HOST}_{address}' for address in ADDRESSES}
    said = _not_known(caplog)
    assert [level for level, _message in said] == ['INFO']
    assert f'stay under compute node provider {HOST}' in said[0][1]


def test_an_unknown_name_after_a_configured_one_is_a_warning(
        conf, db, admin_context, placement, nodes, caplog):  # noqa: F811
    """Not the host name's fallback: a name that was followed, then
    changed to one Placement does not know (a typo)."""
    _report(conf, admin_context, FQDN)
    caplog.set_level('INFO', logger='cyborg')
    _report(conf, admin_context, 'compute-1.typo.example.org')
    assert _recorded(admin_context) == (nodes[FQDN], FQDN)
    assert [level for level, _message in _not_known(caplog)] == ['WARNING']


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


def test_a_host_moved_off_a_shared_node_offers_the_one_left_there(
        conf, db, admin_context, placement, nodes):  # noqa: F811
    """Another agent named this host's compute node by mistake at its
    first report: both held there.  This host moving to its own compute
    node leaves the other alone there, offered at once."""
    other = 'compute-2'
    _report(conf, admin_context, HOST, host=other)
    assert set(_children(placement, nodes[HOST]).values()) == {1}

    _report(conf, admin_context, FQDN)

    assert _children(placement, nodes[HOST]) == {
        f'{other}_{address}': 0 for address in ADDRESSES}
    assert set(_children(placement, nodes[FQDN]).values()) == {0}


def test_a_name_of_another_host_s_compute_node_is_not_followed(
        conf, db, admin_context, placement, nodes, caplog):  # noqa: F811
    """compute-2, alone on its compute node, an instance on its GPU;
    compute-1's resource_provider_name is set to compute-2's compute
    node by mistake.  Before, compute-1's providers moved there, and
    compute-2's (in use) were all reserved.  Now the move is refused,
    named at WARNING once (not looked up again), and so is a name that
    is no compute node (a device's provider)."""
    caplog.set_level('INFO', logger='cyborg')
    other, node = 'compute-2', 'compute-2.example.org'
    other_node = _node(placement, node)
    _report(conf, admin_context, node, host=other)
    pf.hold_allocation(placement.url, CONSUMER, {inventory.provider_uuid(
        f'{other}_{ADDRESSES[0]}'): {'PGPU': 1}})
    client = placement_client.get_client(conf)

    _report(conf, admin_context, node)
    calls = client.calls
    _report(conf, admin_context, node)

    assert client.calls == calls
    assert _recorded(admin_context) == (nodes[HOST], HOST)
    assert _children(placement, other_node) == {
        f'{other}_{address}': 0 for address in ADDRESSES}
    assert _children(placement, nodes[HOST]) == {
        f'{HOST}_{address}': 0 for address in ADDRESSES}
    (refused,) = [r.getMessage() for r in caplog.records
                  if r.levelname == 'WARNING' and node in r.getMessage()]
    assert f'is the compute node provider of host(s) {other}' in refused

    _report(conf, admin_context, f'{other}_{ADDRESSES[1]}')
    assert _recorded(admin_context) == (nodes[HOST], HOST)
    assert any('is not a compute node' in r.getMessage()
               for r in caplog.records if r.levelname == 'WARNING')


def test_a_name_refused_for_another_host_is_followed_once_it_is_forgotten(
        conf, db, admin_context, placement, nodes):  # noqa: F811
    other, node = 'compute-2', 'compute-2.example.org'
    other_node = _node(placement, node)
    _report(conf, admin_context, node, host=other)
    _report(conf, admin_context, node)
    assert _recorded(admin_context) == (nodes[HOST], HOST)
    with db.begin() as c:
        c.execute(sa.update(models.Host).where(
            models.Host.hostname == other).values(
                last_report_at=models._now() - datetime.timedelta(hours=1)))
    hosts.forget(conf, admin_context, other)

    _report(conf, admin_context, node)

    assert _recorded(admin_context) == (other_node, node)
    assert _children(placement, other_node) == {
        f'{HOST}_{address}': 0 for address in ADDRESSES}


def test_a_reconcile_racing_a_move_leaves_it_done(
        conf, db, admin_context, placement, nodes,  # noqa: F811
        monkeypatch):
    """Another conductor's reconcile reads the host's row (the compute
    node found first) just before a full report's sync moves the host's
    providers under the corrected name's, and works after it.  Before,
    it moved them back and recorded the node left (with the new name):
    no later full report looked the name up again.  Now it finds the row
    moved and stops."""
    listed, go_on = threading.Event(), threading.Event()
    real_tree = placement_sync._compute_node_tree
    real_record = placement_sync._record_compute_node
    reconcile = []

    def tree(*args, **kwargs):
        if threading.current_thread().name == 'reconcile':
            listed.set()
            assert go_on.wait(60)
        return real_tree(*args, **kwargs)

    def record(context, host, cn_uuid, cn_name):
        if cn_uuid == nodes[FQDN] and not reconcile:
            reconcile.append(threading.Thread(
                target=placement_sync.reconcile_host, name='reconcile',
                args=(conf, cyborg_context.get_admin_context(), HOST)))
            reconcile[0].start()
            assert listed.wait(60)
        return real_record(context, host, cn_uuid, cn_name)

    monkeypatch.setattr(placement_sync, '_compute_node_tree', tree)
    monkeypatch.setattr(placement_sync, '_record_compute_node', record)

    _report(conf, admin_context, FQDN)
    go_on.set()
    reconcile[0].join(60)

    assert not reconcile[0].is_alive()
    assert _recorded(admin_context) == (nodes[FQDN], FQDN)
    assert host_db.get(admin_context, HOST)['placement_synced']
    assert _children(placement, nodes[HOST]) == {}
    assert _children(placement, nodes[FQDN]) == {
        f'{HOST}_{address}': 0 for address in ADDRESSES}
