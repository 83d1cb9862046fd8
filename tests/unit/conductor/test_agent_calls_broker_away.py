"""The conductor's calls and casts to agents while RabbitMQ is away (a TCP
proxy in front of a virtual host of the test's own, the agent served in
this process over it).

They were sent with oslo.messaging's default retry, for ever: a call
ignored its timeout ([conductor]mdev_timeout, the bind's time left, the
preparation's) and held its thread (a bind worker, an RPC thread, the
health timers) for the whole outage, then went out once the broker was
back, long after its caller had given up: an mdev made for a bind that
had failed, a device prepared after the API answered 503.  A first call
made before the conductor ever reached the broker hung the same way
opening its reply queue.  Now each fails within seconds, says that the
broker cannot be reached, and nothing reaches the agent later."""

import contextlib
import time

import oslo_messaging as messaging
import pytest

from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import arq_binding
from cyborg.conductor import device_status
from cyborg.conductor import manager
from cyborg.db.api import attach_handles as handle_db
from tests.fixtures import arqs as seed
from tests.fixtures.placement import placement  # noqa: F401
from tests.unit.agent import test_reporter_faults as reporter_faults
from tests.unit.conductor import agent_endpoint
from tests.unit.conductor import test_arq_vgpu as vgpu
from tests.unit.conductor import test_health_lifecycle as lifecycle
from tests.unit.conductor import test_mdev_agent_down as mdev_down
from tests.unit.conductor import test_programming as programming

broker = reporter_faults.broker
_outcome = reporter_faults._outcome
placement_url, tree, vconf = vgpu.placement_url, vgpu.tree, vgpu.vconf
pconf = lifecycle.pconf
glance = programming.glance

# What a call or cast may take with the broker away: its retries (a
# second or so apart), or the wait for the reply queue (3 s).
FAILS_WITHIN = 8
# Longer than any of them would be held before: the outage's length.
OUTAGE = 20


def _unreached(host):
    return (f'the agent on {host} was not reached: the message broker '
            f'cannot be reached')


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


@contextlib.contextmanager
def _agent(conf, host, agent):
    """Serve ``agent`` as ``host`` over the broker's transport; the
    process reconnects to a broker that came back as the conductor does
    (``rpc.reconnect_fast``)."""
    rpc.reconnect_fast(conf)
    server = rpc.get_server(conf, agent_rpcapi.TOPIC, host, [agent])
    server.start()
    try:
        yield agent
    finally:
        server.stop()
        server.wait()


def _reached_again(conf, ctx, host, key):
    """Prepare ``key`` on ``host`` until the agent answers (the broker is
    back and the agent's server consumes again)."""
    for _ in range(30):
        try:
            return agent_rpcapi.AgentAPI(conf, timeout=2).prepare_device(
                ctx, host, key)
        except messaging.MessagingException:
            time.sleep(0.5)
    raise AssertionError(f'the agent on {host} is not reached again')


def _reply_queue_open(transport):
    """Once the broker is back, the reply queue opened in the background
    opens (before the transport is cleaned up)."""
    rpc.wait_reply_queue(transport, 30)


def test_enabling_a_device_with_the_broker_away_is_a_503_at_once(
        pconf, db, admin_context, placement, broker):  # noqa: F811
    """The preparation's call failed only when the broker came back: the
    API had answered 503 long before, and the agent then prepared the
    device (and the conductor enabled it)."""
    lifecycle._maintaining_host(pconf, admin_context)
    host = lifecycle.HOST
    with _agent(pconf, host, agent_endpoint.RecordingAgent()) as agent:
        # The conductor reached the agent before: its reply queue is open,
        # its connection to the broker made.
        assert _reached_again(pconf, admin_context, host, 'PCI:before')
        broker.cut()
        started = time.monotonic()
        outcome = _outcome(lambda: device_status.set_status(
            pconf, admin_context, lifecycle.FPGA_DEV, 'enabled'), OUTAGE)
        took = time.monotonic() - started
        broker.restore()
        assert isinstance(outcome, exception.ServiceUnavailable), outcome
        assert str(outcome).endswith(
            f'{_unreached(host)}; the device stays maintaining'), outcome
        assert took < FAILS_WITHIN, took
        assert _reached_again(pconf, admin_context, host, 'PCI:after')
        time.sleep(1)
    # Nothing reached the agent once the broker was back.
    assert agent.prepared == ['PCI:before', 'PCI:after']
    assert lifecycle._statuses(db)[lifecycle.FPGA_DEV] == 'maintaining'
    assert lifecycle._reserved(placement, lifecycle.FPGA) == 4


def test_a_vgpu_bind_with_the_broker_away_fails_at_once(vconf, db, ctx, tree,
                                                        broker):
    """The conductor had not reached the broker since it started (its
    reply queue not open): the bind worker hung for the whole outage,
    whatever [conductor]mdev_timeout, then asked for the mdev."""
    transport = rpc._TRANSPORT      # the broker fixture's
    device = seed.seed_device(db, hostname=vgpu.HOST, handles=1,
                              attach_type='MDEV', asked_type=vgpu.VGPU_TYPE)
    broker.cut()
    started = time.monotonic()
    outcome = _outcome(lambda: mdev_down._bind_one(vconf, db, ctx, device),
                       OUTAGE)
    took = time.monotonic() - started
    broker.restore()
    assert outcome in seed.arq_rows(db), outcome
    row = seed.arq_rows(db)[outcome]
    assert (row.state, row.bind_failure_reason) == (
        'BindFailed', _unreached(vgpu.HOST))
    assert took < FAILS_WITHIN, took
    assert seed.handles_in_use(db) == 0
    _reply_queue_open(transport)


def test_an_mdev_removal_with_the_broker_away_ends_unbind_failed(
        vconf, db, ctx, tree, broker):
    """As the agent's refusal would: the mdev is kept with its handle,
    and the reason says the broker was not reached."""
    transport = rpc._TRANSPORT
    _instance, arqs, _device = mdev_down._bound(vconf, db, ctx, 1)
    rpc.set_transport(transport)    # the bind's agent was on fake://
    mdev = handle_db.get(ctx, seed.arq_rows(db)[arqs[0]].attach_handle_id)
    broker.cut()
    started = time.monotonic()
    outcome = _outcome(lambda: arq_binding.unbind(vconf, ctx, arqs), OUTAGE)
    took = time.monotonic() - started
    broker.restore()
    assert outcome is None, outcome
    assert took < FAILS_WITHIN, took
    row = seed.arq_rows(db)[arqs[0]]
    assert (row.state, row.bind_failure_reason) == (
        'UnbindFailed',
        f'{_unreached(vgpu.HOST)}: mdev {mdev.uuid} was not removed')
    assert seed.handles_in_use(db) == 1
    _reply_queue_open(transport)


@pytest.fixture
def fpga_conf(conf, db, placement_url, glance, tmp_path):
    return programming.pconf.__wrapped__(conf, db, placement_url, glance,
                                         tmp_path)


def test_an_admin_program_with_the_broker_away_is_a_503(
        fpga_conf, db, ctx, glance, broker):
    """The agent's call failed with MessageDeliveryFailure, which the
    programming re-raised as it was: the admin's PATCH answered 500.  It
    is a 503 saying nothing was programmed, and the card is as it was:
    not marked, not taken out."""
    transport = rpc._TRANSPORT
    device = programming._reported(fpga_conf, db, handles=1)
    image = glance.add_image(b'never sent' * 10)
    endpoint = manager.ConductorManager(fpga_conf, 'c1')
    broker.cut()
    started = time.monotonic()
    outcome = _outcome(lambda: endpoint.deployable_program(
        ctx, device.deployable_uuid, image), OUTAGE)
    took = time.monotonic() - started
    broker.restore()
    assert isinstance(outcome, messaging.ExpectedException), outcome
    error = outcome.exc_info[1]
    assert isinstance(error, exception.ServiceUnavailable), error
    assert str(error).endswith(
        f'{_unreached(programming.HOST)}; 0000:0c:00.0 was not '
        f'programmed'), error
    assert took < FAILS_WITHIN + 2, took
    assert programming._bitstream(ctx, device) is None
    assert programming._provider(fpga_conf, device.rp_uuid)[0] == 0
    _reply_queue_open(transport)


def test_a_program_call_published_perhaps_is_an_unknown_outcome(
        fpga_conf, db, ctx, glance, broker):
    """The reply queue open, the call is published to a broker that then
    fails: one that hung rather than stopped delivers it once it
    recovers, after the conductor released the card.  So the outcome is
    unknown (the card out until a re-probe), not "nothing was sent"."""
    transport = rpc._TRANSPORT
    rpc.wait_reply_queue(transport, 30)
    device = programming._reported(fpga_conf, db, handles=1)
    image = glance.add_image(b'maybe sent' * 10)
    endpoint = manager.ConductorManager(fpga_conf, 'c1')
    broker.cut()
    outcome = _outcome(lambda: endpoint.deployable_program(
        ctx, device.deployable_uuid, image), OUTAGE)
    broker.restore()
    assert isinstance(outcome, messaging.ExpectedException), outcome
    error = outcome.exc_info[1]
    assert isinstance(error, exception.ProgrammingUnfinished), error
    assert 'may still reach it' in str(error), error
    assert programming._bitstream(ctx, device) is None


def test_a_probe_cast_with_the_broker_away_fails_at_once(conf, broker):
    """The health timers' thread casts the re-probes: one cast held it,
    and every timer of every host, for the whole outage."""
    broker.cut()
    started = time.monotonic()
    outcome = _outcome(lambda: agent_rpcapi.AgentAPI(conf).probe_health(
        cyborg_context.get_admin_context(), 'host1', ['PCI:0000:82:00.0']),
        OUTAGE)
    took = time.monotonic() - started
    assert isinstance(outcome, messaging.MessageDeliveryFailure), outcome
    assert agent_rpcapi.not_reached(outcome, 'host1') == _unreached('host1')
    assert took < FAILS_WITHIN, took


def test_an_agent_s_own_failure_is_not_taken_for_the_broker():
    """Only a message that was not sent is "not reached": a timeout or the
    agent's own error is not."""
    assert agent_rpcapi.not_reached(
        messaging.MessagingTimeout('no reply'), 'h') is None
    assert agent_rpcapi.not_reached(
        messaging.RemoteError('OSError', 'disk full'), 'h') is None
    assert agent_rpcapi.not_reached(OSError('disk full'), 'h') is None
