"""The API and the conductor time ``answer_by`` by the database server's
clock, each measuring how far its host's is from it: a conductor whose
host clock is off (here by 100 s, more than the API's wait) still applies
the calls the API waits for and drops those it stopped waiting for."""

import time

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.common import clock
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import manager
from cyborg.db import api as db_api
from cyborg.objects import clock as objects_clock
from cyborg.db.api import device_profiles as profile_db
from tests.fixtures import api as api_fixture
from tests.fixtures import databases
from tests.fixtures import tcp_proxy


@pytest.fixture(params=['mysql', 'postgresql'])
def server_db(request):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


@pytest.fixture
def host_clock_off(monkeypatch):
    """Set this host's clock ``off`` seconds from the true time."""
    def move(off):
        monkeypatch.setattr(clock, 'host_clock',
                            lambda: time.time() + off)
        objects_clock.reference.forget()
    yield move
    monkeypatch.undo()
    objects_clock.reference.forget()


def _create(endpoint, name, answer_by):
    endpoint.device_profile_create(
        cyborg_context.RequestContext(project_id='p1', answer_by=answer_by),
        {'name': name, 'groups': [{'resources:FPGA': '1'}],
         'project_id': 'p1'})
    return profile_db.get_groups(cyborg_context.get_admin_context(),
                                 name=name) is not None


@pytest.mark.parametrize('off', [100, -100])
def test_a_conductor_whose_clock_is_off_times_calls_right(server_db,
                                                          host_clock_off,
                                                          off):
    # The API's host keeps the true time (the database server's here):
    # it waits 20 s for one call and stopped waiting 2 s ago for another.
    now = time.time()
    host_clock_off(off)
    endpoint = manager.ConductorManager(None, 'c1')
    assert _create(endpoint, 'awaited%d' % off, now + 20)
    with pytest.raises(messaging.ExpectedException) as caught:
        _create(endpoint, 'late%d' % off, now - 2)
    assert isinstance(caught.value.exc_info[1], exception.ServiceUnavailable)
    assert not profile_db.get_groups(cyborg_context.get_admin_context(),
                                     name='late%d' % off)
    assert abs(objects_clock.reference.skew - off) < 1


def test_the_reference_follows_a_step_of_the_host_clock(server_db,
                                                       host_clock_off,
                                                       monkeypatch):
    host_clock_off(50)
    assert abs(objects_clock.reference.now() - time.time()) < 1
    measured = objects_clock.reference._tried_at
    # NTP steps the clock by 30 s: measured again at once.
    monkeypatch.setattr(clock, 'host_clock', lambda: time.time() + 80)
    assert abs(objects_clock.reference.now() - time.time()) < 1
    assert objects_clock.reference._tried_at > measured
    assert abs(objects_clock.reference.skew - 80) < 1
    # Less than STEP_TOLERANCE (a slew): not measured again before
    # REMEASURE_INTERVAL, the old skew holds.
    measured = objects_clock.reference._tried_at
    monkeypatch.setattr(clock, 'host_clock', lambda: time.time() + 80.5)
    assert abs(objects_clock.reference.now() - time.time() - 0.5) < 0.2
    assert objects_clock.reference._tried_at == measured
    monkeypatch.setattr(clock, 'REMEASURE_INTERVAL', 0)
    assert abs(objects_clock.reference.now() - time.time()) < 0.2


def test_without_the_database_the_last_skew_holds(host_clock_off,
                                                  monkeypatch):
    with databases.throwaway_database('mysql') as url, \
            tcp_proxy.tcp_proxy(3306) as proxy:
        engine = sa.create_engine(sa.make_url(url).set(
            host='127.0.0.1', port=proxy.port))
        undo = db_api.patch_engine(engine)
        try:
            host_clock_off(40)
            assert abs(objects_clock.reference.now() - time.time()) < 1
            monkeypatch.setattr(clock, 'REMEASURE_INTERVAL', 0)
            proxy.cut()
            assert abs(objects_clock.reference.now() - time.time()) < 1
            # Tried again after REMEASURE_AFTER_FAILURE, not on each call.
            assert not objects_clock.reference._due()
            monkeypatch.setattr(clock, 'REMEASURE_AFTER_FAILURE', 0)
            assert objects_clock.reference._due()
        finally:
            undo()
            engine.dispose()

