"""Forgetting a retired host (``cyborg-manage host forget``), against the
real (embedded) Placement: a silent host goes with its rows and its
providers; one that reports, or whose devices an ARQ or an allocation
holds, stays as it was.  Before, nothing removed a host: a retired one
stayed silent (the alert fired for ever), its devices listed and its
providers in Placement."""

import concurrent.futures
import datetime
import uuid as uuidlib

import oslo_messaging as messaging
import pytest
import requests
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conductor import hosts
from cyborg.conductor import inventory_apply
from cyborg.conductor import manager
from cyborg.db import models
from cyborg.db.api import hosts as host_db
from cyborg.objects import inventory
from tests.fixtures import arqs as seed
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf
from tests.fixtures.placement import placement  # noqa: F401

HOST, OTHER = 'retired-1', 'busy-1'
GPU = f'{HOST}_0000:81:00.0'
FPGA = f'{HOST}_0000:82:00.0'
CONSUMER = '0f6f5b7e-8d4c-4e59-a3c1-2b8e3c1d9a01'


def _devices(host):
    return [cf.device(host, '0000:81:00.0', handles=2),
            cf.device(host, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                      num=4)]


def _compute_node(placement, name):  # noqa: F811
    return requests.post(placement.url + '/resource_providers',
                         json={'name': name}, headers=pf.HEADERS,
                         timeout=10).json()['uuid']


@pytest.fixture
def reported(conf, db, admin_context, placement):  # noqa: F811
    """Two hosts, each with its compute node and two devices, reported
    and synced; returns their compute node provider uuids."""
    pf.placement_conf(conf, placement.url)
    nodes = {}
    for host in (HOST, OTHER):
        nodes[host] = _compute_node(placement, host)
        inventory_apply.handle_report(conf, admin_context, host,
                                      cf.report(_devices(host)))
    return nodes


def _silent(db, host=HOST):
    """Make ``host`` last report long ago (its agent stopped)."""
    with db.begin() as c:
        c.execute(sa.update(models.Host).where(
            models.Host.hostname == host).values(
                last_report_at=models._now() - datetime.timedelta(hours=1)))


def _rows(db, host=HOST):
    """How many rows of each inventory table belong to ``host``."""
    d, dep = models.Device, models.Deployable
    with db.connect() as c:
        device_ids = sa.select(d.id).where(d.hostname == host)
        deployable_ids = sa.select(dep.id).where(
            dep.device_id.in_(device_ids))
        counts = {'hosts': c.scalar(sa.select(sa.func.count()).where(
            models.Host.hostname == host))}
        for name, model, column, parents in (
                ('devices', d, d.hostname, None),
                ('controlpath_ids', models.ControlpathID,
                 models.ControlpathID.device_id, device_ids),
                ('deployables', dep, dep.device_id, device_ids),
                ('attributes', models.Attribute,
                 models.Attribute.deployable_id, deployable_ids),
                ('attach_handles', models.AttachHandle,
                 models.AttachHandle.deployable_id, deployable_ids)):
            where = (column == host) if parents is None \
                else column.in_(parents)
            counts[name] = c.scalar(
                sa.select(sa.func.count()).select_from(model).where(where))
        return counts


def _tree(placement, cn):  # noqa: F811
    return {rp['name'] for rp in requests.get(
        f'{placement.url}/resource_providers?in_tree={cn}',
        headers=pf.HEADERS, timeout=10).json()['resource_providers']
        if rp['uuid'] != cn}


def _kept(db, placement, reported):  # noqa: F811
    """The retired host and its providers are all still there."""
    assert _rows(db) == {'hosts': 1, 'devices': 2, 'controlpath_ids': 2,
                         'deployables': 2, 'attributes': 2,
                         'attach_handles': 3}
    assert _tree(placement, reported[HOST]) == {GPU, FPGA}


def test_a_silent_host_is_forgotten_with_its_rows_and_providers(
        conf, db, admin_context, reported, placement):  # noqa: F811
    _silent(db)
    listed = {h['hostname']: h for h in hosts.list_hosts(conf,
                                                         admin_context)}
    assert listed[HOST]['silent'] and not listed[OTHER]['silent']
    assert listed[HOST]['devices'] == 2
    # What cyborg_conductor_silent_hosts (CyborgSilentHosts) counts.
    since = models._now() - datetime.timedelta(minutes=1)
    assert host_db.count_reporting(admin_context, since) == (2, 1)

    done = manager.ConductorManager(conf, 'c1').host_forget(
        admin_context, HOST)

    assert done == {'devices': 2, 'deployables': 2, 'attach_handles': 3,
                    'providers': 2}
    assert set(_rows(db).values()) == {0}
    assert _tree(placement, reported[HOST]) == set()
    # The compute node is Nova's; the other host is untouched.
    assert requests.get(
        f'{placement.url}/resource_providers/{reported[HOST]}',
        headers=pf.HEADERS, timeout=10).status_code == 200
    assert _rows(db, OTHER)['devices'] == 2
    assert _tree(placement, reported[OTHER]) == {
        f'{OTHER}_0000:81:00.0', f'{OTHER}_0000:82:00.0'}
    assert [h['hostname'] for h in hosts.list_hosts(
        conf, admin_context)] == [OTHER]
    assert host_db.count_reporting(admin_context, since) == (1, 0)


def test_a_host_that_reports_is_not_forgotten(
        conf, db, admin_context, reported, placement):  # noqa: F811
    with pytest.raises(messaging.ExpectedException) as caught:
        manager.ConductorManager(conf, 'c1').host_forget(admin_context,
                                                         HOST)
    refusal = caught.value.exc_info[1]
    assert isinstance(refusal, exception.Conflict)
    assert 'its agent runs' in str(refusal)
    assert 'Stop cyborg-agent on retired-1' in str(refusal)
    _kept(db, placement, reported)


def test_an_unknown_host_is_not_found(conf, db, admin_context,
                                      reported):
    _silent(db)
    for name in ('nowhere', HOST.upper(), HOST + ' '):
        with pytest.raises(exception.NotFound):
            hosts.forget(conf, admin_context, name)
    assert _rows(db)['devices'] == 2


def _bind(db, host=HOST):
    """An ARQ Bound to one of the host's handles, as a bind leaves it."""
    return seed.bound_arq(db, GPU, 'PGPU', host, CONSUMER,
                          device_rp_uuid=inventory.provider_uuid(GPU))


def test_a_host_whose_device_an_arq_holds_is_not_forgotten(
        conf, db, admin_context, reported, placement):  # noqa: F811
    _silent(db)
    arq = _bind(db)
    with pytest.raises(exception.Conflict) as caught:
        hosts.forget(conf, admin_context, HOST)
    assert arq in str(caught.value)
    assert '1 attach handle(s) in use' in str(caught.value)
    _kept(db, placement, reported)


def _allocate(placement, name, amount=1):  # noqa: F811
    pf.hold_allocation(placement.url, CONSUMER,
                       {inventory.provider_uuid(name): {'PGPU': amount}}
                       if amount else {})


def test_a_host_placement_holds_allocations_on_is_not_forgotten(
        conf, db, admin_context, reported, placement):  # noqa: F811
    """An instance still placed there (Nova scheduled it, or evacuated it
    and has not cleaned up): its allocation names the consumer."""
    _silent(db)
    _allocate(placement, GPU)
    with pytest.raises(exception.Conflict) as caught:
        hosts.forget(conf, admin_context, HOST)
    assert CONSUMER in str(caught.value)
    assert GPU in str(caught.value)
    _kept(db, placement, reported)

    _allocate(placement, GPU, 0)
    hosts.forget(conf, admin_context, HOST)
    assert set(_rows(db).values()) == {0}


def test_an_allocation_made_meanwhile_keeps_its_provider_until_forgotten_again(
        conf, db, admin_context, reported, placement):  # noqa: F811
    """An allocation that lands after the check: Placement refuses to
    delete that provider, which is kept reserved whole; the rows are gone
    and the host's row stays, so that forgetting it again, once the
    allocation is released, finishes the job."""
    _silent(db)
    rp = inventory.provider_uuid(GPU)
    with pf.held(conf, placement.url, 'DELETE',
                 f'/resource_providers/{rp}') as gate:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            forgetting = pool.submit(hosts.forget, conf, admin_context,
                                     HOST)
            assert gate.arrived.wait(30)
            _allocate(placement, GPU)
            gate.go.set()
            with pytest.raises(exception.Conflict) as caught:
                forgetting.result(30)
    assert rp in str(caught.value)
    assert _rows(db)['hosts'] == 1 and _rows(db)['devices'] == 0
    assert _tree(placement, reported[HOST]) == {GPU}
    inventories = requests.get(
        f'{placement.url}/resource_providers/{rp}/inventories',
        headers=pf.HEADERS, timeout=10).json()['inventories']
    assert inventories['PGPU']['reserved'] == inventories['PGPU']['total']

    _allocate(placement, GPU, 0)
    assert hosts.forget(conf, admin_context, HOST)['providers'] == 1
    assert set(_rows(db).values()) == {0}
    assert _tree(placement, reported[HOST]) == set()


def test_placement_away_changes_nothing(conf, db, admin_context, reported,
                                        placement):  # noqa: F811
    _silent(db)
    placement.stop()
    with pytest.raises(exception.PlacementError):
        hosts.forget(conf, admin_context, HOST)
    assert _rows(db)['devices'] == 2


def test_only_orphans_under_the_compute_node_go_with_the_host(
        conf, db, admin_context, reported, placement):  # noqa: F811
    """A provider cyborg owns under the host's compute node that no
    deployable explains (left behind) goes too; one a deployable of
    another host explains (a host renamed in case only shares its
    compute node with the old spelling) stays."""
    cn = reported[HOST]
    orphan = str(uuidlib.uuid4())
    sibling = 'Retired-1_0000:81:00.0'
    for rp_uuid, name in ((orphan, 'left-behind'),
                          (inventory.provider_uuid(sibling), sibling)):
        resp = requests.post(placement.url + '/resource_providers', json={
            'uuid': rp_uuid, 'name': name, 'parent_provider_uuid': cn},
            headers=pf.HEADERS, timeout=10)
        assert resp.status_code == 200, resp.text
        resp = requests.put(
            f'{placement.url}/resource_providers/{rp_uuid}/traits',
            json={'resource_provider_generation': 0,
                  'traits': ['OWNER_CYBORG']},
            headers=pf.HEADERS, timeout=10)
        assert resp.status_code == 200, resp.text
    seed.seed_device(db, hostname='Retired-1', handles=1, name=sibling)
    _silent(db)
    assert hosts.forget(conf, admin_context, HOST)['providers'] == 3
    assert _tree(placement, cn) == {sibling}


def test_a_host_forgotten_that_reports_again_comes_back_as_new(
        conf, db, admin_context, reported, placement):  # noqa: F811
    digest = host_db.get(admin_context, HOST)['report_digest']
    _silent(db)
    hosts.forget(conf, admin_context, HOST)
    # The agent restarted with its cache: a delta from the digest it had
    # acknowledged is asked for in full, and the full report is stored.
    reply = inventory_apply.handle_report(conf, admin_context, HOST, {
        'digest': digest, 'base_digest': digest, 'full': False,
        'devices': [], 'removed': []})
    assert reply['need_full'] is True
    reply = inventory_apply.handle_report(conf, admin_context, HOST,
                                          cf.report(_devices(HOST)))
    assert reply['need_full'] is False
    assert _rows(db)['devices'] == 2
    assert _tree(placement, reported[HOST]) == {GPU, FPGA}
    assert not next(h for h in hosts.list_hosts(conf, admin_context)
                    if h['hostname'] == HOST)['silent']


def test_a_report_while_the_host_is_forgotten_keeps_it(
        conf, db, admin_context, reported, placement):  # noqa: F811
    """Its agent came back between the checks and the deletes: the host
    stays (the agent's next report brings its devices back)."""
    _silent(db)
    rp = inventory.provider_uuid(GPU)
    with pf.held(conf, placement.url, 'GET',
                 f'/resource_providers/{rp}/allocations') as gate:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            forgetting = pool.submit(hosts.forget, conf, admin_context,
                                     HOST)
            assert gate.arrived.wait(30)
            # The agent reports meanwhile.
            with db.begin() as c:
                c.execute(sa.update(models.Host).where(
                    models.Host.hostname == HOST).values(
                        last_report_at=models._now()))
            gate.go.set()
            with pytest.raises(exception.Conflict) as caught:
                forgetting.result(30)
    assert 'reported while the host was being forgotten' in str(
        caught.value)
    _kept(db, placement, reported)
