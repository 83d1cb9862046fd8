"""Placement sync, the periodic reconcile and device status, against the
real (embedded) Placement."""

import concurrent.futures
import time

import pytest
import requests

from cyborg.common import exception
from cyborg.conductor import (device_status, inventory_apply, periodics,
                              placement_sync)
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf
from tests.fixtures.placement import placement  # noqa: F401
from tests.unit.conductor import agent_endpoint

HOST = 'host1'
GPU = 'host1_0000:81:00.0'
FPGA = 'host1_0000:82:00.0'


@pytest.fixture
def reported(conf, db, admin_context, placement):  # noqa: F811
    """A host with two devices, reported and synced; returns its compute
    node provider uuid."""
    pf.placement_conf(conf, placement.url)
    cn = requests.post(placement.url + '/resource_providers',
                       json={'name': HOST}, headers=pf.HEADERS,
                       timeout=10).json()['uuid']
    devices = [cf.device(HOST, '0000:81:00.0', traits=['CUSTOM_A']),
               cf.device(HOST, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                         num=4)]
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(devices))
    return cn


def _call(placement, method, path, body=None):  # noqa: F811
    resp = requests.request(method, placement.url + path, json=body,
                            headers=pf.HEADERS, timeout=10)
    assert resp.status_code < 300, resp.text
    return resp.json() if resp.content else None


def _inventory(placement, name):  # noqa: F811
    rp = inventory.provider_uuid(name)
    return _call(placement, 'GET', f'/resource_providers/{rp}/inventories')


def _traits(placement, name):  # noqa: F811
    rp = inventory.provider_uuid(name)
    return set(_call(placement, 'GET',
                     f'/resource_providers/{rp}/traits')['traits'])


def _names(placement, cn):  # noqa: F811
    return {rp['name'] for rp in _call(
        placement, 'GET', f'/resource_providers?in_tree={cn}')[
            'resource_providers'] if rp['uuid'] != cn}


def test_reconcile_restores_a_provider_deleted_by_hand(
        conf, admin_context, reported, placement):  # noqa: F811
    _call(placement, 'DELETE',
          '/resource_providers/' + inventory.provider_uuid(GPU))
    placement_sync.reconcile_all(conf, admin_context)
    assert _names(placement, reported) == {GPU, FPGA}
    assert _traits(placement, GPU) == {'CUSTOM_A', 'OWNER_CYBORG'}


def test_reconcile_repairs_inventory_and_traits_edited_by_hand(
        conf, admin_context, reported, placement):  # noqa: F811
    rp = inventory.provider_uuid(FPGA)
    inv = _inventory(placement, FPGA)
    gen = _call(placement, 'PUT', f'/resource_providers/{rp}/inventories', {
        'resource_provider_generation': inv['resource_provider_generation'],
        'inventories': {'FPGA': {'total': 9}}})['resource_provider_generation']
    _call(placement, 'PUT', f'/resource_providers/{rp}/traits', {
        'resource_provider_generation': gen, 'traits': []})
    placement_sync.reconcile_all(conf, admin_context)
    fpga = _inventory(placement, FPGA)['inventories']['FPGA']
    assert (fpga['total'], fpga['max_unit'], fpga['reserved']) == (4, 4, 0)
    assert _traits(placement, FPGA) == {'OWNER_CYBORG'}


def test_reconcile_removes_cyborg_orphans_and_leaves_others_alone(
        conf, admin_context, reported, placement):  # noqa: F811
    orphan = _call(placement, 'POST', '/resource_providers', {
        'name': 'host1_0000:99:00.0', 'parent_provider_uuid': reported})
    nova_child = _call(placement, 'POST', '/resource_providers', {
        'name': 'host1_pgpu_nova', 'parent_provider_uuid': reported})
    _call(placement, 'PUT', f"/resource_providers/{orphan['uuid']}/traits",
          {'resource_provider_generation': orphan['generation'],
           'traits': ['OWNER_CYBORG']})
    placement_sync.reconcile_all(conf, admin_context)
    assert _names(placement, reported) == {GPU, FPGA, 'host1_pgpu_nova'}
    assert nova_child['uuid']


def test_unchanged_tree_reconciles_without_writes(
        conf, admin_context, reported, placement):  # noqa: F811
    placement_sync.reconcile_all(conf, admin_context)
    before = {n: _inventory(placement, n)['resource_provider_generation']
              for n in (GPU, FPGA)}
    placement_sync.reconcile_all(conf, admin_context)
    after = {n: _inventory(placement, n)['resource_provider_generation']
             for n in (GPU, FPGA)}
    assert before == after


def test_disable_reserves_the_devices_providers_and_enable_frees_them(
        conf, admin_context, reported, placement):  # noqa: F811
    fpga_dev = inventory.row_uuid(HOST, 'PCI:0000:82:00.0')
    device = device_status.set_status(conf, admin_context, fpga_dev,
                                      'maintaining')
    assert device['status'] == 'maintaining' and device['uuid'] == fpga_dev
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 4
    # Only that device's providers.
    assert _inventory(placement, GPU)['inventories']['PGPU']['reserved'] == 0
    # A later report does not undo it.
    inventory_apply.handle_report(conf, admin_context, HOST, cf.report(
        [cf.device(HOST, '0000:81:00.0', traits=['CUSTOM_A']),
         cf.device(HOST, '0000:82:00.0', dev_type='FPGA', rc='FPGA', num=4),
         cf.device(HOST, '0000:83:00.0')]))
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 4
    # Where new devices wait for an admin, enabling runs the driver's
    # preparation step on the agent first.
    conf.set_override('new_device_status', 'maintaining', group='conductor')
    with agent_endpoint.serving(conf, HOST,
                                agent_endpoint.RecordingAgent()) as agent:
        device_status.set_status(conf, admin_context, fpga_dev, 'enabled')
    assert agent.prepared == ['PCI:0000:82:00.0']
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 0
    assert host_db.get(admin_context, HOST)['placement_synced']


def test_bad_status_and_unknown_device_are_refused(
        conf, admin_context, reported):
    with pytest.raises(exception.Invalid, match='enabled, maintaining'):
        device_status.set_status(conf, admin_context, 'x', 'broken')
    with pytest.raises(exception.ResourceNotFound):
        device_status.set_status(conf, admin_context,
                                 '00000000-0000-0000-0000-000000000000',
                                 'enabled')


def test_status_change_while_placement_is_down_is_applied_later(
        conf, admin_context, reported, placement):  # noqa: F811
    url = placement.url
    pf.placement_conf(conf, 'http://127.0.0.1:9')
    gpu_dev = inventory.row_uuid(HOST, 'PCI:0000:81:00.0')
    device = device_status.set_status(conf, admin_context, gpu_dev,
                                      'maintaining')
    assert device['status'] == 'maintaining'
    assert not host_db.get(admin_context, HOST)['placement_synced']
    pf.placement_conf(conf, url)
    placement_sync.reconcile_all(conf, admin_context)
    assert _inventory(placement, GPU)['inventories']['PGPU']['reserved'] == 1


def test_periodic_runner_runs_the_reconcile(
        conf, admin_context, reported, placement):  # noqa: F811
    conf.set_override('reconcile_interval', 1, group='conductor')
    jobs = [job for job in periodics.JOBS if job[0] == 'reconcile_placement']
    runner = periodics.PeriodicRunner(conf, jobs)
    _call(placement, 'DELETE',
          '/resource_providers/' + inventory.provider_uuid(GPU))
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while GPU not in _names(placement, reported):
            assert time.monotonic() < deadline, 'reconcile did not run'
            time.sleep(0.2)
    finally:
        runner.stop()
        runner.wait()


def test_plain_maintenance_enables_without_asking_the_agent(
        conf, admin_context, reported, placement):  # noqa: F811
    """With new devices enabled at once (the default), disable/enable is
    plain maintenance: it works while the host's agent is down."""
    fpga_dev = inventory.row_uuid(HOST, 'PCI:0000:82:00.0')
    device_status.set_status(conf, admin_context, fpga_dev, 'maintaining')
    device = device_status.set_status(conf, admin_context, fpga_dev,
                                      'enabled')
    assert device['status'] == 'enabled'
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 0


def test_report_and_sync_are_one_info_line_each(conf, db, admin_context,
                                                placement,  # noqa: F811
                                                caplog):
    pf.placement_conf(conf, placement.url)
    requests.post(placement.url + '/resource_providers', json={'name': HOST},
                  headers=pf.HEADERS, timeout=10)
    devices = [cf.device(HOST, '0000:81:00.0'),
               cf.device(HOST, '0000:82:00.0', dev_type='FPGA', rc='FPGA')]
    caplog.set_level('DEBUG', logger='cyborg')

    def info_lines():
        lines = [r.getMessage() for r in caplog.records
                 if r.name.startswith('cyborg.conductor')
                 and r.levelname == 'INFO']
        caplog.clear()
        return lines

    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.report(devices))
    stored, synced = info_lines()
    assert stored.startswith('Report of host1 stored (full): 2 device(s) '
                             'added, 0 updated, 0 removed; ')
    assert synced == ('Placement sync of host host1: 2 provider(s) '
                      'created, 0 updated, 0 removed, 0 unchanged')

    # The heartbeat and a reconcile that finds Placement right: DEBUG.
    inventory_apply.handle_report(conf, admin_context, HOST,
                                  cf.unchanged(devices))
    placement_sync.reconcile_all(conf, admin_context)
    assert info_lines() == []

    inventory_apply.handle_report(
        conf, admin_context, HOST,
        cf.report(devices[:1], base_digest=cf.unchanged(devices)['digest'],
                  full=False, changed=[],
                  removed=[devices[1].key()]))
    stored, synced = info_lines()
    assert stored.startswith('Report of host1 stored (delta): 0 device(s) '
                             'added, 0 updated, 1 removed; ')
    assert synced.startswith('Placement sync of host host1: 0 provider(s) '
                             'created, 0 updated, 1 removed')


def _existing_provider(placement, cn, traits, inventories=None):  # noqa: F811
    """GPU's provider as something else left it: created under ``cn``
    with ``traits`` and, if given, ``inventories``."""
    rp = inventory.provider_uuid(GPU)
    _call(placement, 'POST', '/resource_providers', {
        'uuid': rp, 'name': GPU, 'parent_provider_uuid': cn})
    for trait in traits:
        if trait.startswith('CUSTOM_'):
            _call(placement, 'PUT', '/traits/' + trait)
    generation = _call(placement, 'PUT', f'/resource_providers/{rp}/traits', {
        'resource_provider_generation': 0,
        'traits': sorted(traits)})['resource_provider_generation']
    if inventories is not None:
        generation = _call(
            placement, 'PUT', f'/resource_providers/{rp}/inventories', {
                'resource_provider_generation': generation,
                'inventories': inventories})['resource_provider_generation']
    return generation


def _first_report(conf, admin_context, placement):  # noqa: F811
    pf.placement_conf(conf, placement.url)
    inventory_apply.handle_report(conf, admin_context, HOST, cf.report(
        [cf.device(HOST, '0000:81:00.0', traits=['CUSTOM_A'])]))
    assert host_db.get(admin_context, HOST)['placement_synced']
    gpu = _inventory(placement, GPU)
    assert gpu['inventories']['PGPU']['total'] == 1
    assert _traits(placement, GPU) == {'CUSTOM_A', 'OWNER_CYBORG'}
    return gpu['resource_provider_generation']


def test_a_provider_left_half_made_gets_only_what_it_lacks(
        conf, db, admin_context, placement):  # noqa: F811
    """A host's first sync cut after its trait PUT (Placement went away
    before the inventory was set) left the provider with its traits and
    no inventory: the next sync adopts it and writes the inventory alone
    (one generation), not the traits again."""
    cn = _call(placement, 'POST', '/resource_providers', {'name': HOST})
    before = _existing_provider(placement, cn['uuid'],
                                {'CUSTOM_A', 'OWNER_CYBORG'})
    assert _first_report(conf, admin_context, placement) == before + 1


def test_an_adopted_provider_already_right_is_not_written(
        conf, db, admin_context, placement):  # noqa: F811
    """A provider that exists as the host's report describes it keeps its
    generation when the host's first sync adopts it: made by OpenStack
    Cyborg, or by a first sync whose reshape Placement applied but whose
    answer was lost (Placement went away), so that the host was never
    recorded as synced.  (It was written again whole: +1 generation for
    the same inventory.)"""
    cn = _call(placement, 'POST', '/resource_providers', {'name': HOST})
    before = _existing_provider(
        placement, cn['uuid'], {'CUSTOM_A', 'OWNER_CYBORG'},
        {'PGPU': {'total': 1, 'reserved': 0, 'min_unit': 1, 'max_unit': 1,
                  'step_size': 1, 'allocation_ratio': 1.0}})
    assert _first_report(conf, admin_context, placement) == before


FPGA_DEVICE = inventory.row_uuid(HOST, 'PCI:0000:82:00.0')


def _disabled_past(conf, admin_context, placement, meanwhile):  # noqa: F811
    """Disable the FPGA device, its sync held on its way to Placement
    while ``meanwhile()`` runs."""
    rp = inventory.provider_uuid(FPGA)
    with pf.held(conf, placement.url, 'PUT',
                 f'/resource_providers/{rp}/inventories') as gate:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            disabling = pool.submit(device_status.set_status, conf,
                                    admin_context, FPGA_DEVICE,
                                    'maintaining')
            assert gate.arrived.wait(30)
            meanwhile()
            gate.go.set()
            assert disabling.result(30)['status'] == 'maintaining'


def test_a_sync_overtaken_by_a_newer_one_does_not_write_its_old_state(
        conf, admin_context, reported, placement):  # noqa: F811
    """Disable, then enable at once: the disable's sync, held on its way
    to Placement, arrives after the enable's.  Its write meets a
    generation conflict; it used to re-read the generation and send its
    old body again, leaving the device reserved (out of the schedule)
    while the database said enabled, with the host marked synced."""
    def enable():
        device_status.set_status(conf, admin_context, FPGA_DEVICE,
                                 'enabled')
        assert _inventory(placement, FPGA)['inventories']['FPGA'][
            'reserved'] == 0

    _disabled_past(conf, admin_context, placement, enable)
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 0
    assert host_db.get(admin_context, HOST)['placement_synced']


def test_a_reconcile_that_read_the_rows_before_a_change_does_not_undo_it(
        conf, admin_context, reported, placement):  # noqa: F811
    """The reconcile reads the host's rows, then each provider's
    inventory; a disable synced between the two made the inventory differ
    from the rows it had read, and it 'repaired' it back to enabled."""
    fpga_dev = inventory.row_uuid(HOST, 'PCI:0000:82:00.0')
    rp = inventory.provider_uuid(FPGA)
    with pf.held(conf, placement.url, 'GET',
               f'/resource_providers/{rp}/inventories') as gate:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            reconciling = pool.submit(placement_sync.reconcile_all, conf,
                                      admin_context)
            assert gate.arrived.wait(30)
            device_status.set_status(conf, admin_context, fpga_dev,
                                     'maintaining')
            gate.go.set()
            assert reconciling.result(30) == 1
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 4
    placement_sync.reconcile_all(conf, admin_context)
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 4


def test_a_sync_older_than_a_change_whose_sync_failed_leaves_the_host_unsynced(
        conf, admin_context, reported, placement):  # noqa: F811
    """A disable's sync, held on its way, finishes after an enable whose
    own sync failed (Placement unreachable for it).  It wrote what was
    right when it read the rows (the device out of the schedule), and
    used to record the host as synced: the reconcile then trusted it, and
    the enabled device stayed out of the schedule for good."""
    def enable_while_placement_is_away():
        pf.placement_conf(conf, 'http://127.0.0.1:9')
        device_status.set_status(conf, admin_context, FPGA_DEVICE,
                                 'enabled')

    _disabled_past(conf, admin_context, placement,
                   enable_while_placement_is_away)
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 4
    assert not host_db.get(admin_context, HOST)['placement_synced']
    placement_sync.reconcile_all(conf, admin_context)
    assert _inventory(placement, FPGA)['inventories']['FPGA']['reserved'] \
        == 0
    assert host_db.get(admin_context, HOST)['placement_synced']
