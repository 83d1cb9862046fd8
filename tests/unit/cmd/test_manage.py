"""cyborg-manage in-process: what it says when it cannot be carried out
(version caps, older conductors, no conductor, no broker): one line on
stderr and status 1, never a traceback.  The commands themselves run
end to end in tests/functional/test_host_forget.py."""

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
import uuid

import oslo_messaging as messaging
import pytest

from cyborg.cmd import manage
from cyborg.common import rpc
from cyborg.conductor import rpcapi as conductor_rpcapi
from tests.fixtures import api as api_fixture
from tests.fixtures import processes
from tests.fixtures import rabbit


def _run(tmp_path, sections, *args):
    config = processes.write_config(tmp_path / 'manage.conf', sections)
    return manage.main(['--config-file', str(config), *args])


def test_a_cap_below_the_host_commands_sends_nothing(tmp_path, capsys):
    status = _run(tmp_path, {
        # Nothing listens there: nothing may be sent.
        'DEFAULT': {'transport_url': 'rabbit://guest:guest@127.0.0.1:1/'},
        'upgrade_levels': {'conductor': '2027.1'}}, 'host', 'list')
    assert status == manage.FAILED
    err = capsys.readouterr().err
    assert err == ('cyborg-manage: [upgrade_levels]conductor caps the '
                   'conductor RPC at 1.4; host commands need 1.8\n')


def test_an_unknown_cap_is_a_configuration_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        _run(tmp_path, {'upgrade_levels': {'conductor': 'zed'}}, 'host',
             'list')
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(
        'cyborg-manage: configuration error: ')


class _OlderConductor:
    """A conductor of before the host commands (RPC 1.7)."""

    target = messaging.Target(version='1.7')

    def host_list(self, context):
        raise AssertionError('a 1.8 call reached a 1.7 endpoint')


@contextlib.contextmanager
def _serving(conf, transport_url, endpoint):
    api_fixture._register_messaging_opts(conf)
    transport = messaging.get_rpc_transport(conf, url=transport_url)
    server = messaging.get_rpc_server(
        transport, messaging.Target(topic=conductor_rpcapi.TOPIC,
                                    server='older'),
        [endpoint], serializer=rpc._serializer())
    server.start()
    try:
        yield
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


def test_older_conductors_are_named(tmp_path, conf, capsys):
    with rabbit.throwaway_vhost() as transport_url:
        with _serving(conf, transport_url, _OlderConductor()):
            status = _run(tmp_path, {
                'DEFAULT': {'transport_url': transport_url,
                            'rpc_response_timeout': 20}}, 'host', 'list')
    assert status == manage.FAILED
    # (The older conductor served in this process logs its refusal.)
    assert ('cyborg-manage: the conductors do not serve this command '
            '(conductor RPC 1.8): upgrade them first') in \
        capsys.readouterr().err.splitlines()


def test_no_conductor_at_all_is_said_at_once(tmp_path, capsys):
    with rabbit.throwaway_vhost() as transport_url:
        status = _run(tmp_path, {'DEFAULT': {'transport_url': transport_url}},
                      'host', 'forget', 'compute-1')
    assert status == manage.FAILED
    err = capsys.readouterr().err
    assert err.startswith('cyborg-manage: no conductor has ever listened')
    assert 'Traceback' not in err


def _command(tmp_path, transport_url, timeout=60):
    """``cyborg-manage host list`` as an operator runs it: (status, all
    it wrote on stderr, seconds)."""
    config = processes.write_config(
        tmp_path / 'manage.conf', {'DEFAULT': {'transport_url':
                                               transport_url}})
    started = time.monotonic()
    done = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-manage'), '--config-file',
         str(config), 'host', 'list'],
        capture_output=True, text=True, timeout=timeout)
    assert done.stdout == ''
    return done.returncode, done.stderr, time.monotonic() - started


def _broker(user=rabbit.RABBIT_USER, password=rabbit.RABBIT_PASSWORD,
            port=rabbit.RABBIT_PORT, vhost=''):
    return 'rabbit://%s:%s@%s:%d/%s' % (user, password, rabbit.RABBIT_HOST,
                                        port, vhost)


def test_a_broker_nothing_answers_on_is_one_line_within_seconds(tmp_path):
    """oslo.messaging opens a call's reply queue with no bound on its
    tries, whatever the client's retry: the command waited forever."""
    with processes.refused_url() as url:
        port = int(url.rsplit(':', 1)[1])
        status, err, seconds = _command(tmp_path, _broker(port=port))
    assert status == manage.FAILED
    # oslo.messaging's line for each try is not told (--debug tells it).
    assert err == ('cyborg-manage: the message broker of [DEFAULT]'
                   'transport_url cannot be reached: [Errno 111] '
                   'Connection refused\n')
    # Two more tries, 1 s and 3 s apart, and the command's start.
    assert seconds < 30


@pytest.mark.parametrize('broker, refusal', [
    (_broker(password='not-' + rabbit.RABBIT_PASSWORD),
     'ACCESS_REFUSED - Login was refused'),
    (_broker(vhost='cyborg_t_none_' + uuid.uuid4().hex[:8]),
     'NOT_ALLOWED - vhost cyborg_t_none_'),
], ids=['password', 'vhost'])
def test_a_refused_login_is_one_line(tmp_path, broker, refusal):
    """amqp's refusals are none of kombu's errors: a traceback."""
    status, err, _seconds = _command(tmp_path, broker)
    assert status == manage.FAILED
    line, = err.splitlines()
    assert line.startswith(
        'cyborg-manage: the message broker of [DEFAULT]transport_url '
        'refused the user, password or virtual host it names: '
        + refusal), err


@pytest.mark.parametrize('transport_url, why', [
    ('foo://x', 'Failed to load transport driver "foo"'),
    ('rabbit', 'No scheme specified'),
    # A driver whose library is not installed: its module's import error
    # was a traceback.
    pytest.param('kafka://127.0.0.1:9092',
                 'Failed to load transport driver "kafka": No module named '
                 "'confluent_kafka'",
                 marks=pytest.mark.skipif(
                     importlib.util.find_spec('confluent_kafka') is not None,
                     reason='confluent_kafka is installed')),
], ids=['driver', 'url', 'driver-import'])
def test_a_transport_url_that_cannot_work_is_a_configuration_error(
        tmp_path, transport_url, why):
    status, err, _seconds = _command(tmp_path, transport_url)
    assert status == 2
    line, = err.splitlines()
    assert line.startswith('cyborg-manage: configuration error: '
                           '[DEFAULT]transport_url: ' + why), err


def test_a_notification_url_that_cannot_work_is_a_configuration_error(
        tmp_path):
    """The same file as the services': refused as theirs is."""
    config = processes.write_config(tmp_path / 'manage.conf', {
        'DEFAULT': {'transport_url': _broker()},
        'oslo_messaging_notifications': {
            'driver': 'messagingv2',
            'transport_url': 'rabbit://guest@127.0.0.1:70000/'}})
    done = subprocess.run(
        [os.path.join(sys.prefix, 'bin', 'cyborg-manage'), '--config-file',
         str(config), 'host', 'list'],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        'cyborg-manage: configuration error: [oslo_messaging_notifications]'
        "transport_url: host 127.0.0.1 has port '70000', not a number from "
        '0 to 65535\n')
