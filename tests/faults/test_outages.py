"""RabbitMQ or the database taken away from a running API and conductor
(through TCP proxies: the servers themselves are shared) and brought back;
every test on MariaDB and on PostgreSQL.

While one is away the processes stay up and log one line per failure,
not tracebacks; reads that do not need it are served at once; requests
that need it answer 503 within seconds (never 500, never a hang; with a
broker that hangs, within the API's graceful-stop time) and write
nothing.  When it is back, everything works again within seconds, without
a restart: a write sent after the broker's return succeeds within 4 s of
it (one already waiting at that moment may take up to 5 s more: the reply
consumer's poll), a read within 1 s of the database's.
"""

import concurrent.futures
import time

import pytest

from cyborg.common import service
from tests.fixtures import api as api_fixture
from tests.fixtures import outages

WRITES_DURING_OUTAGE = 12       # more than [api]threads lets wait at once (8)
BROKER_RECOVERY = 4.0
DATABASE_RECOVERY = 1.0
# The API's graceful-stop time (the deployments run with the default
# options): no write may outlast it.
HUNG_WRITES_WITHIN = service.api_shutdown_timeout(api_fixture.make_conf())


@pytest.fixture(params=['mysql', 'postgresql'])
def db_kind(request):
    return request.param


def _writes_refused(deployment, also_read=('/', '/v2/devices'), within=10):
    """WRITES_DURING_OUTAGE concurrent writes all answer 503 within
    ``within`` seconds while ``also_read`` paths are served in under a
    second."""
    with concurrent.futures.ThreadPoolExecutor(WRITES_DURING_OUTAGE) as pool:
        writes = [pool.submit(deployment.create_profile)
                  for _ in range(WRITES_DURING_OUTAGE)]
        time.sleep(0.3)
        for path in also_read:
            resp, took = deployment.request('GET', path)
            assert resp.status_code == 200 and took < 1.0, (path, took)
        results = [w.result() for w in writes]
    assert {resp.status_code for resp, _ in results} == {503}, [
        r.text for r, _ in results]
    assert max(took for _, took in results) < within, results
    assert deployment.all_up()


def test_broker_lost_and_back(tmp_path, db_kind):
    with outages.deployment(tmp_path, db_kind) as d:
        assert d.create_profile()[0].status_code == 201
        before = d.profiles()
        d.broker.cut()
        _writes_refused(d, also_read=('/', '/v2/devices',
                                      '/v2/device_profiles'))
        assert d.profiles() == before           # nothing written
        time.sleep(3)
        d.broker.restore()
        assert outages.recovers_for_fresh_requests(
            time.monotonic(), d.create_profile) < BROKER_RECOVERY
        d.logs_without_tracebacks()


def test_broker_hung_and_back(tmp_path, db_kind):
    """RabbitMQ holding its connections open and answering nothing (a hung
    broker, a network dropping packets): a write waited for the broker's
    confirmation ([api]conductor_timeout), then for each of
    [api]broker_retries reconnections their handshake timeout, 37 s in
    all: past the API's graceful-stop time, which is there so that a
    restart cuts no write off, and gunicorn's 30 s.  Each write now
    answers 503 within that time and writes nothing."""
    with outages.deployment(tmp_path, db_kind) as d:
        assert d.create_profile()[0].status_code == 201
        before = d.profiles()
        d.broker.hold()
        _writes_refused(d, within=HUNG_WRITES_WITHIN)
        d.broker.release()
        # What the broker held goes through now, and reaches the
        # conductor past the time the API gave it: dropped.
        time.sleep(3)
        assert d.profiles() == before
        assert outages.recovers_for_fresh_requests(
            time.monotonic(), d.create_profile) < BROKER_RECOVERY
        # A write whose publish the broker held, and that the API was
        # still trying again when the broker came back, arrives twice:
        # oslo.messaging drops the second with a traceback of its own.
        d.logs_without_tracebacks(but='ignoring duplicate message')


def test_broker_away_before_the_first_write(tmp_path, db_kind):
    """The API cannot open its reply queue: writes still answer 503 in
    seconds, and work once the broker is back."""
    with outages.deployment(tmp_path, db_kind) as d:
        d.broker.cut()
        _writes_refused(d)
        d.broker.restore()
        assert outages.recovers_for_fresh_requests(
            time.monotonic(), d.create_profile) < BROKER_RECOVERY
        d.logs_without_tracebacks()


def test_database_lost_and_back(tmp_path, db_kind):
    with outages.deployment(tmp_path, db_kind) as d:
        assert d.create_profile()[0].status_code == 201
        d.database.cut()
        resp, took = d.request('GET', '/v2/devices')
        assert resp.status_code == 503 and took < 1.0, (resp.text, took)
        assert 'database' in resp.text
        _writes_refused(d, also_read=('/',))
        time.sleep(2)       # the conductor's periodic jobs meet it too
        d.database.restore()
        assert outages.recovers(
            d, time.monotonic(), lambda: d.request('GET', '/v2/devices'),
        ) < DATABASE_RECOVERY
        assert d.create_profile()[0].status_code == 201
        assert d.profiles() == 2                # the refused wrote nothing
        d.logs_without_tracebacks()


def test_api_started_while_the_database_is_away(tmp_path, db_kind):
    """The API's first use of the database does not wait out oslo.db's
    start-up retries (100 s by default): 503 at once."""
    with outages.deployment(tmp_path, db_kind) as d:
        d.database.cut()
        d.restart_api()
        resp, took = d.request('GET', '/v2/devices')
        assert resp.status_code == 503 and took < 2.0, (resp.text, took)
        d.database.restore()
        assert outages.recovers(
            d, time.monotonic(), lambda: d.request('GET', '/v2/devices'),
        ) < DATABASE_RECOVERY
        d.logs_without_tracebacks()
