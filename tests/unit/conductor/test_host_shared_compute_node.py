"""Two host rows recording one compute node provider: a host renamed (its
``[DEFAULT]host`` changed, here in case only) before its old name was
forgotten reports its hardware anew under the new name, under the same
compute node, against the real (embedded) Placement on SQLite, MariaDB
and PostgreSQL.

Before, the new name's providers were offered beside the old name's:
Placement offered every device twice, and two instances could be given
one device.  The host recorded later (the newcomer) now keeps every
provider reserved whole, its handles are neither taken nor exported,
and a WARNING says what to do; forgetting the old name offers the
newcomer's providers at once."""

import concurrent.futures
import datetime
import uuid as uuidlib

import pytest
import requests
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import arq_allocation
from cyborg.conductor import arq_binding
from cyborg.conductor import hosts
from cyborg.conductor import inventory_apply
from cyborg.conductor import placement_sync
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import attach_handles as handle_db
from cyborg.db.api import hosts as host_db
from cyborg.exports import gres_conf
from cyborg.objects import exports
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf
from tests.fixtures import recording_http
from tests.fixtures.placement import placement  # noqa: F401

# The new spelling sorts before the old one: the order the rows were
# recorded in decides, not their names.
OLD, NEW = 'compute-1', 'Compute-1'
NODE = 'compute-1.example.org'
ADDRESSES = ('0000:81:00.0', '0000:82:00.0')
WAIT = 30


@pytest.fixture(params=databases.KINDS)
def engine(request, conf, placement):  # noqa: F811
    pf.placement_conf(conf, placement.url)
    if request.param == 'sqlite':
        yield request.getfixturevalue('db')
        return
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _node(placement, name=NODE):  # noqa: F811
    """The compute node provider nova-compute makes."""
    resp = requests.post(placement.url + '/resource_providers',
                         json={'name': name}, headers=pf.HEADERS,
                         timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()['uuid']


def _devices(host):
    return [cf.device(host, address, num=2) for address in ADDRESSES]


def _report(conf, host):
    report = cf.report(_devices(host))
    report['resource_provider_name'] = NODE
    reply = inventory_apply.handle_report(
        conf, cyborg_context.get_admin_context(), host, report)
    assert reply['need_full'] is False
    return report


def _get(placement, path):  # noqa: F811
    resp = requests.get(placement.url + path, headers=pf.HEADERS, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _reserved(placement, cn, host):  # noqa: F811
    """{provider name: (total, reserved)} of ``host``'s providers under
    the compute node ``cn``."""
    found = {}
    for rp in _get(placement, f'/resource_providers?in_tree={cn}')[
            'resource_providers']:
        if not rp['name'].startswith(host + '_'):
            continue
        assert rp['parent_provider_uuid'] == cn
        pgpu = _get(placement, f"/resource_providers/{rp['uuid']}/"
                               f"inventories")['inventories']['PGPU']
        found[rp['name']] = (pgpu['total'], pgpu['reserved'])
    return found


def _offered(placement, host):  # noqa: F811
    return {f'{host}_{address}': (2, 0) for address in ADDRESSES}


def _held(placement, host):  # noqa: F811
    return {f'{host}_{address}': (2, 2) for address in ADDRESSES}


def _candidates(placement, cn):  # noqa: F811
    """The names of the providers Placement offers one PGPU from."""
    names = {rp['uuid']: rp['name'] for rp in _get(
        placement, f'/resource_providers?in_tree={cn}')[
            'resource_providers']}
    return {names[rp] for request in _get(
        placement, '/allocation_candidates?resources=PGPU:1')[
            'allocation_requests'] for rp in request['allocations']}


def _deployable_ids(engine, host):
    d, dep = models.Device, models.Deployable
    with engine.connect() as c:
        return list(c.scalars(sa.select(dep.id).join(
            d, d.id == dep.device_id).where(d.hostname == host)
            .order_by(dep.id)))


def _take(deployable_id):
    context = cyborg_context.get_admin_context()
    return db_api.write_retrying(context, handle_db.take, context,
                                 deployable_id)


def _schedulable(host):
    """{deployable name: schedulable} as the exports see them."""
    (found,) = exports.host_inventories(cyborg_context.get_admin_context(),
                                        host)
    return {d.name: d.schedulable for device in found.devices
            for d in device.deployables}


def _silent(engine, host):
    with engine.begin() as c:
        c.execute(sa.update(models.Host).where(
            models.Host.hostname == host).values(
                last_report_at=models._now() - datetime.timedelta(hours=1)))


def _shared_warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.levelname == 'WARNING' and 'records too' in r.getMessage()]


def test_the_newcomer_is_held_until_the_old_name_is_forgotten(
        conf, engine, admin_context, placement, caplog):  # noqa: F811
    caplog.set_level('INFO', logger='cyborg')
    cn = _node(placement)
    _report(conf, OLD)
    assert _reserved(placement, cn, OLD) == _offered(placement, OLD)

    devices = _report(conf, NEW)

    # The hardware is offered once: by the old name's providers.
    assert _reserved(placement, cn, NEW) == _held(placement, NEW)
    assert _reserved(placement, cn, OLD) == _offered(placement, OLD)
    assert _candidates(placement, cn) == set(_offered(placement, OLD))
    assert host_db.get(admin_context, NEW)['placement_synced']
    (warning,) = _shared_warnings(caplog)
    assert f'host {OLD}, recorded earlier' in warning
    assert f'{NEW} keeps its providers reserved whole' in warning
    assert f'"cyborg-manage host forget {OLD}"' in warning
    # Neither taken nor exported.
    new_ids = _deployable_ids(engine, NEW)
    assert [_take(i) for i in new_ids] == [None, None]
    assert set(_schedulable(NEW).values()) == {False}
    assert set(_schedulable(OLD).values()) == {True}
    (inventory_new,) = exports.host_inventories(admin_context, NEW)
    assert not [line for line in gres_conf.lines(inventory_new)
                if not line.startswith('#')]

    # An unchanged report of the newcomer costs what it did: no
    # Placement call (and a reconcile holds it still, saying so again).
    client = placement_client.get_client(conf)
    calls = client.calls
    inventory_apply.handle_report(conf, admin_context, NEW,
                                  cf.unchanged(_devices(NEW)))
    assert client.calls == calls
    caplog.clear()
    placement_sync.reconcile_all(conf, admin_context)
    assert _reserved(placement, cn, NEW) == _held(placement, NEW)
    assert len(_shared_warnings(caplog)) == 1

    _silent(engine, OLD)
    hosts.forget(conf, admin_context, OLD)

    # At once, with no reconcile: the newcomer is the only host there.
    assert _reserved(placement, cn, OLD) == {}
    assert _reserved(placement, cn, NEW) == _offered(placement, NEW)
    assert _candidates(placement, cn) == set(_offered(placement, NEW))
    assert host_db.get(admin_context, NEW)['placement_synced']
    assert set(_schedulable(NEW).values()) == {True}
    assert _take(new_ids[0]) is not None
    assert devices['digest'] == host_db.get(admin_context,
                                            NEW)['report_digest']


class _Refusing(pf.Gate):
    """Placement behind a proxy that answers 503 to (method, path): away
    for that call alone."""

    def _forward(self, request):
        if (request.method, request.path) == (self.method, self.path):
            return 503, {'Content-Type': 'application/json'}, {
                'errors': [{'status': 503, 'title': 'Service Unavailable',
                            'detail': 'away'}]}
        return super()._forward(request)


def test_a_forget_whose_sync_fails_leaves_the_newcomer_to_the_reconcile(
        conf, engine, admin_context, placement):  # noqa: F811
    cn = _node(placement)
    _report(conf, OLD)
    _report(conf, NEW)
    _silent(engine, OLD)
    # The newcomer's sync, which compares every provider, cannot read
    # this one: it fails, after the old name is gone.
    rp = inventory.provider_uuid(f'{NEW}_{ADDRESSES[0]}')
    proxy = _Refusing(placement.url, 'GET',
                      f'/resource_providers/{rp}/inventories')
    with proxy.server:
        pf.placement_conf(conf, proxy.server.url)
        hosts.forget(conf, admin_context, OLD)
    pf.placement_conf(conf, placement.url)
    assert host_db.get(admin_context, OLD) is None
    assert not host_db.get(admin_context, NEW)['placement_synced']
    assert _reserved(placement, cn, NEW)[f'{NEW}_{ADDRESSES[0]}'] == (2, 2)

    placement_sync.reconcile_all(conf, admin_context)
    assert _reserved(placement, cn, NEW) == _offered(placement, NEW)
    assert host_db.get(admin_context, NEW)['placement_synced']


def test_a_host_recorded_earlier_that_finds_the_node_later_holds_the_other(
        conf, engine, admin_context, placement):  # noqa: F811
    """The old name reported while nova-compute had not made the compute
    node yet (no provider recorded); the new name, reporting after it
    was made, was offered.  The old name's next report finds it, and
    its sync reserves the new name's providers at once, before it offers
    its own."""
    _report(conf, OLD)
    assert host_db.get(admin_context, OLD)['compute_rp_uuid'] is None
    cn = _node(placement)
    _report(conf, NEW)
    assert _reserved(placement, cn, NEW) == _offered(placement, NEW)

    _report(conf, OLD)

    assert _reserved(placement, cn, OLD) == _offered(placement, OLD)
    assert _reserved(placement, cn, NEW) == _held(placement, NEW)
    assert _candidates(placement, cn) == set(_offered(placement, OLD))


@pytest.fixture(params=['mysql', 'postgresql'])
def locking_engine(request, conf):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def test_a_take_waits_for_no_host_row(locking_engine):
    """The newcomer check reads the hosts in the free handle's SELECT,
    whose lock clause leaves its subqueries' rows alone: a take goes on
    while reports hold host rows (every one here), on the old name's
    handles, and finds none of the newcomer's."""
    engine = locking_engine
    with engine.begin() as c:
        for name in (OLD, NEW):
            c.execute(sa.insert(models.Host).values(
                hostname=name, compute_rp_uuid='cn-shared',
                placement_synced=True, created_at=models._now()))
    old = seed.seed_device(engine, hostname=OLD, handles=1)
    new = seed.seed_device(engine, hostname=NEW, handles=1)
    with engine.connect() as holder, holder.begin():
        holder.execute(sa.select(models.Host).with_for_update())
        holder.execute(sa.update(models.Host).values(
            last_report_at=models._now()))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            taken = [pool.submit(_take, seeded.deployable_id)
                     for seeded in (old, new)]
            old_handle, new_handle = [f.result(WAIT) for f in taken]
    assert old_handle is not None and new_handle is None


# -- a standalone allocation (SQLite) ----------------------------------------

placement_url = seed.placement_url
fake_nova = recording_http.fake_nova
aconf = seed.bind_conf
ctx = seed.service_ctx


def test_a_standalone_allocation_is_not_bound_on_a_newcomer(
        aconf, db, ctx, placement_url, fake_nova):
    """Its claim landed on a newcomer's provider that Placement still
    offered (an older conductor left it so): the bind is refused, naming
    the host recorded first, and the claim released."""
    trait = 'CUSTOM_T_' + uuidlib.uuid4().hex.upper()
    client = placement_client.get_client(aconf)
    compute = str(uuidlib.uuid4())
    client.create_provider(compute, 'node-' + trait, None)
    old, new = 'old-' + trait.lower(), 'new-' + trait.lower()
    for name in (old, new):
        with db.begin() as c:
            c.execute(sa.insert(models.Host).values(
                hostname=name, compute_rp_uuid=compute,
                placement_synced=True, created_at=models._now()))
    device = seed.seed_device(db, hostname=new, handles=1)
    client.create_provider(device.rp_uuid, device.name, compute)
    client.set_inventories(device.rp_uuid, {'FPGA': {'total': 1,
                                                     'max_unit': 1}})
    client.ensure_traits([trait])
    client.set_traits(device.rp_uuid, {'OWNER_CYBORG', trait})
    profile = seed.seed_profile(db, [{'resources:FPGA': '1',
                                      'trait:' + trait: 'required'}])
    (arq,) = [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]

    with pytest.raises(exception.BindFailed) as refused:
        arq_allocation.allocate(aconf, ctx, arq, 'pod-1', 'k8s-pod')

    assert f'shares its compute node with host {old}' in str(refused.value)
    assert seed.arq_rows(db)[arq].state == 'Initial'
    assert not client.get_allocations(device.rp_uuid)
    with db.connect() as c:
        assert not c.scalar(sa.select(sa.func.count()).where(
            models.AttachHandle.in_use.is_(True)))
