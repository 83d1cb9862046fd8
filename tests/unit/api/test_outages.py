"""A backing service that is down answers 503 in the §2 error format,
never a hang and never a 500 (deliberate difference 9)."""

import concurrent.futures
import json
import threading
import time

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
from oslo_db.sqlalchemy import exc_filters
import webob

from cyborg.api import app as api_app
from cyborg.common import rpc
from cyborg.conductor import rpcapi
from cyborg.db import api as db_api
from tests.fixtures import api as api_fixture
from tests.fixtures import rabbit
from tests.fixtures import tcp_proxy


def _call(app, method, path, body=None):
    req = webob.Request.blank(path, method=method)
    if body is not None:
        req.body = json.dumps(body).encode()
        req.content_type = 'application/json'
    resp = req.get_response(app)
    fault = json.loads(json.loads(resp.text)['error_message'])
    return resp.status_int, fault


def test_database_unreachable_is_503():
    conf = api_fixture.make_conf()
    # Nothing listens on port 1; oslo.db's filters classify the error as
    # the production engine would.
    engine = sa.create_engine('mysql+pymysql://root@127.0.0.1:1/cyborg',
                              poolclass=sa.pool.NullPool)
    exc_filters.register_engine(engine)
    undo = db_api.patch_engine(engine)
    try:
        status, fault = _call(api_app.build_app(conf), 'GET',
                              '/v2/device_profiles')
    finally:
        undo()
        engine.dispose()
    assert status == 503
    assert fault['faultcode'] == 'Server'
    assert 'database' in fault['faultstring']


def _call_unanswered(method, path, body):
    """A request to an API whose conductor never answers (no conductor
    listens on the in-process transport; the API waits 1 s)."""
    conf = api_fixture.make_conf()
    transport = messaging.get_rpc_transport(conf, url='fake://')
    previous = rpc._TRANSPORT
    rpc.set_transport(transport)
    try:
        app = api_app.build_app(conf, rpcapi.ConductorAPI(conf, timeout=1))
        return _call(app, method, path, body)
    finally:
        rpc.set_transport(previous)
        transport.cleanup()


def test_conductor_not_answering_is_503(db):
    status, fault = _call_unanswered('POST', '/v2/device_profiles', [
        {'name': 'dp', 'groups': [{'resources:FPGA': '1'}]}])
    assert status == 503
    assert 'conductor' in fault['faultstring']


def test_a_broker_refusing_the_login_is_503(db):
    """A wrong password or a virtual host that does not exist: the
    broker's refusal came through oslo.messaging as amqp's own error, a
    500."""
    conf = api_fixture.make_conf()
    url = 'rabbit://%s:%s@%s:%d/' % (
        rabbit.RABBIT_USER, 'not-' + rabbit.RABBIT_PASSWORD,
        rabbit.RABBIT_HOST, rabbit.RABBIT_PORT)
    transport = messaging.get_rpc_transport(conf, url=url)
    previous = rpc._TRANSPORT
    rpc.set_transport(transport)
    try:
        app = api_app.build_app(conf, rpcapi.ConductorAPI(conf, timeout=5))
        status, fault = _call(app, 'POST', '/v2/device_profiles', [
            {'name': 'dp', 'groups': [{'resources:FPGA': '1'}]}])
    finally:
        rpc.set_transport(previous)
        transport.cleanup()
    assert status == 503
    assert 'refused' in fault['faultstring']


def _wait_abandoned_calls(timeout=60):
    """Wait for the API's conductor calls still running in their threads
    (``conductor_client``'s ``conductor-call-*``)."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name.startswith('conductor-call-'):
            thread.join(max(0, deadline - time.monotonic()))
            assert not thread.is_alive(), thread.name


def test_a_hung_broker_is_a_503_within_the_call_s_bound(db):
    """RabbitMQ (through a TCP proxy) keeping the API's connections open
    and answering nothing: the publish waited [api]conductor_timeout for
    the broker's confirmation, then each of [api]broker_retries
    reconnections its handshake timeout (about 5 s): 37 s with the
    defaults, past the API's graceful-stop time.  The call now answers
    503 once ``call_bound`` has passed, as for a broker that is away."""
    from cyborg.api import conductor_client

    conf = api_fixture.make_conf({('api', 'conductor_timeout'): 2,
                                  ('api', 'broker_retries'): 1})
    rpc.reconnect_fast(conf)
    profile = [{'name': 'dp', 'groups': [{'resources:FPGA': '1'}]}]
    with rabbit.throwaway_vhost() as url, \
            tcp_proxy.tcp_proxy(rabbit.RABBIT_PORT) as proxy:
        transport = messaging.get_rpc_transport(conf, url=url.replace(
            ':%d/' % rabbit.RABBIT_PORT, ':%d/' % proxy.port))
        previous = rpc._TRANSPORT
        rpc.set_transport(transport)
        try:
            app = api_app.build_app(conf, rpcapi.ConductorAPI(
                conf, timeout=2, retry=1))
            # No conductor: the broker is reached (its reply queue open).
            status, fault = _call(app, 'POST', '/v2/device_profiles',
                                  profile)
            assert (status, fault['faultstring']) == (
                503, 'Service unavailable: the conductor did not answer in '
                     'time')
            proxy.hold()
            started = time.monotonic()
            status, fault = _call(app, 'POST', '/v2/device_profiles',
                                  profile)
            took = time.monotonic() - started
            proxy.release()
        finally:
            # The call the 503 abandoned ends by itself (its own bounds,
            # the connection it holds given back to the transport's pool
            # then): cleaned up before that, the transport would keep
            # that connection, whose heartbeat reconnects to the closed
            # proxy for the rest of the test run.
            _wait_abandoned_calls()
            rpc.set_transport(previous)
            transport.cleanup()
    bound = conductor_client.call_bound(conf)
    assert bound == 4
    assert took < bound + 1, took
    assert (status, fault['faultstring']) == (
        503, 'Service unavailable: the message broker cannot be reached')


def test_a_programming_longer_than_the_api_waits_says_what_to_watch(db):
    """FPGA programming can outlast ``[api]conductor_timeout``; the 503
    then says that it may go on, and where to see how it ended."""
    from tests.fixtures import arqs as seed

    device = seed.seed_device(db, hostname='fpga-host', handles=1)
    image = 'b4e5d6c1-0000-4000-8000-000000000001'
    status, fault = _call_unanswered(
        'PATCH', f'/v2/deployables/{device.deployable_uuid}/program',
        [{'path': '/program', 'op': 'replace',
          'value': [{'image_uuid': image}]}])
    assert status == 503
    assert fault['faultstring'] == (
        'Service unavailable: the conductor did not answer in time. '
        'Programming an FPGA can take longer: if the conductor started it, '
        'it goes on in the background for up to 240 s; the deployable '
        'shows bitstream_id b4e5d6c1-0000-4000-8000-000000000001 once it '
        'is loaded (also the deployable.program.end or .error '
        'notification)')


def test_a_conductor_that_fails_is_500_not_an_outage(monkeypatch, caplog):
    """The conductor was reached and raised an error of its own (a bug):
    a 500, as for the API's own bugs, with the conductor's error in the
    API's log; not "the conductor cannot be reached", which sends an
    operator to RabbitMQ."""
    from cyborg.conductor import manager

    def broken(self, context, **kwargs):
        # Not a builtin: those oslo.messaging raises again as themselves.
        raise _ConductorBug('a bug in the conductor')

    monkeypatch.setattr(manager.ConductorManager, 'device_profile_create',
                        broken)
    # Over RabbitMQ: the error comes back as oslo.messaging's RemoteError
    # (the in-memory transport re-raises the conductor's own exception).
    with rabbit.throwaway_vhost() as transport_url, \
            api_fixture.api_service(transport_url=transport_url) as service:
        status, fault = _call(service.app, 'POST', '/v2/device_profiles',
                              [{'name': 'p',
                                'groups': [{'resources:FPGA': '1'}]}])
    assert (status, fault['faultstring']) == (500, 'Internal server error.')
    assert '_ConductorBug: a bug in the conductor' in caplog.text


class _ConductorBug(Exception):
    pass


def _profiles_at_once(app, count, prefix):
    """``count`` profile creates sent at once: [(status, seconds)]."""
    start = threading.Barrier(count)

    def create(index):
        start.wait(10)
        began = time.monotonic()
        status, _fault = _call_status(app, 'POST', '/v2/device_profiles', [
            {'name': f'{prefix}{index}',
             'groups': [{'resources:FPGA': '1'}]}])
        return status, time.monotonic() - began

    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        return list(pool.map(create, range(count)))


def _call_status(app, method, path, body):
    req = webob.Request.blank(path, method=method)
    req.body = json.dumps(body).encode()
    req.content_type = 'application/json'
    resp = req.get_response(app)
    return resp.status_int, resp.text


def test_a_burst_of_writes_is_served_while_the_conductor_answers():
    # [api]threads 4: while the conductor answers, more than half of them
    # (2) may wait for it at once; none is refused.
    with api_fixture.api_service({('api', 'threads'): 4}) as service:
        results = _profiles_at_once(service.app, 12, 'burst-')
    assert [status for status, _took in results] == [201] * 12


def test_writes_beyond_half_the_threads_are_refused_while_unanswered(db):
    # No conductor: the first calls go unanswered (1 s each); after that,
    # at most half of [api]threads (2) wait for it and the others answer
    # 503 at once.
    conf = api_fixture.make_conf({('api', 'threads'): 4})
    transport = messaging.get_rpc_transport(conf, url='fake://')
    previous = rpc._TRANSPORT
    rpc.set_transport(transport)
    try:
        app = api_app.build_app(conf, rpcapi.ConductorAPI(conf, timeout=1))
        first = _profiles_at_once(app, 4, 'first-')
        then = _profiles_at_once(app, 6, 'then-')
    finally:
        rpc.set_transport(previous)
        transport.cleanup()
    assert [status for status, _took in first] == [503] * 4
    assert all(took >= 0.9 for _status, took in first), first
    assert [status for status, _took in then] == [503] * 6
    waited = sorted(took for _status, took in then)
    assert waited[-2] >= 0.9, then         # two waited for the conductor
    assert waited[-3] < 0.5, then          # the others were refused at once


@pytest.mark.parametrize('kind, off', [('sqlite', 0), ('mysql', -100)])
def test_each_call_tells_the_conductor_when_the_api_stops_waiting(
        kind, off, monkeypatch):
    # By the database server's clock, whatever the API host's says
    # (MariaDB's: this host's clock moved 100 s behind).
    from cyborg.api import conductor_client
    from cyborg.common import clock
    from cyborg.common import context as cyborg_context
    from cyborg.objects import clock as objects_clock

    with api_fixture.api_service({('api', 'conductor_timeout'): 7},
                                 db_kind=kind) as service:
        monkeypatch.setattr(clock, 'host_clock', lambda: time.time() + off)
        objects_clock.reference.forget()
        try:
            client = conductor_client.ConductorClient(
                service.conf, rpcapi.ConductorAPI(service.conf))
            ctx = cyborg_context.RequestContext(project_id='p1')
            before = time.time()
            client.device_profile_create(ctx, values={
                'name': 'timed', 'groups': [{'resources:FPGA': '1'}],
                'project_id': 'p1'})
        finally:
            monkeypatch.undo()
            objects_clock.reference.forget()
    assert before + 6.9 <= ctx.answer_by <= time.time() + 7.1


def test_the_call_s_thread_has_the_request_s_context(conf):
    """Each call runs on a thread of its own (bounded by call_bound):
    what is logged there (oslo.messaging's reconnections, publishes)
    carried no request id, and context variables (tracing) were lost."""
    import contextvars

    from oslo_context import context as oslo_context

    from cyborg.api import conductor_client
    from cyborg.common import context as cyborg_context

    marker = contextvars.ContextVar('marker', default=None)

    class Recording:
        def arq_bind(self, context, bindings):
            return oslo_context.get_current().request_id, marker.get()

    client = conductor_client.ConductorClient(conf, Recording())
    ctx = cyborg_context.RequestContext(request_id='req-in-the-call')
    marker.set('traced')
    assert client.arq_bind(ctx, []) == ('req-in-the-call', 'traced')
