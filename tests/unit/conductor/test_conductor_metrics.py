"""The conductor's metrics: bind latency, Placement and Nova requests, and
the scrape-time counts read from a real (SQLite) database."""

import datetime
import uuid as uuidlib

import prometheus_client as prom
from prometheus_client import parser
import pytest
import requests
import sqlalchemy as sa

from cyborg.cmd import conductor as conductor_cmd
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import metrics
from cyborg.common import states
from cyborg.conductor import arq_binding, metrics_collector, nova
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import placement_releases as release_db
from cyborg.placement import client as placement_client
from tests.fixtures import arqs as seed
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http
from tests.fixtures import processes

placement_url = seed.placement_url
fake_nova = recording_http.fake_nova
glance = recording_http.fake_glance


def _value(name, labels=None):
    return metrics.REGISTRY.get_sample_value(name, labels or {}) or 0


@pytest.fixture
def mconf(conf, db, placement_url, fake_nova):
    placement_fixture.placement_conf(conf, placement_url)
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', fake_nova.url, group='nova')
    placement_client.reset_clients()
    yield conf
    placement_client.reset_clients()


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


def _arqs(db, ctx, count, extra=None):
    profile = seed.seed_profile(db, [dict(extra or {},
                                          **{'resources:FPGA': str(count)})])
    return [a['uuid'] for a in arq_binding.create(ctx, profile, 'p1')]


def _bind(conf, ctx, device, uuids):
    instance = str(uuidlib.uuid4())
    arq_binding.start_bind(conf, ctx, {u: {
        'hostname': device.hostname, 'device_rp_uuid': device.rp_uuid,
        'instance_uuid': instance} for u in uuids}).result(30)


# -- bind latency -------------------------------------------------------------

def test_bind_outcomes_are_timed(mconf, db, ctx, glance):
    name = 'cyborg_conductor_bind_seconds_count'
    bound = _value(name, {'outcome': 'bound'})
    failed = _value(name, {'outcome': 'failed'})
    _bind(mconf, ctx, seed.seed_device(db, handles=2), _arqs(db, ctx, 2))
    assert _value(name, {'outcome': 'bound'}) == bound + 2
    assert _value(name, {'outcome': 'failed'}) == failed
    full = seed.seed_device(db, handles=0)
    # Refused (400, nothing written): no bind, no outcome.
    with pytest.raises(exception.BindFailed):
        _bind(mconf, ctx, full, _arqs(db, ctx, 1))
    assert _value(name, {'outcome': 'failed'}) == failed
    # So is a bind that programs and finds no handle.
    with pytest.raises(exception.BindFailed):
        _bind(mconf, ctx, full, _arqs(db, ctx, 1,
                                      {'accel:function_id': 'f1'}))
    assert _value(name, {'outcome': 'failed'}) == failed
    # Failed in the background: Glance has no image for the function.
    mconf.set_override('auth_type', 'none', group='glance')
    mconf.set_override('endpoint_override', glance.url, group='glance')
    _bind(mconf, ctx, seed.seed_device(db, handles=1),
          _arqs(db, ctx, 1, {'accel:function_id': 'f1'}))
    assert _value(name, {'outcome': 'failed'}) == failed + 1
    assert _value(name, {'outcome': 'bound'}) == bound + 2


# -- Placement ----------------------------------------------------------------

def test_placement_requests_are_timed_by_method(mconf):
    count = 'cyborg_conductor_placement_request_seconds_count'
    gets = _value(count, {'method': 'GET'})
    errors = _value('cyborg_conductor_placement_errors_total',
                    {'method': 'GET'})
    client = placement_client.get_client(mconf)
    assert client.get_provider(str(uuidlib.uuid4())) is None
    assert _value(count, {'method': 'GET'}) == gets + 1
    # A 404 is an answer, not a Placement failure.
    assert _value('cyborg_conductor_placement_errors_total',
                  {'method': 'GET'}) == errors


def test_placement_5xx_and_unreachable_count_as_errors(conf):
    errors = 'cyborg_conductor_placement_errors_total'
    puts, gets = _value(errors, {'method': 'PUT'}), _value(errors,
                                                           {'method': 'GET'})
    failing = recording_http.RecordingServer(
        lambda request: (503, {}, {'errors': [{'detail': 'down'}]}))
    with failing:
        placement_fixture.placement_conf(conf, failing.url)
        placement_client.reset_clients()
        with pytest.raises(exception.PlacementError):
            placement_client.get_client(conf).ensure_traits(['CUSTOM_X'])
    assert _value(errors, {'method': 'PUT'}) == puts + 1
    placement_fixture.placement_conf(conf, f'http://127.0.0.1:{processes.free_port()}')
    placement_client.reset_clients()
    with pytest.raises(exception.PlacementError):
        placement_client.get_client(conf).get_provider(str(uuidlib.uuid4()))
    assert _value(errors, {'method': 'GET'}) == gets + 1
    placement_client.reset_clients()


# -- Nova ---------------------------------------------------------------------

def test_nova_posts_are_timed_and_failures_counted(mconf, fake_nova):
    seconds = _value('cyborg_conductor_nova_request_seconds_count')
    errors = _value('cyborg_conductor_nova_errors_total')
    fake_nova.statuses = [503]
    assert nova.send(mconf, [(str(uuidlib.uuid4()), str(uuidlib.uuid4()),
                              'completed')])
    assert _value('cyborg_conductor_nova_request_seconds_count') == \
        seconds + 2
    assert _value('cyborg_conductor_nova_errors_total') == errors + 1


# -- scrape-time counts -------------------------------------------------------

@pytest.fixture
def populated(mconf, db, ctx):
    """4 ARQs (2 Initial, 1 Bound, 1 BindFailed), 2 devices (one
    unhealthy besides the one bound on), 1 undelivered Nova event."""
    device = seed.seed_device(db, handles=1)
    uuids = _arqs(db, ctx, 4)
    _bind(mconf, ctx, device, uuids[:1])
    with db.begin() as c:
        c.execute(sa.update(models.ExtARQ).where(
            models.ExtARQ.uuid == uuids[1]).values(state='BindFailed'))
        sick = seed.seed_device(db, handles=0)
        c.execute(sa.update(models.Device).where(
            models.Device.id == sick.device_id).values(
            health=states.UNHEALTHY))
        c.execute(sa.insert(models.NovaEvent).values(
            batch_id='b1', instance_uuid=str(uuidlib.uuid4()),
            arq_uuid=uuids[1], status='failed', attempts=1,
            next_attempt_at=models._now()))
    return db


def _collected():
    registry = prom.CollectorRegistry()
    registry.register(metrics_collector.ConductorCollector())
    return registry


def test_collector_counts_arqs_events_and_devices(populated):
    registry = _collected()
    arqs = {state: registry.get_sample_value('cyborg_conductor_arqs',
                                             {'state': state})
            for state in states.ARQ_STATES}
    assert arqs == {'Initial': 2, 'BindStarted': 0, 'Bound': 1,
                    'Unbound': 0, 'BindFailed': 1, 'UnbindFailed': 0,
                    'Deleting': 0}
    assert registry.get_sample_value(
        'cyborg_conductor_nova_events_pending') == 1
    health = {h: registry.get_sample_value('cyborg_conductor_devices',
                                           {'health': h})
              for h in states.HEALTH_STATES}
    assert health == {'healthy': 1, 'suspect': 0, 'probing': 0,
                      'unhealthy': 1, 'lost': 0}
    # Partitions by their own health: a fault of one alone is counted.
    partitions = {h: registry.get_sample_value(
        'cyborg_conductor_deployables', {'health': h})
        for h in states.HEALTH_STATES}
    assert partitions == {'healthy': 2, 'suspect': 0, 'probing': 0,
                          'unhealthy': 0, 'lost': 0}
    with populated.begin() as c:
        c.execute(sa.update(models.Deployable).where(
            models.Deployable.id == sa.select(sa.func.min(
                models.Deployable.id)).scalar_subquery()).values(
            health='unhealthy'))
    assert _collected().get_sample_value(
        'cyborg_conductor_deployables', {'health': 'unhealthy'}) == 1


def test_collector_counts_partitions_lost_apart_from_their_device(db):
    """A deployable lost with its device is the device's loss, counted in
    cyborg_conductor_devices; one lost while its device is still here (a
    MIG instance, a VF pool gone on its own) counts as lost."""
    def lost():
        registry = _collected()
        return (registry.get_sample_value('cyborg_conductor_deployables',
                                          {'health': states.LOST}),
                registry.get_sample_value('cyborg_conductor_devices',
                                          {'health': states.LOST}))

    pulled = seed.seed_device(db, handles=0)
    alone = seed.seed_device(db, handles=0)
    unhealthy = seed.seed_device(db, handles=0)
    dep, dev = models.Deployable, models.Device
    with db.begin() as c:
        c.execute(sa.update(dev).where(dev.id.in_(
            [pulled.device_id, unhealthy.device_id])).values(
            health=states.LOST))
        c.execute(sa.update(dep).where(dep.id.in_(
            [pulled.deployable_id, alone.deployable_id])).values(
            health=states.LOST))
        c.execute(sa.update(dep).where(
            dep.id == unhealthy.deployable_id).values(
            health=states.UNHEALTHY))
    assert lost() == (1, 2)
    # A partition's own fault under a lost device still counts as such.
    assert _collected().get_sample_value(
        'cyborg_conductor_deployables', {'health': states.UNHEALTHY}) == 1


def test_collector_counts_the_programmings_in_progress(db):
    """Deployables a conductor is programming now (their mark is set),
    whichever conductor: an FPGA taking no instance for that reason."""
    assert _collected().get_sample_value(
        'cyborg_conductor_programmings_in_progress') == 0
    marked = [seed.seed_device(db, handles=1) for _ in range(3)][:2]
    with db.begin() as c:
        c.execute(sa.update(models.Deployable).where(
            models.Deployable.id.in_([m.deployable_id for m in marked]))
            .values(programming_until=models._now()))
    assert _collected().get_sample_value(
        'cyborg_conductor_programmings_in_progress') == 2


def test_collector_serves_how_long_the_oldest_event_has_waited(db):
    """What an alert on Nova events wants: not that some are pending
    (a boot storm's are, for a moment) but that one is not delivered."""
    oldest = 'cyborg_conductor_nova_event_oldest_seconds'
    assert _collected().get_sample_value(oldest) == 0
    now = models._now()
    with db.begin() as c:
        for age in (30, 100):
            c.execute(sa.insert(models.NovaEvent).values(
                batch_id=str(uuidlib.uuid4()),
                instance_uuid=str(uuidlib.uuid4()),
                arq_uuid=str(uuidlib.uuid4()), status='completed',
                attempts=0, next_attempt_at=now,
                created_at=now - datetime.timedelta(seconds=age)))
    registry = _collected()
    assert 100 <= registry.get_sample_value(oldest) < 160
    assert registry.get_sample_value(
        'cyborg_conductor_nova_events_pending') == 2


def test_collector_counts_the_placement_releases_owed(db, ctx):
    owed = 'cyborg_conductor_placement_releases_owed'
    assert _collected().get_sample_value(owed) == 0
    for _ in range(2):
        db_api.write_retrying(ctx, release_db.add, ctx,
                              str(uuidlib.uuid4()))
    assert _collected().get_sample_value(owed) == 2


def test_hosts_whose_agent_fell_silent_are_counted(db):
    """A host whose agent has not reported its inventory for
    SILENT_PERIODS report periods is silent: its devices' health is not
    being watched.  A host that reported a moment ago, or a period ago,
    is not."""
    now = models._now()
    period = datetime.timedelta(seconds=60)
    with db.begin() as c:
        for name, age in (('fresh', 0), ('one-late', 2),
                          ('gone-quiet', metrics_collector.SILENT_PERIODS
                           + 1)):
            c.execute(sa.insert(models.Host).values(
                hostname=name, placement_synced=True,
                last_report_at=now - age * period))
    registry = prom.CollectorRegistry()
    registry.register(metrics_collector.ConductorCollector(
        report_interval=60))
    assert registry.get_sample_value('cyborg_conductor_hosts') == 3
    assert registry.get_sample_value('cyborg_conductor_silent_hosts') == 1
    with db.begin() as c:
        c.execute(sa.update(models.Host).where(
            models.Host.hostname == 'gone-quiet').values(last_report_at=now))
    assert registry.get_sample_value('cyborg_conductor_silent_hosts') == 0


def test_a_database_error_drops_only_that_sample(populated):
    with populated.begin() as c:
        c.execute(sa.text('DROP TABLE nova_events'))
    registry = _collected()
    assert registry.get_sample_value(
        'cyborg_conductor_nova_events_pending') is None
    assert registry.get_sample_value('cyborg_conductor_arqs',
                                     {'state': 'Initial'}) == 2
    assert registry.get_sample_value('cyborg_conductor_devices',
                                     {'health': 'unhealthy'}) == 1


@pytest.fixture
def registered():
    collector = metrics_collector.register()
    yield collector
    metrics_collector.unregister()


def test_registry_renders_the_counts_beside_the_histograms(populated,
                                                           registered):
    assert metrics_collector.register() is registered
    content_type, body = metrics.render()
    text = body.decode()
    assert content_type.startswith('text/plain')
    assert 'cyborg_conductor_arqs{state="Bound"} 1.0' in text
    assert 'cyborg_conductor_devices{health="unhealthy"} 1.0' in text
    assert 'cyborg_conductor_nova_events_pending 1.0' in text
    assert 'cyborg_conductor_bind_seconds_count{outcome="bound"}' in text


def test_the_conductor_process_serves_its_registry(conf, db, ctx):
    port = processes.free_port()
    conf.set_override('enabled', True, group='metrics')
    conf.set_override('conductor_port', port, group='metrics')
    try:
        conductor_cmd.serve_metrics(conf)
        _arqs(db, ctx, 3)
        body = requests.get(f'http://127.0.0.1:{port}/metrics',
                            timeout=10).text
    finally:
        metrics_collector.unregister()
    assert 'cyborg_conductor_arqs{state="Initial"} 3.0' in body
    # Only the conductor's families: not the agent's and the API's, which
    # every process defines but only theirs record.
    names = _families(body)
    assert 'cyborg_db_transaction_retries' in names
    assert 'cyborg_notifications' in names
    assert not {n for n in names if n.startswith(('cyborg_agent_',
                                                  'cyborg_api_'))}
    # ?name[]= scrapes are answered from the same families.
    one = requests.get(f'http://127.0.0.1:{port}/metrics', timeout=10,
                       params={'name[]': ['cyborg_conductor_nova_errors_total',
                                          'cyborg_agent_xid_events_total']})
    assert _families(one.text) == {'cyborg_conductor_nova_errors'}


def _families(text):
    return {f.name for f in parser.text_string_to_metric_families(text)}


def test_the_all_in_one_renders_every_family(populated, registered):
    names = _families(metrics.render()[1].decode())
    for prefix in ('cyborg_agent_', 'cyborg_conductor_', 'cyborg_api_'):
        assert any(n.startswith(prefix) for n in names), prefix
