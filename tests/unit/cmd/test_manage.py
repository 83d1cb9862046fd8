"""cyborg-manage in-process: what it says when it cannot be carried out
(version caps, older conductors, no conductor, no broker): one line on
stderr and status 1, never a traceback.  The commands themselves run
end to end in tests/functional/test_host_forget.py."""

import contextlib

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
