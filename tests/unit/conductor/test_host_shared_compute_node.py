"""Two host rows recording one compute node provider: a host renamed (its
``[DEFAULT]host`` changed, here in case only) before its old name was
forgotten reports its hardware anew under the new name, under the same
compute node, against the real (embedded) Placement on SQLite, MariaDB
and PostgreSQL.

Before, the new name's providers were offered beside the old name's:
Placement offered every device twice, and two instances could be given
one device.  Then the host recorded later was held and the one recorded
first offered: but the row made first may be the name that found the
compute node last, whose devices an instance of the other name uses.
Now every host on a shared compute node keeps every provider reserved
whole, its handles are neither taken nor exported, and a WARNING naming
them all says what to do; forgetting the stale name offers the other's
providers at once.  Who shares the compute node is read again after
each listing of a sync's re-pass: a host forgotten, or come, during a
sync leaves no stale reservation behind."""

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

# Two spellings of one host: nothing but the compute node they record
# makes them share it.
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
            if r.levelname == 'WARNING' and 'all record' in r.getMessage()]


def test_hosts_sharing_a_node_offer_nothing_until_one_is_forgotten(
        conf, engine, admin_context, placement, caplog):  # noqa: F811
    caplog.set_level('INFO', logger='cyborg')
    cn = _node(placement)
    _report(conf, OLD)
    assert _reserved(placement, cn, OLD) == _offered(placement, OLD)

    devices = _report(conf, NEW)

    # Nothing is offered twice, nor by the wrong name: nothing at all.
    assert _reserved(placement, cn, NEW) == _held(placement, NEW)
    assert _reserved(placement, cn, OLD) == _held(placement, OLD)
    assert _candidates(placement, cn) == set()
    assert host_db.get(admin_context, NEW)['placement_synced']
    assert host_db.get(admin_context, OLD)['placement_synced']
    # Each host's sync says it (the old name's, synced again when the
    # new one came), naming both and what to do.
    warnings = _shared_warnings(caplog)
    assert len(warnings) == 2
    for warning in warnings:
        assert f'Hosts {NEW}, {OLD} all record compute node provider ' \
            f'{cn}' in warning
        assert '"cyborg-manage host forget <stale name>"' in warning
        assert '[agent]resource_provider_name or [DEFAULT]host' in warning
    # Neither taken nor exported.
    new_ids = _deployable_ids(engine, NEW)
    old_ids = _deployable_ids(engine, OLD)
    assert [_take(i) for i in new_ids + old_ids] == [None] * 4
    assert set(_schedulable(NEW).values()) == {False}
    assert set(_schedulable(OLD).values()) == {False}
    for name in (OLD, NEW):
        (found,) = exports.host_inventories(admin_context, name)
        assert not [line for line in gres_conf.lines(found)
                    if not line.startswith('#')]

    # An unchanged report costs what it did: no Placement call (and a
    # reconcile holds both still, each saying so again).
    client = placement_client.get_client(conf)
    calls = client.calls
    for name in (OLD, NEW):
        inventory_apply.handle_report(conf, admin_context, name,
                                      cf.unchanged(_devices(name)))
    assert client.calls == calls
    caplog.clear()
    placement_sync.reconcile_all(conf, admin_context)
    assert _reserved(placement, cn, NEW) == _held(placement, NEW)
    assert _reserved(placement, cn, OLD) == _held(placement, OLD)
    assert len(_shared_warnings(caplog)) == 2

    _silent(engine, OLD)
    hosts.forget(conf, admin_context, OLD)

    # At once, with no reconcile: the new name is the only host there.
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


def test_a_host_recorded_earlier_that_finds_the_node_later_offers_nothing(
        conf, engine, admin_context, placement):  # noqa: F811
    """The old name's row was made while nova-compute had not made the
    compute node yet (no provider recorded); the new name, reporting
    after it was made, was offered, and an instance holds its GPU (its
    allocation, its handle).  The old name's next report finds the
    compute node: before, the old name, recorded first, offered every
    device whole, the GPU in use included.  Now its sync reserves the
    new name's providers at once, and its own stay reserved too."""
    _report(conf, OLD)
    assert host_db.get(admin_context, OLD)['compute_rp_uuid'] is None
    cn = _node(placement)
    _report(conf, NEW)
    assert _reserved(placement, cn, NEW) == _offered(placement, NEW)
    pf.hold_allocation(placement.url, '6c0ffee0-0000-4000-8000-00000000000a',
                       {inventory.provider_uuid(
                           f'{NEW}_{ADDRESSES[0]}'): {'PGPU': 2}})
    assert _take(_deployable_ids(engine, NEW)[0]) is not None

    _report(conf, OLD)

    assert _reserved(placement, cn, OLD) == _held(placement, OLD)
    assert _reserved(placement, cn, NEW) == _held(placement, NEW)
    assert _candidates(placement, cn) == set()
    assert [_take(i) for i in _deployable_ids(engine, OLD)] == [None, None]


def _during_first_pass(monkeypatch, host, action):
    """Run ``action`` once, when a sync of ``host`` reads its rows for its
    first pass: after it listed the tree and read who shares the compute
    node, before it writes."""
    real = placement_sync._desired
    fired = []

    def desired(context, hostname, *args, **kwargs):
        if hostname == host and not fired:
            fired.append(True)
            action()
        return real(context, hostname, *args, **kwargs)

    monkeypatch.setattr(placement_sync, '_desired', desired)
    return fired


def test_a_forget_during_a_sync_leaves_the_host_left_offered(
        conf, engine, admin_context, placement, monkeypatch):  # noqa: F811
    """Another conductor forgets the old name while the new name's
    reconcile is between its reads and its writes: the forget's sync
    offers the new name's providers, the reconcile's writes are
    overtaken, and its re-pass reads again who shares the node (no one
    now).  Before, it wrote them reserved again from what it read first,
    and the host stayed reserved, marked synced, until a reconcile."""
    cn = _node(placement)
    _report(conf, OLD)
    _report(conf, NEW)
    _silent(engine, OLD)
    fired = _during_first_pass(monkeypatch, NEW, lambda: hosts.forget(
        conf, cyborg_context.get_admin_context(), OLD))

    placement_sync.reconcile_host(conf, admin_context, NEW)

    assert fired
    assert host_db.get(admin_context, OLD) is None
    assert _reserved(placement, cn, NEW) == _offered(placement, NEW)
    assert host_db.get(admin_context, NEW)['placement_synced']


def test_a_host_coming_during_a_sync_leaves_nothing_offered(
        conf, engine, admin_context, placement, monkeypatch):  # noqa: F811
    """The old name finds the compute node while the new name's reconcile
    is between its reads and its writes: the old name's sync reserves
    the new name's providers, the reconcile's writes are overtaken, and
    its re-pass reads the old name there.  Before, it wrote them offered
    again from what it read first: the same hardware offered (by the
    old name, then recorded first) twice, the new name marked synced."""
    _report(conf, OLD)
    cn = _node(placement)
    _report(conf, NEW)
    fired = _during_first_pass(monkeypatch, NEW, lambda: _report(conf, OLD))

    placement_sync.reconcile_host(conf, admin_context, NEW)

    assert fired
    assert _reserved(placement, cn, NEW) == _held(placement, NEW)
    assert _reserved(placement, cn, OLD) == _held(placement, OLD)
    assert _candidates(placement, cn) == set()


@pytest.fixture(params=['mysql', 'postgresql'])
def locking_engine(request, conf):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def test_a_take_waits_for_no_host_row(locking_engine):
    """The sharing check reads the hosts in the free handle's SELECT,
    whose lock clause leaves its subqueries' rows alone: a take goes on
    while reports hold host rows (every one here), on a host alone on
    its compute node, and finds none of the hosts sharing one."""
    engine = locking_engine
    alone = 'compute-2'
    with engine.begin() as c:
        for name, cn in ((OLD, 'cn-shared'), (NEW, 'cn-shared'),
                         (alone, 'cn-alone')):
            c.execute(sa.insert(models.Host).values(
                hostname=name, compute_rp_uuid=cn,
                placement_synced=True, created_at=models._now()))
    seeded = [seed.seed_device(engine, hostname=name, handles=1)
              for name in (alone, OLD, NEW)]
    with engine.connect() as holder, holder.begin():
        holder.execute(sa.select(models.Host).with_for_update())
        holder.execute(sa.update(models.Host).values(
            last_report_at=models._now()))
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            taken = [pool.submit(_take, device.deployable_id)
                     for device in seeded]
            handles = [f.result(WAIT) for f in taken]
    assert handles[0] is not None and handles[1:] == [None, None]


# -- a standalone allocation (SQLite) ----------------------------------------

placement_url = seed.placement_url
fake_nova = recording_http.fake_nova
aconf = seed.bind_conf
ctx = seed.service_ctx


def _standalone(aconf, db, ctx, prefixes):
    """Host rows named by ``prefixes`` on one compute node provider, a
    device of the last one offered in Placement (its provider under that
    node, with an FPGA and a trait of its own), and an Initial ARQ whose
    profile asks for that trait: (client, device, ARQ uuid, names)."""
    trait = 'CUSTOM_T_' + uuidlib.uuid4().hex.upper()
    client = placement_client.get_client(aconf)
    compute = str(uuidlib.uuid4())
    client.create_provider(compute, 'node-' + trait, None)
    names = tuple(f'{prefix}-{trait.lower()}' for prefix in prefixes)
    for name in names:
        with db.begin() as c:
            c.execute(sa.insert(models.Host).values(
                hostname=name, compute_rp_uuid=compute,
                placement_synced=True, created_at=models._now()))
    device = seed.seed_device(db, hostname=names[-1], handles=1)
    client.create_provider(device.rp_uuid, device.name, compute)
    client.set_inventories(device.rp_uuid, {'FPGA': {'total': 1,
                                                     'max_unit': 1}})
    client.ensure_traits([trait])
    client.set_traits(device.rp_uuid, {'OWNER_CYBORG', trait})
    profile = seed.seed_profile(db, [{'resources:FPGA': '1',
                                      'trait:' + trait: 'required'}])
    (arq,) = [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]
    return client, device, arq, names


def test_a_standalone_allocation_is_not_bound_on_a_shared_node(
        aconf, db, ctx, placement_url, fake_nova):
    """Its claim landed on a provider of a host sharing its compute node
    that Placement still offered (an older conductor left it so): the
    bind is refused, naming the other host, and the claim released."""
    client, device, arq, (old, _new) = _standalone(aconf, db, ctx,
                                                   ('old', 'new'))

    with pytest.raises(exception.BindFailed) as refused:
        arq_allocation.allocate(aconf, ctx, arq, 'pod-1', 'k8s-pod')

    assert f'shares its compute node with host(s) {old}' in str(
        refused.value)
    assert seed.arq_rows(db)[arq].state == 'Initial'
    assert not client.get_allocations(device.rp_uuid)
    with db.connect() as c:
        assert not c.scalar(sa.select(sa.func.count()).where(
            models.AttachHandle.in_use.is_(True)))


def test_a_standalone_allocation_asks_about_sharing_only_when_refused(
        aconf, db, ctx, placement_url, fake_nova):
    """A bind that takes its handle reads whether its host shares its
    compute node only in the take's own SELECT
    (``attach_handles._OF_SHARED``): the host's sharers are read, to say
    why, only of a bind refused (``hosts.sharers``).  Before, every
    standalone allocation read them first."""
    _client, _device, arq, _names = _standalone(aconf, db, ctx, ('alone',))
    read = []

    def seen(conn, cursor, statement, *args):
        # hosts.sharers' (and, before, hosts.elder_of's) query.
        if 'FROM hosts AS other' in statement:
            read.append(statement)
    sa.event.listen(db, 'before_cursor_execute', seen)
    try:
        arq_allocation.allocate(aconf, ctx, arq, 'pod-1', 'k8s-pod')
    finally:
        sa.event.remove(db, 'before_cursor_execute', seen)

    assert seed.arq_rows(db)[arq].state == 'Bound'
    assert read == []
