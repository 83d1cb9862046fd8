"""The cyborg-agent process tells systemd it is ready (``Type=notify``:
nova-compute, ordered after it, starts then) once the mdevs of the
host's Bound ARQs are made again, or ``[agent]ready_timeout`` seconds
after it started when the conductor has not answered by then.

The process's services as ``cmd.agent.build_process_services`` makes
them, started and stopped in order as its launcher does, against the
real conductor (fake:// RPC, a real database, the real Placement), on
the fake sysfs tree of ``test_mdevs``; systemd's socket is a real one
(a path and an abstract name)."""

import contextlib
import logging
import socket
import threading
import time

import pytest

from cyborg.agent import manager as agent_manager
from cyborg.agent import mdevs as agent_mdevs
from cyborg.agent import reporter as agent_reporter
from cyborg.cmd import agent as agent_cmd
from cyborg.conductor import rpcapi as conductor_rpcapi
from tests.unit.agent import test_mdevs
from tests.unit.agent.test_mdevs import kernel  # noqa: F401
from tests.unit.common.test_systemd import notify_socket  # noqa: F401

HOST = test_mdevs.HOST
WAITING = {'STATUS': 'waiting for the conductor to list bound mdevs'}
STOPPING = [{'STOPPING': '1'}]


def _made(count, failed=0, listed=1):
    return {'STATUS': f'mdevs of bound accelerator requests: {count} made '
                      f'again, {failed} failed, of {listed} listed'}


@pytest.fixture
def agent_conf(conf):
    conf.set_override('host', HOST)
    conf.set_override('hotplug', False, 'agent')
    conf.set_override('enabled', False, 'health')
    return conf


def _process(conf):
    """The cyborg-agent process's services and its endpoint."""
    services = agent_cmd.build_process_services(conf)
    rpc_service = next(s for s in services if hasattr(s, '_server'))
    manager = next(e for e in rpc_service._server.dispatcher.endpoints
                   if isinstance(e, agent_manager.AgentManager))
    return services, manager


@contextlib.contextmanager
def _running(services):
    """Started in order, stopped in reverse, as the launcher does."""
    started = []
    try:
        for service in services:
            service.start()
            started.append(service)
        yield
    finally:
        for service in reversed(started):
            if isinstance(service, agent_reporter.Reporter):
                service.stop(timeout=10)
            else:
                service.stop()
            if hasattr(service, 'wait'):
                service.wait()


def _extend(conf):
    return str(int((conf.agent.ready_timeout + 10) * 1e6))


def test_ready_once_the_bound_mdevs_are_made(agent_conf, kernel,  # noqa: F811
                                             conductor, notify_socket):  # noqa: F811
    """After a reboot: systemd hears the agent wait while the conductor
    lists the mdevs, and READY=1 once they are made, saying how many."""
    bound = test_mdevs._running_host(agent_conf, kernel, conductor)
    kernel.reboot()
    services, manager = _process(agent_conf)
    assert isinstance(services[0], agent_mdevs.Readiness)

    heard_while_listing = []
    listing = threading.Event()

    class Listing(conductor_rpcapi.ConductorAPI):
        """The conductor's client; what systemd heard as it is asked."""

        def bound_mdevs(self, context, hostname):
            heard_while_listing.extend(notify_socket.pending())
            listing.set()
            return super().bound_mdevs(context, hostname)

    manager.mdevs._conductor = Listing(agent_conf, timeout=10)
    with _running(services):
        assert listing.wait(30)
        ready = notify_socket.next()
        made_when_ready = kernel.mdevs()
    assert heard_while_listing == [
        dict(WAITING, EXTEND_TIMEOUT_USEC=_extend(agent_conf))]
    assert ready == dict(_made(1), READY='1')
    assert made_when_ready == sorted(bound)
    assert notify_socket.pending() == STOPPING


def test_ready_after_the_timeout_when_the_conductor_does_not_answer(
        agent_conf, kernel, conductor, notify_socket, caplog):  # noqa: F811
    """The control plane away at boot: READY=1 after [agent]ready_timeout
    anyway, with a WARNING, so nova-compute is not held for ever; the
    mdevs are made once the conductor answers, and systemd told so."""
    bound = test_mdevs._running_host(agent_conf, kernel, conductor)
    kernel.reboot()
    conductor.stop()
    agent_conf.set_override('rpc_response_timeout', 1)
    agent_conf.set_override('ready_timeout', 0.5, 'agent')
    caplog.set_level(logging.WARNING, logger=agent_mdevs.__name__)
    services, _manager = _process(agent_conf)
    started = time.monotonic()
    with _running(services):
        assert notify_socket.next() == dict(
            WAITING, EXTEND_TIMEOUT_USEC=_extend(agent_conf))
        ready = notify_socket.next()
        waited = time.monotonic() - started
        assert kernel.mdevs() == []
        warnings = [r.getMessage() for r in caplog.records
                    if r.levelname == 'WARNING']
        conductor.start()
        made = notify_socket.next()
        made_then = kernel.mdevs()
    assert ready == {'READY': '1', 'STATUS': agent_mdevs._READY_LATE}
    assert waited >= 0.5
    assert len(warnings) == 1, warnings
    assert 'ready_timeout (0.5 s)' in warnings[0] and HOST in warnings[0]
    assert made == _made(1)
    assert made_then == sorted(bound)
    assert notify_socket.pending() == STOPPING


@pytest.mark.parametrize('why', ['no driver makes mdevs', 'timeout 0'])
def test_ready_at_once_when_there_is_nothing_to_wait_for(
        agent_conf, conductor, notify_socket, why):  # noqa: F811
    """No enabled driver makes mdevs, or [agent]ready_timeout is 0:
    READY=1 as the process starts, whether the conductor answers or
    not."""
    conductor.stop()
    if why == 'timeout 0':
        agent_conf.set_override('ready_timeout', 0, 'agent')
        agent_conf.set_override('enabled_drivers', ['nvidia_gpu_driver'],
                                'agent')
        agent_conf.set_override('nvml_module', 'no_nvml_here', 'agent')
        status = agent_mdevs._READY_AT_ONCE
    else:
        agent_conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
        status = 'no enabled driver makes mdevs: none to make again'
    services, _manager = _process(agent_conf)
    with _running(services[:1]):
        pass
    assert notify_socket.pending() == [
        {'READY': '1', 'STATUS': status}] + STOPPING


def test_nothing_is_told_or_waited_for_without_systemd(
        agent_conf, kernel, conductor, monkeypatch, caplog):  # noqa: F811
    """Not started by a unit of Type=notify (no $NOTIFY_SOCKET: devstack's
    units, a shell): no timer, no WARNING, and the agent starts as
    before."""
    monkeypatch.delenv('NOTIFY_SOCKET', raising=False)
    bound = test_mdevs._running_host(agent_conf, kernel, conductor)
    kernel.reboot()
    agent_conf.set_override('ready_timeout', 0.01, 'agent')
    caplog.set_level(logging.DEBUG, logger=agent_mdevs.__name__)
    services, _manager = _process(agent_conf)
    readiness, reporter = services[0], services[2]
    with _running(services):
        assert not any(t.name == 'cyborg-agent-ready'
                       for t in threading.enumerate())
        test_mdevs._wait_for(lambda: reporter.reports_acknowledged > 0)
    assert kernel.mdevs() == sorted(bound)
    assert not readiness.said_ready
    assert [r for r in caplog.records if 'ready' in r.getMessage()] == []


def test_ready_is_said_again_until_systemd_hears_it(agent_conf, tmp_path,
                                                    monkeypatch):
    """READY=1 that systemd did not hear (its socket not there for a
    moment, or full) is said again: said once and lost, systemd would
    give up on the start at its timeout and kill the agent."""
    address = str(tmp_path / 'notify')
    monkeypatch.setenv('NOTIFY_SOCKET', address)
    monkeypatch.setattr(agent_mdevs, '_SAY_AGAIN', 0.05)
    agent_conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
    readiness = agent_mdevs.Readiness(
        agent_conf, agent_mdevs.Mdevs(agent_conf, HOST, {}))
    readiness.start()
    try:
        assert not readiness.said_ready     # nobody listens yet
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind(address)
        listener.settimeout(10)
        try:
            heard = listener.recv(4096).decode()
        finally:
            listener.close()
    finally:
        readiness.stop()
    assert heard.split('\n')[0] == 'READY=1'
    assert readiness.said_ready
