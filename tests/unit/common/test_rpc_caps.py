"""[upgrade_levels] caps: resolved from the history and releases in code,
and a capped client degrades (sends nothing it may not, logs once) while
the real RPC stack (fake:// transport, real clients and server) serves
what the cap allows."""

import logging

import oslo_messaging as messaging
import pytest

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import context as cyborg_context
from cyborg.common import rpc
from cyborg.conductor import rpcapi as conductor_rpcapi
from tests.unit.conductor import agent_endpoint

HOST = 'capped-host'


@pytest.fixture(autouse=True)
def _fresh_once_log():
    rpc._CAPPED_LOGGED.clear()
    yield
    rpc._CAPPED_LOGGED.clear()


def test_history_is_one_line_per_version_and_releases_point_into_it():
    for module in (conductor_rpcapi, agent_rpcapi):
        versions = [version for version, _change in module.HISTORY]
        assert versions == sorted(versions, key=rpc.version_tuple)
        assert len(set(versions)) == len(versions)
        assert module.RPC_API_VERSION == versions[-1]
        assert set(module.RELEASES.values()) <= set(versions)
        assert all('\n' not in change for _v, change in module.HISTORY)


@pytest.mark.parametrize('value, conductor_cap, agent_cap', [
    ('', None, None), ('  ', None, None), ('1.4', '1.4', None),
    ('1.1', None, '1.1'), ('2027.1', '1.4', '1.1')])
def test_caps_resolve(value, conductor_cap, agent_cap):
    if conductor_cap is not None or not value.strip():
        assert conductor_rpcapi.resolve_cap(value) == conductor_cap
    if agent_cap is not None or not value.strip():
        assert agent_rpcapi.resolve_cap(value) == agent_cap


@pytest.mark.parametrize('value', ['1.0', '1.1', '1.3'])
def test_conductor_caps_below_the_oldest_release_are_refused_at_start(
        conf, value):
    """No conductor that old runs beside this release: an API capped
    there could not even create a device profile (it always sends 1.2)."""
    with pytest.raises(ValueError, match='older than the oldest release '
                                         'this one runs beside .2027.1'):
        conductor_rpcapi.resolve_cap(value)
    with pytest.raises(ValueError, match='set 2027.1 or a later version'):
        conf.set_override('conductor', value, group='upgrade_levels')


@pytest.mark.parametrize('value', ['9.9', 'zed', '1', 'latest'])
def test_unknown_caps_are_refused_at_start(conf, value):
    with pytest.raises(ValueError, match='versions: 1.0, 1.1'):
        conductor_rpcapi.resolve_cap(value)
    with pytest.raises(ValueError, match='unknown agent RPC version'):
        conf.set_override('agent', value, group='upgrade_levels')


def test_capped_agent_sends_no_health_report_and_says_so_once(
        conf, caplog, monkeypatch):
    # No release serves below 1.4 any more (the option refuses it); the
    # client still skips what its cap lacks.
    monkeypatch.setattr(conductor_rpcapi, 'resolve_cap', lambda _v: '1.0')
    with agent_endpoint.serving(conf, HOST, None):
        api = conductor_rpcapi.ConductorAPI(conf, timeout=1)
        assert api.can_send('1.0') and not api.can_send('1.1')
        context = cyborg_context.get_admin_context()
        with caplog.at_level(logging.WARNING):
            # No conductor listens: anything sent would time out.
            for _ in range(3):
                assert api.report_health(context, HOST, {
                    'full': True, 'readings': []}) is None
    lines = [r.getMessage() for r in caplog.records
             if 'Not sending report_health' in r.getMessage()]
    assert len(lines) == 1 and 'caps it at 1.0' in lines[0]


def test_agent_caps_below_the_oldest_release_are_refused_at_start(conf):
    with pytest.raises(ValueError, match='agent RPC version 1.0 is older '
                                         'than the oldest release'):
        agent_rpcapi.resolve_cap('1.0')
    with pytest.raises(ValueError, match='set 2027.1 or a later version'):
        conf.set_override('agent', '1.0', group='upgrade_levels')


def test_capped_conductor_neither_probes_nor_asks_preparation(
        conf, caplog, monkeypatch):
    # No release serves below 1.1 any more (the option refuses it); the
    # client still skips what its cap lacks.
    monkeypatch.setattr(agent_rpcapi, 'resolve_cap', lambda _v: '1.0')
    agent = agent_endpoint.RecordingAgent()
    with agent_endpoint.serving(conf, HOST, agent):
        api = agent_rpcapi.AgentAPI(conf, timeout=5)
        context = cyborg_context.get_admin_context()
        with caplog.at_level(logging.WARNING):
            api.probe_health(context, HOST, ['PCI:0000:81:00.0'])
            assert api.prepare_device(context, HOST, 'PCI:0000:81:00.0')
            assert api.prepare_device(context, HOST, 'PCI:0000:81:00.0')
    assert agent.prepared == [] and agent.probes == []
    messages = [r.getMessage() for r in caplog.records]
    assert sum('Not sending prepare_device' in m for m in messages) == 1
    assert sum('Not sending probe_health' in m for m in messages) == 1


def test_uncapped_calls_go_through(conf):
    agent = agent_endpoint.RecordingAgent()
    with agent_endpoint.serving(conf, HOST, agent):
        api = agent_rpcapi.AgentAPI(conf, timeout=5)
        assert api.version_cap is None and api.can_send('1.1')
        assert api.prepare_device(cyborg_context.get_admin_context(), HOST,
                                  'PCI:0000:81:00.0') is True
    assert agent.prepared == ['PCI:0000:81:00.0']


class _RecordingConductor:
    target = messaging.Target(version=conductor_rpcapi.RPC_API_VERSION)

    def __init__(self):
        self.calls = []

    def device_set_status(self, context, **kwargs):
        self.calls.append(kwargs)


@pytest.mark.parametrize('cap, sent', [
    ('', {'wait': 20}), ('1.5', {}), ('2027.1', {})])
def test_the_api_sends_how_long_it_waits_only_to_conductors_that_take_it(
        conf, cap, sent):
    conf.set_override('conductor', cap, group='upgrade_levels')
    conductor = _RecordingConductor()
    with agent_endpoint.serving(conf, HOST, None):
        server = rpc.get_server(conf, conductor_rpcapi.TOPIC, 'c',
                                [conductor])
        server.start()
        try:
            conductor_rpcapi.ConductorAPI(conf, timeout=5).device_set_status(
                cyborg_context.get_admin_context(), 'dev', 'enabled',
                wait=20)
        finally:
            server.stop()
            server.wait()
    assert conductor.calls == [
        dict({'device_uuid': 'dev', 'status': 'enabled'}, **sent)]
