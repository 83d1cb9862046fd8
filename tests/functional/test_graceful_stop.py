"""A stop request lets in-flight work finish: an RPC call on the real
RabbitMQ and an HTTP request on cheroot both get their answers; and an
idle process stops at once."""

import signal
import threading
import time

import oslo_messaging as messaging
import requests

from cyborg.cmd import api as api_cmd
from cyborg.common import context as cyborg_context
from cyborg.common import rpc
from cyborg.common import service
from tests.fixtures import databases
from tests.fixtures import processes
from tests.fixtures import rabbit


class SlowEndpoint:
    target = messaging.Target(version='1.0')

    def __init__(self):
        self.entered = threading.Event()

    def slow_echo(self, context, value):
        self.entered.set()
        time.sleep(1.0)
        return value


def _run(launcher):
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault('status', launcher.run()))
    thread.start()
    assert launcher.ready.wait(30)
    return thread, result


def test_rpc_call_in_flight_is_answered_before_the_stop_ends(conf):
    endpoint = SlowEndpoint()
    with rabbit.throwaway_vhost() as url:
        transport = messaging.get_rpc_transport(conf, url=url)
        previous = rpc._TRANSPORT
        rpc.set_transport(transport)
        try:
            launcher = service.Launcher(conf, 'test')
            launcher.add(service.RPCService(conf, 'graceful', 'h1',
                                            [endpoint]))
            thread, result = _run(launcher)
            client = rpc.get_client(conf, 'graceful', '1.0', server='h1',
                                    timeout=30)
            answers = []
            caller = threading.Thread(target=lambda: answers.append(
                client.call(cyborg_context.get_admin_context(), 'slow_echo',
                            value='done')))
            caller.start()
            assert endpoint.entered.wait(30)
            launcher.request_stop()
            thread.join(10)
            caller.join(10)
            assert answers == ['done']
            assert result['status'] == 0
        finally:
            rpc.set_transport(previous)
            transport.cleanup()


def test_http_request_in_flight_is_answered_before_the_stop_ends(conf):
    entered = threading.Event()

    def slow_app(environ, start_response):
        entered.set()
        time.sleep(1.0)
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'done']

    sock = api_cmd.listen('127.0.0.1', 0)
    launcher = service.Launcher(conf, 'test')
    launcher.add(api_cmd.APIServer(conf, slow_app, sock))
    thread, result = _run(launcher)
    answers = []
    caller = threading.Thread(target=lambda: answers.append(
        requests.get(api_cmd.url_of(sock), timeout=30).text))
    caller.start()
    assert entered.wait(30)
    launcher.request_stop()
    thread.join(10)
    caller.join(10)
    sock.close()
    assert answers == ['done']
    assert result['status'] == 0


IDLE_STOP = 2.0


def test_idle_processes_stop_at_once(tmp_path):
    """SIGTERM on an idle API, conductor and agent (each with its broker
    connections, consumer threads and periodic work, and the default
    [DEFAULT]graceful_shutdown_timeout) ends each in under 2 s, status 0:
    nothing is in flight, so nothing is waited for."""
    port = processes.free_port()
    with rabbit.throwaway_vhost() as url, \
            databases.throwaway_database('sqlite') as db_url:
        databases.create_schema(db_url)
        config = processes.write_config(tmp_path / 'cyborg.conf', {
            'DEFAULT': {'transport_url': url, 'state_path': tmp_path},
            'database': {'connection': db_url},
            'api': {'host_ip': '127.0.0.1', 'port': port,
                    'auth_strategy': 'noauth'},
            'agent': {'enabled_drivers': 'fake_driver', 'hotplug': False},
            'placement': {'auth_type': 'none',
                          'endpoint_override': 'http://127.0.0.1:1'},
        })
        started = {script: processes.ServiceProcess(
                       script, config, tmp_path / (script + '.log')).start()
                   for script in ('cyborg-agent', 'cyborg-api',
                                  'cyborg-conductor')}
        try:
            started['cyborg-conductor'].wait_for_log(
                'cyborg-conductor started')
            started['cyborg-api'].wait_for_log('listening on')
            # Idle after its first report, acknowledged.
            started['cyborg-conductor'].wait_for_log('Report of',
                                                     timeout=30)
            assert requests.get('http://127.0.0.1:%d/' % port,
                                timeout=10).status_code == 200
            time.sleep(2)   # every consumer back in its long poll
            took = {script: process.stop()
                    for script, process in started.items()}
            assert max(took.values()) < IDLE_STOP, took
        finally:
            for process in started.values():
                process.kill()



def test_background_binds_finish_before_the_stop_ends(conf):
    # A bind answered before its slow part ran (programming, an mdev,
    # Nova's event) goes on in the bind executor: a stopping conductor
    # waits for it, after its RPC server took its last call.
    from cyborg.conductor import arq_binding

    launcher = service.Launcher(conf, 'test')
    launcher.add(arq_binding.BackgroundBinds())
    thread, result = _run(launcher)
    started, finished = threading.Event(), threading.Event()

    def slow_bind():
        started.set()
        time.sleep(1.0)
        finished.set()

    arq_binding._executor(conf).submit(slow_bind)
    assert started.wait(10)
    launcher.request_stop()
    thread.join(10)
    assert not thread.is_alive() and result['status'] == 0
    assert finished.is_set(), 'the stop did not wait for the bind'


# [api]conductor_timeout in the test below: the write it makes waits
# longer after the stop than the old grace time (3 s).
CONDUCTOR_WAIT = 6


def test_a_stopping_api_answers_writes_waiting_for_the_conductor(tmp_path):
    """A write waits for the conductor up to [api]conductor_timeout: a
    cyborg-api told to stop meanwhile (a restart) answers it, the 503 of
    a conductor that never answered here, before it exits; with
    [DEFAULT]graceful_shutdown_timeout unset it waits that long, not the
    3 s it used to, which cut the write off mid-wait."""
    port = processes.free_port()
    with rabbit.throwaway_vhost() as url, \
            databases.throwaway_database('sqlite') as db_url:
        databases.create_schema(db_url)
        config = processes.write_config(tmp_path / 'api.conf', {
            'DEFAULT': {'transport_url': url},
            'database': {'connection': db_url},
            'api': {'host_ip': '127.0.0.1', 'port': port, 'api_workers': 2,
                    'auth_strategy': 'noauth',
                    'conductor_timeout': CONDUCTOR_WAIT},
        })
        api = processes.ServiceProcess('cyborg-api', config,
                                       tmp_path / 'api.log').start()
        try:
            api.wait_for_log('Started cyborg-api worker', count=2)
            base = 'http://127.0.0.1:%d' % port
            processes.wait_for(lambda: _answers(base), what='the API')
            answers = []
            writer = threading.Thread(target=lambda: answers.append(
                _write(base)))
            writer.start()
            # The write is in the API, waiting for the conductor.
            time.sleep(1.5)
            stopping = time.monotonic()
            api.proc.send_signal(signal.SIGTERM)
            writer.join(CONDUCTOR_WAIT + 10)
            rc = api.proc.wait(CONDUCTOR_WAIT + 10)
            took = time.monotonic() - stopping
        finally:
            api.kill()
    assert rc == 0, api.tail()
    [answer] = answers
    assert not isinstance(answer, Exception), (answer, api.tail())
    assert answer.status_code == 503, answer.text
    assert 'conductor' in answer.json()['error_message']
    # Once the write is answered the process ends: it does not wait for
    # the whole grace time.
    assert took < CONDUCTOR_WAIT + 2, took


def _answers(base):
    try:
        return requests.get(base + '/', timeout=5).ok
    except requests.ConnectionError:
        return False


def _write(base):
    try:
        return requests.post(
            base + '/v2/device_profiles', timeout=60,
            headers={'X-Roles': 'admin', 'X-Project-Id': 'p'},
            json=[{'name': 'waits', 'groups': [{'resources:FPGA': '1'}]}])
    except requests.RequestException as exc:
        return exc
