"""Device lifecycle: the status new devices start in, enabling through the
agent's preparation step, and the device notifications of reports; a
database, the real (embedded) Placement, a real RPC client over fake://."""

import time

import pytest
import requests
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import rpc
from cyborg.conductor import device_status, inventory_apply, manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.objects import inventory
from cyborg.placement import client as placement_client
from tests.fixtures import conductor as cf
from tests.fixtures import placement as pf
from tests.fixtures import notifications as notification_fixture
from tests.fixtures.placement import placement  # noqa: F401
from tests.unit.conductor import agent_endpoint

HOST = 'host1'
FPGA_KEY = 'PCI:0000:82:00.0'
FPGA = 'host1_0000:82:00.0'
FPGA_DEV = inventory.row_uuid(HOST, FPGA_KEY)


def _devices(extra=()):
    return [cf.device(HOST, '0000:81:00.0'),
            cf.device(HOST, '0000:82:00.0', dev_type='FPGA', rc='FPGA',
                      num=4)] + list(extra)


@pytest.fixture
def pconf(conf, db, placement):  # noqa: F811
    pf.placement_conf(conf, placement.url)
    placement_client.reset_clients()
    requests.post(placement.url + '/resource_providers', json={'name': HOST},
                  headers=pf.HEADERS, timeout=10)
    return conf


@pytest.fixture
def notifications(pconf):
    with notification_fixture.published(pconf) as published:
        yield lambda: [(n[1]['event_type'],
                        n[1]['payload']['cyborg_object.data'])
                       for n in published()]


def _reserved(placement, name):  # noqa: F811
    rp = inventory.provider_uuid(name)
    invs = requests.get(f'{placement.url}/resource_providers/{rp}/'
                        'inventories', headers=pf.HEADERS,
                        timeout=10).json()['inventories']
    (inv,) = invs.values()
    return inv['reserved']


def _statuses(engine):
    d = models.Device.__table__
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(d.c.uuid, d.c.status)).all())


def _maintaining_host(conf, ctx):
    conf.set_override('new_device_status', 'maintaining', group='conductor')
    inventory_apply.handle_report(conf, ctx, HOST, cf.report(_devices()))


def test_new_devices_start_maintaining_when_asked_and_keep_their_status(
        pconf, db, admin_context, placement):  # noqa: F811
    _maintaining_host(pconf, admin_context)
    assert set(_statuses(db).values()) == {'maintaining'}
    assert _reserved(placement, FPGA) == 4
    with agent_endpoint.serving(pconf, HOST,
                                agent_endpoint.RecordingAgent()):
        device_status.set_status(pconf, admin_context, FPGA_DEV, 'enabled')
    # A later report keeps the admin's choice; only the new device waits.
    extra = cf.device(HOST, '0000:83:00.0')
    inventory_apply.handle_report(pconf, admin_context, HOST,
                                  cf.report(_devices([extra])))
    statuses = _statuses(db)
    assert statuses[FPGA_DEV] == 'enabled'
    assert statuses[inventory.row_uuid(HOST, 'PCI:0000:83:00.0')] == \
        'maintaining'
    assert _reserved(placement, FPGA) == 0


def test_enabling_prepares_the_device_first_and_notifies(
        pconf, db, admin_context, placement, notifications):  # noqa: F811
    _maintaining_host(pconf, admin_context)
    agent = agent_endpoint.RecordingAgent()
    with agent_endpoint.serving(pconf, HOST, agent):
        device = device_status.set_status(pconf, admin_context, FPGA_DEV,
                                          'enabled')
        # Disabling needs no preparation; enabling twice no second one.
        device_status.set_status(pconf, admin_context, FPGA_DEV,
                                 'maintaining')
    assert device['status'] == 'enabled'
    assert agent.prepared == [FPGA_KEY]
    changes = [d for e, d in notifications()
               if e == 'device.status_change']
    assert [(d['old_status'], d['status']) for d in changes] == [
        ('maintaining', 'enabled'), ('enabled', 'maintaining')]
    assert changes[0]['device_uuid'] == FPGA_DEV
    assert changes[0]['cpid_info'] == '0000:82:00.0'
    assert [d['name'] for d in changes[0]['deployables']] == [FPGA]


def test_a_failed_preparation_leaves_the_device_maintaining(
        pconf, db, admin_context, placement, notifications):  # noqa: F811
    _maintaining_host(pconf, admin_context)
    agent = agent_endpoint.RecordingAgent(
        prepare_error=RuntimeError('flash write failed'))
    with agent_endpoint.serving(pconf, HOST, agent):
        with pytest.raises(exception.Conflict,
                           match='flash write failed') as caught:
            device_status.set_status(pconf, admin_context, FPGA_DEV,
                                     'enabled')
    assert caught.value.code == 409
    assert 'Traceback' not in str(caught.value)
    assert _statuses(db)[FPGA_DEV] == 'maintaining'
    assert _reserved(placement, FPGA) == 4
    assert not [e for e, _d in notifications()
                if e == 'device.status_change']


def test_an_agent_that_does_not_answer_is_a_503_and_changes_nothing(
        pconf, db, admin_context, placement):  # noqa: F811
    _maintaining_host(pconf, admin_context)
    with agent_endpoint.serving(pconf, HOST, None):
        # Register the RPC client options on this conf, then shorten.
        rpc.get_client(pconf, 'cyborg-agent', '1.1')
        pconf.set_override('rpc_response_timeout', 2)
        assert device_status.prepare_timeout(pconf) == 1
        started = time.monotonic()
        with pytest.raises(exception.ServiceUnavailable,
                           match='did not prepare') as caught:
            device_status.set_status(pconf, admin_context, FPGA_DEV,
                                     'enabled')
    assert time.monotonic() - started < 10
    assert caught.value.code == 503
    assert _statuses(db)[FPGA_DEV] == 'maintaining'
    assert _reserved(placement, FPGA) == 4


def test_prepare_timeout_stays_below_the_callers_timeout(conf):
    # The API waits [api]conductor_timeout (20 s) for us: the agent gets
    # half of it, not the 30 s an RPC timeout of 60 s would allow.
    assert conf.api.conductor_timeout == 20
    assert device_status.prepare_timeout(conf) == 10
    # What the API sends (RPC 1.6) wins over our own copy of its option.
    assert device_status.prepare_timeout(conf, wait=8) == 4
    assert device_status.prepare_timeout(conf, wait=1) == 1
    conf.set_override('conductor_timeout', 300, 'api')
    assert device_status.prepare_timeout(conf) == \
        device_status.PREPARE_TIMEOUT


def test_the_api_gets_the_agents_timeout_before_its_own(
        pconf, db, admin_context, placement):  # noqa: F811
    """Through the real RPC client and conductor endpoint: an API waiting
    4 s, with no agent to prepare the device, gets the conductor's 503
    naming the agent, not a timeout of its own."""
    _maintaining_host(pconf, admin_context)
    with agent_endpoint.serving(pconf, HOST, None):
        server = rpc.get_server(pconf, conductor_rpcapi.TOPIC, 'conductor',
                                [manager.ConductorManager(pconf, 'c')])
        server.start()
        try:
            api = conductor_rpcapi.ConductorAPI(pconf, timeout=4)
            started = time.monotonic()
            with pytest.raises(exception.ServiceUnavailable,
                               match='did not prepare .* within 2 s'):
                api.device_set_status(admin_context, FPGA_DEV, 'enabled',
                                      wait=4)
            assert time.monotonic() - started < 4
        finally:
            server.stop()
            server.wait()
    assert _statuses(db)[FPGA_DEV] == 'maintaining'


def test_reports_notify_devices_added_and_removed(
        pconf, db, admin_context, notifications):
    inventory_apply.handle_report(pconf, admin_context, HOST,
                                  cf.report(_devices()))
    added = [d for e, d in notifications() if e == 'device.add']
    assert sorted(d['cpid_info'] for d in added) == ['0000:81:00.0',
                                                     '0000:82:00.0']
    fpga = next(d for d in added if d['cpid_info'] == '0000:82:00.0')
    assert (fpga['host'], fpga['device_uuid'], fpga['type'],
            fpga['status']) == (HOST, FPGA_DEV, 'FPGA', 'enabled')
    assert [(d['name'], d['num_accelerators'])
            for d in fpga['deployables']] == [(FPGA, 4)]
    inventory_apply.handle_report(pconf, admin_context, HOST,
                                  cf.report(_devices()[:1]))
    removed = [d for e, d in notifications() if e == 'device.remove']
    assert [(d['device_uuid'], d['type'], d['cpid_info'])
            for d in removed] == [(FPGA_DEV, 'FPGA', '0000:82:00.0')]
    assert [d['name'] for d in removed[0]['deployables']] == [FPGA]
    # An unchanged report says nothing.
    count = len(notifications())
    inventory_apply.handle_report(pconf, admin_context, HOST,
                                  cf.unchanged(_devices()[:1]))
    assert len(notifications()) == count


def _report_seconds(kind):
    return metrics.REGISTRY.get_sample_value(
        'cyborg_conductor_report_seconds_count', {'kind': kind}) or 0


def test_report_handling_is_timed_by_kind(pconf, db, admin_context):
    before = {k: _report_seconds(k) for k in ('full', 'delta', 'unchanged')}
    first = inventory_apply.handle_report(pconf, admin_context, HOST,
                                          cf.report(_devices()))
    extra = _devices([cf.device(HOST, '0000:83:00.0')])
    inventory_apply.handle_report(pconf, admin_context, HOST, cf.report(
        extra, base_digest=first['digest'], full=False, changed=extra[2:]))
    inventory_apply.handle_report(pconf, admin_context, HOST,
                                  cf.unchanged(extra))
    assert {k: _report_seconds(k) - v for k, v in before.items()} == {
        'full': 1, 'delta': 1, 'unchanged': 1}
