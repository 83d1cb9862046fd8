"""Report handling against a database and the real (embedded) Placement."""

import contextlib
import datetime
import threading

import pytest
import requests
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import exception
from cyborg.conductor import inventory_apply, placement_sync
from cyborg.db import api as db_api
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from cyborg.db import models
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf
from tests.fixtures.placement import placement  # noqa: F401

HOST = 'host1'


@pytest.fixture
def cn(conf, placement):  # noqa: F811
    """The compute node provider nova-compute would have made."""
    pf.placement_conf(conf, placement.url)
    resp = requests.post(placement.url + '/resource_providers',
                         json={'name': HOST}, headers=pf.HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()['uuid']


def _get(placement, path):  # noqa: F811
    resp = requests.get(placement.url + path, headers=pf.HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _tree(placement, cn_uuid):  # noqa: F811
    """{name: (inventories, traits)} of the providers under the node."""
    found = {}
    for rp in _get(placement, f'/resource_providers?in_tree={cn_uuid}')[
            'resource_providers']:
        if rp['uuid'] == cn_uuid:
            continue
        assert rp['parent_provider_uuid'] == cn_uuid
        assert rp['uuid'] == inventory.provider_uuid(rp['name'])
        invs = _get(placement, f"/resource_providers/{rp['uuid']}/inventories")
        traits = _get(placement, f"/resource_providers/{rp['uuid']}/traits")
        found[rp['name']] = (
            {rc: (v['total'], v['max_unit'], v['reserved'])
             for rc, v in invs['inventories'].items()},
            set(traits['traits']))
    return found


def _count(engine, table):
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(
            models.Base.metadata.tables[table])).scalar()


@contextlib.contextmanager
def _statements(engine):
    seen = []

    def _record(conn, cursor, statement, *args):
        seen.append(statement)
    sa.event.listen(engine, 'before_cursor_execute', _record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, 'before_cursor_execute', _record)


def _devices():
    return [cf.device(HOST, '0000:81:00.0', traits=['CUSTOM_GPU_A100']),
            cf.device(HOST, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                      num=4, handles=4, traits=['CUSTOM_FPGA_X'])]


def _report(conf, ctx, report, host=HOST):
    return inventory_apply.handle_report(conf, ctx, host, report)


def test_first_report_builds_rows_and_provider_tree(
        conf, db, admin_context, cn, placement):  # noqa: F811
    reply = _report(conf, admin_context, cf.report(_devices()))
    assert reply == {'digest': inventory.inventory_digest(_devices()),
                     'need_full': False}
    assert _count(db, 'devices') == 2
    assert _count(db, 'attach_handles') == 5
    assert _tree(placement, cn) == {
        'host1_0000:81:00.0': ({'PGPU': (1, 1, 0)},
                               {'CUSTOM_GPU_A100', 'OWNER_CYBORG'}),
        'host1_0000:82:00.0': ({'FPGA': (4, 4, 0)},
                               {'CUSTOM_FPGA_X', 'OWNER_CYBORG'}),
    }
    host = host_db.get(admin_context, HOST)
    assert host['placement_synced'] and host['compute_rp_uuid'] == cn


@pytest.mark.parametrize('returning', [True, False])
def test_first_report_links_rows_with_or_without_returning(
        conf, db, admin_context, cn, monkeypatch, returning):
    # MariaDB, PostgreSQL and SQLite hand back the ids of an executemany
    # INSERT; MySQL does not, and its children look their parents up.
    monkeypatch.setattr(db.dialect, 'insert_executemany_returning',
                        returning)
    with _statements(db) as seen:
        _report(conf, admin_context, cf.report(_devices()))
    lookups = [s for s in seen if s.lstrip().upper().startswith('SELECT')
               and 'WHERE' in s and '.uuid IN' in s]
    assert bool(lookups) is not returning
    h, dep = models.AttachHandle, models.Deployable
    d, c = models.Device, models.ControlpathID
    with db.connect() as conn:
        rows = conn.execute(
            sa.select(h.attach_info, dep.name, d.hostname, c.cpid_info)
            .join(dep, dep.id == h.deployable_id)
            .join(d, d.id == dep.device_id)
            .join(c, c.id == h.cpid_id)
            .where(c.device_id == d.id)).all()
    assert len(rows) == 5
    assert {(r.name, r.cpid_info) for r in rows} == {
        ('host1_0000:81:00.0', '0000:81:00.0'),
        ('host1_0000:82:00.0', '0000:82:00.0')}


def test_unchanged_report_costs_two_statements_and_no_placement_call(
        conf, db, admin_context, cn):
    _report(conf, admin_context, cf.report(_devices()))
    client = placement_client.get_client(conf)
    calls = client.calls
    with _statements(db) as seen:
        reply = _report(conf, admin_context, cf.unchanged(_devices()))
    assert reply['need_full'] is False
    assert len(seen) <= 2, seen
    assert client.calls == calls


def test_delta_on_a_stale_base_asks_for_a_full_report(
        conf, db, admin_context, cn):
    _report(conf, admin_context, cf.report(_devices()))
    devices = _devices() + [cf.device(HOST, '0000:83:00.0')]
    delta = cf.report(devices, base_digest='not-what-we-have', full=False,
                      changed=devices[2:])
    reply = _report(conf, admin_context, delta)
    assert reply == {'digest': inventory.inventory_digest(_devices()),
                     'need_full': True}
    assert _count(db, 'devices') == 2


def test_hotplugged_device_arrives_by_delta(
        conf, db, admin_context, cn, placement):  # noqa: F811
    first = _report(conf, admin_context, cf.report(_devices()))
    devices = _devices() + [cf.device(HOST, '0000:83:00.0', rc='CUSTOM_NEW')]
    delta = cf.report(devices, base_digest=first['digest'], full=False,
                      changed=devices[2:])
    assert _report(conf, admin_context, delta)['need_full'] is False
    tree = _tree(placement, cn)
    assert tree['host1_0000:83:00.0'] == ({'CUSTOM_NEW': (1, 1, 0)},
                                          {'OWNER_CYBORG'})
    assert len(tree) == 3


def test_malformed_report_writes_nothing(conf, db, admin_context, cn):
    bad = cf.report(_devices())
    bad['devices'].append(bad['devices'][0])
    with pytest.raises(exception.Invalid):
        _report(conf, admin_context, bad)
    assert _count(db, 'hosts') == 0 and _count(db, 'devices') == 0


def _rows(engine):
    """{device key: (type, [(deployable, num, [attach types])])}."""
    d, dep, h = models.Device, models.Deployable, models.AttachHandle
    c = models.ControlpathID
    found = {}
    with engine.connect() as conn:
        for row in conn.execute(
                sa.select(c.cpid_info, d.type, dep.name, dep.num_accelerators,
                          h.attach_type)
                .join(d, d.id == c.device_id)
                .join(dep, dep.device_id == d.id)
                .join(h, h.deployable_id == dep.id)):
            entry = found.setdefault(row.cpid_info, (row.type, {}))
            entry[1].setdefault((row.name, row.num_accelerators),
                                []).append(row.attach_type)
    return found


def test_a_newer_agent_never_stops_its_hosts_inventory(
        conf, db, admin_context, cn, placement, caplog):  # noqa: F811
    """Unknown device and attach types and unknown fields: the rest of the
    report is stored and synced, what was stored before for a skipped
    device stays as it was, one WARNING says what was left out, and the
    host is asked for full reports until a conductor stores all of it."""
    first = _report(conf, admin_context, cf.report(_devices()))
    before = _rows(db)
    devices = _devices()
    devices[1].type = 'DPU'                           # a known device
    vfio = cf.device(HOST, '0000:85:00.0')            # a new one
    vfio.deployables[0].attach_handles[0].attach_type = 'VFIO_USER'
    new = cf.device(HOST, '0000:86:00.0', traits=['CUSTOM_NEW'])
    newer = cf.report(devices + [vfio, new])
    newer['devices'][0]['numa_node'] = 1
    newer['devices'][0]['deployables'][0]['partition'] = 'whole'
    newer['health_format'] = 2
    reply = _report(conf, admin_context, newer)
    assert reply == {'digest': newer['digest'], 'need_full': False}
    rows = _rows(db)
    assert set(rows) == {'0000:81:00.0', '0000:82:00.0', '0000:86:00.0'}
    assert rows['0000:82:00.0'] == before['0000:82:00.0']
    assert rows['0000:81:00.0'] == before['0000:81:00.0']
    tree = _tree(placement, cn)
    assert set(tree) == {'host1_0000:81:00.0', 'host1_0000:82:00.0',
                         'host1_0000:86:00.0'}
    assert tree['host1_0000:82:00.0'][0] == {'FPGA': (4, 4, 0)}
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == 'WARNING']
    assert len(warnings) == 1, warnings
    assert all(word in warnings[0] for word in
               ("'DPU'", "'VFIO_USER'", 'numa_node', 'partition'))
    # The agent took its digest; its next (unchanged) delta is answered
    # need_full, and the full report it then sends is logged at DEBUG.
    delta = {'digest': newer['digest'], 'base_digest': newer['digest'],
             'full': False, 'devices': [], 'removed': []}
    assert _report(conf, admin_context, delta)['need_full'] is True
    assert _report(conf, admin_context, newer) == reply
    assert len([r for r in caplog.records
                if r.levelname == 'WARNING']) == 1
    host = host_db.get(admin_context, HOST)
    assert host['placement_synced']
    assert host['report_digest'] != newer['digest'] != first['digest']
    # What a conductor that understands everything stores ends it.
    complete = cf.report(_devices() + [new])
    assert _report(conf, admin_context, complete)['need_full'] is False
    unchanged = {'digest': complete['digest'],
                 'base_digest': complete['digest'], 'full': False,
                 'devices': [], 'removed': []}
    assert host_db.touch(admin_context, HOST, complete['digest'])
    assert _report(conf, admin_context, unchanged)['need_full'] is False


def _unchanged(report):
    return {'digest': report['digest'], 'base_digest': report['digest'],
            'full': False, 'devices': [], 'removed': []}


def test_a_vanished_handle_an_arq_holds_goes_once_it_is_free(
        conf, db, admin_context, cn):
    """The FPGA's fourth function is no longer reported while an ARQ holds
    it: kept, and the agent is asked for full reports (its own picture
    does not change when the handle is freed), the first one after the
    ARQ let go drops it."""
    _report(conf, admin_context, cf.report(_devices()))
    fourth = sa.select(models.AttachHandle.id).where(
        models.AttachHandle.attach_info.like('%"function": "3"%'))
    with db.begin() as conn:
        conn.execute(sa.update(models.AttachHandle).where(
            models.AttachHandle.id.in_(fourth.scalar_subquery()))
            .values(in_use=True))
    devices = _devices()
    devices[1].deployables[0].attach_handles = \
        devices[1].deployables[0].attach_handles[:3]
    shrunk = cf.report(devices)
    assert _report(conf, admin_context, shrunk)['need_full'] is False
    assert _count(db, 'attach_handles') == 5
    # Still held: each period's report is a full one, and keeps it.
    assert _report(conf, admin_context, _unchanged(shrunk))['need_full']
    assert _report(conf, admin_context, shrunk)['need_full'] is False
    assert _count(db, 'attach_handles') == 5
    with db.begin() as conn:
        conn.execute(sa.update(models.AttachHandle).values(in_use=False))
    assert _report(conf, admin_context, _unchanged(shrunk))['need_full']
    assert _report(conf, admin_context, shrunk)['need_full'] is False
    assert _count(db, 'attach_handles') == 4
    # Nothing kept any more: unchanged reports are unchanged again.
    assert _report(conf, admin_context,
                   _unchanged(shrunk))['need_full'] is False


def test_report_kept_until_compute_node_appears(
        conf, db, admin_context, placement):  # noqa: F811
    pf.placement_conf(conf, placement.url)
    _report(conf, admin_context, cf.report(_devices()))
    host = host_db.get(admin_context, HOST)
    assert _count(db, 'devices') == 2 and not host['placement_synced']
    cn = requests.post(placement.url + '/resource_providers',
                       json={'name': HOST}, headers=pf.HEADERS,
                       timeout=10).json()['uuid']
    # The agent's next periodic (unchanged) report finishes the job.
    _report(conf, admin_context, cf.unchanged(_devices()))
    assert len(_tree(placement, cn)) == 2
    assert host_db.get(admin_context, HOST)['placement_synced']


def test_removed_device_with_allocation_is_kept_reserved_until_released(
        conf, db, admin_context, cn, placement):  # noqa: F811
    first = _report(conf, admin_context, cf.report(_devices()))
    fpga_rp = inventory.provider_uuid('host1_0000:82:00.0')
    pf.hold_allocation(placement.url, pf.PROJECT, {fpga_rp: {'FPGA': 2}})
    devices = _devices()[:1]
    delta = cf.report(devices, base_digest=first['digest'], full=False,
                      changed=[], removed=['PCI:0000:82:00.0'])
    _report(conf, admin_context, delta)
    assert _tree(placement, cn)['host1_0000:82:00.0'][0] == {
        'FPGA': (4, 4, 4)}
    rows = inventory_db.host_providers(admin_context, HOST)
    assert [r['name'] for r in rows if r['gone']] == ['host1_0000:82:00.0']
    # Still allocated: the reconcile keeps it.
    placement_sync.reconcile_host(conf, admin_context, HOST)
    assert 'host1_0000:82:00.0' in _tree(placement, cn)
    pf.hold_allocation(placement.url, pf.PROJECT, {})
    placement_sync.reconcile_host(conf, admin_context, HOST)
    assert set(_tree(placement, cn)) == {'host1_0000:81:00.0'}
    assert _count(db, 'devices') == 1 and _count(db, 'deployables') == 1


def test_released_gone_hardware_is_dropped_by_the_periodic_check(
        conf, db, admin_context, cn, placement):  # noqa: F811
    # Nova releases the allocation of an instance whose device vanished:
    # the gone check removes the device and its provider at its next run
    # ([conductor]gone_check_interval), without waiting for the reconcile.
    first = _report(conf, admin_context, cf.report(_devices()))
    fpga_rp = inventory.provider_uuid('host1_0000:82:00.0')
    pf.hold_allocation(placement.url, pf.PROJECT, {fpga_rp: {'FPGA': 2}})
    _report(conf, admin_context, cf.report(
        _devices()[:1], base_digest=first['digest'], full=False, changed=[],
        removed=['PCI:0000:82:00.0']))
    assert placement_sync.drop_released_gone(conf, admin_context) == 0
    assert 'host1_0000:82:00.0' in _tree(placement, cn)
    pf.hold_allocation(placement.url, pf.PROJECT, {})
    assert placement_sync.drop_released_gone(conf, admin_context) == 1
    assert set(_tree(placement, cn)) == {'host1_0000:81:00.0'}
    assert _count(db, 'devices') == 1 and _count(db, 'deployables') == 1
    assert placement_sync.drop_released_gone(conf, admin_context) == 0


def test_unhealthy_device_that_vanishes_comes_back_unhealthy(
        conf, db, admin_context, cn, placement):  # noqa: F811
    # Not allocated, but failing when it vanished: kept lost (reserved in
    # Placement) through reconciles for [health]max_hold_down, so that
    # the same card returning is re-probed, not trusted; then removed.
    first = _report(conf, admin_context, cf.report(_devices()))
    fpga = 'host1_0000:82:00.0'
    with db.begin() as c:
        c.execute(sa.update(models.Device).where(
            models.Device.uuid == _device_uuid(db, fpga)).values(
                health='unhealthy', health_reason='XID 79'))
    delta = cf.report(_devices()[:1], base_digest=first['digest'],
                      full=False, changed=[], removed=['PCI:0000:82:00.0'])
    second = _report(conf, admin_context, delta)
    placement_sync.reconcile_host(conf, admin_context, HOST)
    assert _tree(placement, cn)[fpga][0] == {'FPGA': (4, 4, 4)}
    [row] = [r for r in inventory_db.host_providers(admin_context, HOST)
             if r['gone']]
    assert (row['name'], row['health']) == (fpga, 'lost')
    assert row['health_reason'] == ('the hardware vanished while not '
                                    'healthy (unhealthy: XID 79)')
    # Back within the time: unhealthy, re-probed like any failed device.
    back = cf.report(_devices(), base_digest=second['digest'], full=False,
                     changed=_devices()[1:])
    third = _report(conf, admin_context, back)
    [row] = [r for r in inventory_db.host_providers(admin_context, HOST)
             if r['name'] == fpga]
    assert (row['gone'], row['health']) == (False, 'unhealthy')
    assert row['device_health'] == 'unhealthy'
    # Gone again, and for longer than the longest hold-down: removed.
    delta = cf.report(_devices()[:1], base_digest=third['digest'],
                      full=False, changed=[], removed=['PCI:0000:82:00.0'])
    _report(conf, admin_context, delta)
    long_ago = (timeutils.utcnow()
                - datetime.timedelta(seconds=conf.health.max_hold_down + 1))
    with db.begin() as c:
        c.execute(sa.update(models.Deployable).where(
            models.Deployable.name == fpga).values(
                health_updated_at=long_ago))
        # The device is remembered by its own record as well.
        c.execute(sa.update(models.Device).where(
            models.Device.health == 'lost').values(
                health_updated_at=long_ago))
    placement_sync.reconcile_host(conf, admin_context, HOST)
    assert set(_tree(placement, cn)) == {'host1_0000:81:00.0'}
    assert _count(db, 'devices') == 1 and _count(db, 'deployables') == 1


def _device_uuid(engine, deployable_name):
    with engine.connect() as c:
        return c.scalar(sa.select(models.Device.uuid).join(
            models.Deployable,
            models.Deployable.device_id == models.Device.id).where(
                models.Deployable.name == deployable_name))


def test_vanished_hardware_is_asked_about_outside_the_transaction(
        conf, db, admin_context, cn, placement, monkeypatch):  # noqa: F811
    """Whether an instance still uses a removed device's provider is asked
    of Placement with no transaction open (none holds the host's row
    while Placement answers); the device is kept all the same."""
    first = _report(conf, admin_context, cf.report(_devices()))
    fpga_rp = inventory.provider_uuid('host1_0000:82:00.0')
    pf.hold_allocation(placement.url, pf.PROJECT, {fpga_rp: {'FPGA': 2}})
    asked = []
    real = placement_client.PlacementClient.get_allocations
    with databases.transactions(db) as seen:
        def asking(self, rp_uuid):
            asked.append((rp_uuid, seen.open()))
            return real(self, rp_uuid)
        monkeypatch.setattr(placement_client.PlacementClient,
                            'get_allocations', asking)
        _report(conf, admin_context, cf.report(
            _devices()[:1], base_digest=first['digest'], full=False,
            changed=[], removed=['PCI:0000:82:00.0']))
    assert (fpga_rp, False) in asked
    assert not [rp for rp, in_transaction in asked if in_transaction]
    rows = inventory_db.host_providers(admin_context, HOST)
    assert [r['name'] for r in rows if r['gone']] == ['host1_0000:82:00.0']


def test_removed_device_without_allocation_goes_at_once(
        conf, db, admin_context, cn, placement):  # noqa: F811
    _report(conf, admin_context, cf.report(_devices()))
    _report(conf, admin_context, cf.report(_devices()[:1]))
    assert set(_tree(placement, cn)) == {'host1_0000:81:00.0'}
    assert _count(db, 'devices') == 1 and _count(db, 'attach_handles') == 1


def _engine_for(url):
    engine = sa.create_engine(url, poolclass=sa.pool.QueuePool,
                              pool_size=4)
    from oslo_db.sqlalchemy import exc_filters
    exc_filters.register_engine(engine)
    return engine


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_two_conductors_on_the_same_reports_agree(
        kind, conf, admin_context, cn, placement):  # noqa: F811
    hosts = ['host1', 'host2', 'host3']
    for host in hosts[1:]:
        requests.post(placement.url + '/resource_providers',
                      json={'name': host}, headers=pf.HEADERS, timeout=10)
    reports = {h: cf.report([cf.device(h, '0000:81:00.0'),
                             cf.device(h, '0000:82:00.0', num=2)])
               for h in hosts}
    with databases.throwaway_database(kind) as url:
        databases.create_schema(url)
        engine = _engine_for(url)
        undo = db_api.patch_engine(engine)
        try:
            errors = []
            # Both conductors start each report at the same moment.
            barrier = threading.Barrier(2, timeout=30)

            def conductor():
                try:
                    for _round in range(3):
                        for host, report in reports.items():
                            barrier.wait()
                            reply = _report(conf, admin_context, report,
                                            host)
                            assert reply['need_full'] is False
                except Exception as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)
            threads = [threading.Thread(target=conductor) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert errors == []
            assert _count(engine, 'hosts') == 3
            assert _count(engine, 'devices') == 6
            assert _count(engine, 'deployables') == 6
            assert _count(engine, 'attach_handles') == 6
            for host in hosts:
                cn_uuid = host_db.get(admin_context,
                                      host)['compute_rp_uuid']
                assert set(_tree(placement, cn_uuid)) == {
                    f'{host}_0000:81:00.0', f'{host}_0000:82:00.0'}
        finally:
            undo()
            engine.dispose()


def test_removal_leaves_no_orphans_without_foreign_key_enforcement(
        conf, admin_context, cn):
    # SQLite (the all-in-one) enforces ON DELETE CASCADE only when asked.
    engine = sa.create_engine('sqlite://', poolclass=sa.pool.StaticPool,
                              connect_args={'check_same_thread': False})
    models.Base.metadata.create_all(engine)
    undo = db_api.patch_engine(engine)
    try:
        _report(conf, admin_context, cf.report(_devices()))
        _report(conf, admin_context, cf.report(_devices()[:1]))
        counts = {t: _count(engine, t) for t in (
            'devices', 'controlpath_ids', 'deployables', 'attributes',
            'attach_handles')}
    finally:
        undo()
        engine.dispose()
    assert counts == {'devices': 1, 'controlpath_ids': 1, 'deployables': 1,
                      'attributes': 2, 'attach_handles': 1}


def test_compute_node_found_by_reported_name_else_by_host_name(
        conf, db, admin_context, cn, placement):  # noqa: F811
    # No provider has the FQDN the agent sends: the host name is next.
    report = cf.report(_devices())
    report['resource_provider_name'] = 'host1.example.org'
    _report(conf, admin_context, report)
    assert host_db.get(admin_context, HOST)['compute_rp_uuid'] == cn
    assert len(_tree(placement, cn)) == 2


def test_compute_node_named_by_the_agent_wins_over_the_host_name(
        conf, db, admin_context, cn, placement):  # noqa: F811
    resp = requests.post(placement.url + '/resource_providers',
                         json={'name': 'host1.example.org'},
                         headers=pf.HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    fqdn_uuid = resp.json()['uuid']
    report = cf.report(_devices())
    report['resource_provider_name'] = 'host1.example.org'
    _report(conf, admin_context, report)
    assert host_db.get(admin_context,
                       HOST)['compute_rp_uuid'] == fqdn_uuid
    assert len(_tree(placement, fqdn_uuid)) == 2
    assert _tree(placement, cn) == {}
