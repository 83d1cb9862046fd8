"""Providers whose rows were deleted while their own removal from
Placement never happened, against the real (embedded) Placement.

A report that drops a device (or the drop of vanished hardware whose
allocations ended) deletes its rows in its transaction and the provider
in its sync after the commit.  With that sync gone (the conductor killed
between the two, or Placement failing it) the removal was recorded
nowhere: the host's next report, unchanged, synced what its rows
describe, marked the host synced and left the provider in Placement,
fully schedulable, until the periodic reconcile (never, with
``[conductor]reconcile_interval`` 0).  An unsynced host's next sync now
deletes the providers cyborg owns under its compute node that no
deployable, of any host, explains."""

import contextlib

import pytest
import requests

from cyborg.conductor import inventory_apply, placement_sync
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf

placement = pf.placement

HOST = 'host1'
GPU, FPGA = 'host1_0000:81:00.0', 'host1_0000:82:00.0'
FPGA_KEY = 'PCI:0000:82:00.0'


def _devices(host=HOST):
    return [cf.device(host, '0000:81:00.0'),
            cf.device(host, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                      num=4)]


class _FailingPlacement(pf.Gate):
    """The real Placement behind a proxy that answers every (method,
    path) request with a 503, as a Placement failing (its database away)
    does, and passes the others on; ``server.requests`` records them
    all."""

    def _forward(self, request):
        if (request.method, request.path) == (self.method, self.path):
            return 503, {'Content-Type': 'application/json'}, {'errors': [
                {'status': 503, 'title': 'Service Unavailable',
                 'detail': 'failing for the test'}]}
        return super()._forward(request)


@contextlib.contextmanager
def _failing(conf, url, method='-', path='-'):
    """Point ``conf`` at Placement (``url``) through a _FailingPlacement
    (by default failing nothing: a recorder); yields its server."""
    proxy = _FailingPlacement(url, method, path)
    with proxy.server:
        pf.placement_conf(conf, proxy.server.url)
        try:
            yield proxy.server
        finally:
            pf.placement_conf(conf, url)


@contextlib.contextmanager
def _sync_never_runs(monkeypatch):
    """The conductor killed right after a change's transaction committed:
    its sync never runs (until a restart: the context's end)."""
    with monkeypatch.context() as patch:
        patch.setattr(placement_sync, 'sync_after_report',
                      lambda *args, **kwargs: False)
        yield


def _provider(placement, name):  # noqa: F811
    """(status, {rc: (total, reserved)}) of ``name``'s inventories."""
    rp = inventory.provider_uuid(name)
    resp = requests.get(f'{placement.url}/resource_providers/{rp}/'
                        f'inventories', headers=pf.HEADERS, timeout=10)
    if not resp.ok:
        return resp.status_code, None
    return resp.status_code, {rc: (v['total'], v['reserved']) for rc, v in
                              resp.json()['inventories'].items()}


def _synced(context, host=HOST):
    return host_db.get(context, host)['placement_synced']


@pytest.fixture
def reported(conf, db, admin_context, placement):  # noqa: F811
    """host1 with a GPU and an FPGA, reported and synced; returns the
    digest acknowledged."""
    pf.compute_node(conf, placement, HOST)
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(_devices()))
    assert _synced(admin_context)
    assert _provider(placement, FPGA) == (200, {'FPGA': (4, 0)})
    return reply['digest']


def _drop_fpga(conf, context, digest):
    return inventory_apply.handle_report(conf, context, HOST, cf.report(
        _devices()[:1], base_digest=digest, full=False, changed=[],
        removed=[FPGA_KEY]))


@pytest.mark.parametrize('lost', ['conductor killed', 'Placement failing'])
def test_a_device_dropped_by_a_report_whose_sync_was_lost_leaves_placement(
        lost, conf, admin_context, reported, placement,  # noqa: F811
        monkeypatch):
    """The FPGA, nothing allocated on it, is pulled; the report's sync
    does not delete its provider.  The agent's next report, unchanged,
    used to mark the host synced with the provider still offering 4
    FPGA, reserved 0."""
    if lost == 'conductor killed':
        with _sync_never_runs(monkeypatch):
            _drop_fpga(conf, admin_context, reported)
    else:
        rp = inventory.provider_uuid(FPGA)
        with _failing(conf, placement.url, 'DELETE',
                      f'/resource_providers/{rp}'):
            _drop_fpga(conf, admin_context, reported)
    assert not _synced(admin_context)
    assert _provider(placement, FPGA) == (200, {'FPGA': (4, 0)})

    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.unchanged(_devices()[:1]))
    assert _synced(admin_context)
    assert _provider(placement, FPGA) == (404, None)
    assert _provider(placement, GPU) == (200, {'PGPU': (1, 0)})


def test_vanished_hardware_dropped_by_a_failed_sync_leaves_placement(
        conf, admin_context, reported, placement):  # noqa: F811
    """The FPGA vanished under an allocation (kept, reserved whole); once
    released, the periodic drop deletes its rows but Placement fails the
    provider's delete.  The next report, unchanged, used to mark the host
    synced with the provider left."""
    rp = inventory.provider_uuid(FPGA)
    pf.hold_allocation(placement.url, pf.PROJECT, {rp: {'FPGA': 2}})
    _drop_fpga(conf, admin_context, reported)
    assert _provider(placement, FPGA) == (200, {'FPGA': (4, 4)})
    pf.hold_allocation(placement.url, pf.PROJECT, {})
    with _failing(conf, placement.url, 'DELETE', f'/resource_providers/{rp}'):
        assert placement_sync.drop_released_gone(conf, admin_context) == 1
    assert not _synced(admin_context)
    assert _provider(placement, FPGA)[0] == 200

    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.unchanged(_devices()[:1]))
    assert _synced(admin_context)
    assert _provider(placement, FPGA) == (404, None)
    assert _provider(placement, GPU) == (200, {'PGPU': (1, 0)})


def _owned_listings(server):
    """The listings of the providers cyborg owns (the orphan search)."""
    return [r for r in server.requests
            if r.method == 'GET' and 'required' in r.query]


def test_only_an_unsynced_host_has_its_orphans_sought(
        conf, admin_context, reported, placement,  # noqa: F811
        monkeypatch):
    """A synced host's report that changes something costs no orphan
    search; an unsynced host's next sync costs one listing."""
    with _failing(conf, placement.url) as server:
        _drop_fpga(conf, admin_context, reported)
        assert _synced(admin_context)
        assert _owned_listings(server) == []
        with _sync_never_runs(monkeypatch):
            inventory_apply.handle_report(
                conf, admin_context, HOST, cf.report(
                    _devices(), base_digest=cf.unchanged(
                        _devices()[:1])['digest'],
                    full=False, changed=_devices()[1:]))
        inventory_apply.handle_report(conf, admin_context, HOST,
                                      cf.unchanged(_devices()))
        assert _synced(admin_context)
        assert len(_owned_listings(server)) == 1
    assert _provider(placement, FPGA) == (200, {'FPGA': (4, 0)})


def test_an_unsynced_host_keeps_the_providers_of_a_host_sharing_its_node(
        conf, db, admin_context, placement, monkeypatch):  # noqa: F811
    """Two host rows under one compute node provider (a host renamed,
    until the old name is forgotten): the orphans an unsynced host's
    sync deletes are those no deployable of ANY host explains, never the
    other host's providers."""
    pf.compute_node(conf, placement, 'compute-1')
    old, new = _devices('Compute-1'), _devices('compute-1')[:1]
    for host, devices in (('Compute-1', old[:1]), ('compute-1', new)):
        report = cf.report(devices)
        report['resource_provider_name'] = 'compute-1'
        inventory_apply.handle_report(conf, admin_context, host, report)
    with _sync_never_runs(monkeypatch):
        inventory_apply.handle_report(conf, admin_context, 'Compute-1',
                                      cf.report(old))
    assert not _synced(admin_context, 'Compute-1')
    inventory_apply.handle_report(conf, admin_context, 'Compute-1',
                                  cf.unchanged(old))
    assert _synced(admin_context, 'Compute-1')
    # Kept, reserved whole as every provider of the two hosts sharing
    # the node (placement_sync).
    assert _provider(placement, 'compute-1_0000:81:00.0') == (
        200, {'PGPU': (1, 1)})
    assert _provider(placement, 'Compute-1_0000:81:00.0') == (
        200, {'PGPU': (1, 1)})
    assert _provider(placement, 'Compute-1_0000:82:00.0') == (
        200, {'FPGA': (4, 4)})
