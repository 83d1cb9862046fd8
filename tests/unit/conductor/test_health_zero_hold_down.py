"""A zero ``[health]hold_down`` on a host whose agent watches no health
(it sends no readings, yet answers re-probes): an FPGA the conductor took
out for a programming whose outcome is unknown is re-probed again after
each failed re-probe, however it failed, rather than wait for a good
reading that never comes (it stayed out until an admin enabled the
device).  One an agent's reading took out (its agent watches health) is
re-probed at its next good reading, after a failed re-probe as after
the reading, rather than a probe_timeout later.  The real conductor
health code, the database, the real (embedded) Placement and the
conductor's agent RPC client talking to a recording agent endpoint over
fake://."""

import datetime

import pytest
import sqlalchemy as sa

from cyborg.common import context as cyborg_context
from cyborg.common import states
from cyborg.conductor import health
from cyborg.conductor import programming
from cyborg.db import models
from cyborg.db.api import deployables as deployable_db
from cyborg.objects.health import PROBE_NOT_YET
from cyborg.placement import client as placement_client
from tests.fixtures import placement as placement_fixture
from tests.unit.conductor import agent_endpoint
from tests.unit.conductor import test_programming as tp

placement_url = tp.placement_url

KEY = 'PCI:0000:0c:00.0'
PROBE_TIMEOUT = 30


@pytest.fixture
def zconf(conf, db, placement_url):
    placement_fixture.placement_conf(conf, placement_url)
    placement_client.reset_clients()
    conf.set_override('hold_down', 0, 'health')
    conf.set_override('probe_timeout', PROBE_TIMEOUT, 'health')
    return conf


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


@pytest.fixture
def device(zconf, db):
    return tp._reported(zconf, db, handles=2)


@pytest.fixture
def agent(zconf):
    with agent_endpoint.serving(zconf, tp.HOST,
                                agent_endpoint.RecordingAgent()) as served:
        yield served


def _age(db, seconds):
    """Time passes: every pending health step is ``seconds`` nearer."""
    delta = datetime.timedelta(seconds=seconds)
    with db.begin() as c:
        for table in (models.Device.__table__, models.Deployable.__table__):
            for row in c.execute(sa.select(table.c.id, table.c.health_due_at)
                                 .where(table.c.health_due_at.is_not(None))):
                c.execute(sa.update(table).where(table.c.id == row.id)
                          .values(health_due_at=row.health_due_at - delta))


def _due_at(db, device):
    with db.connect() as c:
        return c.execute(sa.select(models.Deployable.health_due_at).where(
            models.Deployable.id == device.deployable_id)).scalar()


def _code(db, device):
    with db.connect() as c:
        return c.execute(sa.select(models.Deployable.health_code).where(
            models.Deployable.id == device.deployable_id)).scalar()


def _written_by_the_previous_release(db, device):
    """The deployable's row as a conductor of the previous release
    leaves it: no code (a rolling upgrade)."""
    with db.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(health_code=None))


def _reading(conf, ctx, device, severity, reason='reading'):
    """A reading of the agent's health watching for the deployable."""
    health.handle_report(conf, ctx, tp.HOST, {'full': False, 'readings': [
        {'device': KEY, 'severity': severity, 'source': 'fpga',
         'deployable': device.name, 'reason': reason}]})


def _verdict(conf, ctx, severity, about, code=None, reason='verdict'):
    """The agent's answer to a re-probe: ``severity`` for the device
    (None in ``about``) and the deployables named in ``about``."""
    health.handle_report(conf, ctx, tp.HOST, {'full': False, 'readings': [
        {'device': KEY, 'severity': severity, 'source': 'probe',
         'deployable': deployable, 'reason': reason, 'code': code}
        for deployable in about]})


def _probed(agent, times):
    assert agent.probed.wait(10)
    assert agent.probes == [[KEY]] * times
    agent.probed.clear()


def _take_out(conf, ctx, device):
    target = deployable_db.program_target(ctx, device.deployable_uuid)
    programming._out_until_probed(conf, ctx, target, None,
                                  'programming with image x did not end')


def _not_yet(conf, ctx, db, device):
    # The tool still runs: "not yet", for the device and its deployable.
    _verdict(conf, ctx, states.TRANSIENT, (None, device.name),
             code=PROBE_NOT_YET, reason='being programmed')


def _no_verdict(conf, ctx, db, device):
    # The agent does not answer within [health]probe_timeout.
    _age(db, PROBE_TIMEOUT + 1)
    assert health.run_timers(conf, ctx) == 1


def _own_fault(conf, ctx, db, device):
    # A fault verdict of the deployable's own.
    _verdict(conf, ctx, states.FATAL, (device.name,))


def _device_fault(conf, ctx, db, device):
    # The device's fault verdict, the deployable's too (it has none of
    # its own); the device was healthy: out as well.
    _verdict(conf, ctx, states.FATAL, (None,))


def _unfinished_again(conf, ctx, db, device):
    # The conductor's own reading again (another programming whose
    # outcome is unknown) while it is probed.
    _take_out(conf, ctx, device)


@pytest.mark.parametrize('fail', [_not_yet, _no_verdict, _own_fault,
                                  _device_fault, _unfinished_again])
def test_a_failed_re_probe_is_re_probed_again_with_a_zero_hold_down(
        zconf, ctx, db, device, agent, fail):
    # Out, and (a zero hold-down) re-probed at once.
    _take_out(zconf, ctx, device)
    assert tp._health(db, device)[0] == 'probing'
    assert tp._provider(zconf, device.rp_uuid)[0] == 2
    _probed(agent, 1)
    fail(zconf, ctx, db, device)
    assert tp._health(db, device)[0] == 'unhealthy'
    # The next re-probe is scheduled, no good reading needed: a
    # probe_timeout later (not at every tick).
    assert _due_at(db, device) is not None, 'no re-probe scheduled'
    assert _code(db, device).startswith(('conductor:',
                                         'program:unfinished'))
    _age(db, PROBE_TIMEOUT - 1)
    assert health.run_timers(zconf, ctx) == 0
    _age(db, 1)
    assert health.run_timers(zconf, ctx) == 1
    assert tp._health(db, device)[0] == 'probing'
    _probed(agent, 2)
    # The card works: a good verdict re-admits it.  Its device, out for
    # the fault verdict of before, reads well by it: re-probed at once.
    _verdict(zconf, ctx, states.OK, (None,))
    if fail is _device_fault:
        assert tp._device_health(db, device) == 'probing'
        _probed(agent, 3)
        _verdict(zconf, ctx, states.OK, (None,))
    assert tp._health(db, device) == ('healthy', None)
    assert tp._device_health(db, device) == 'healthy'
    reserved, traits = tp._provider(zconf, device.rp_uuid)
    assert reserved == 0 and states.UNHEALTHY_TRAIT not in traits


@pytest.mark.parametrize('fail', [_not_yet, _no_verdict, _own_fault])
def test_what_a_reading_took_out_is_re_probed_at_its_next_good_reading(
        zconf, ctx, db, device, agent, fail):
    # The agent's health watching reads a fault: out, until a good
    # reading re-probes it (a zero hold-down: at once).
    _reading(zconf, ctx, device, states.FATAL, 'region error')
    assert tp._health(db, device) == ('unhealthy', 'region error')
    assert _code(db, device) == 'fault'
    _reading(zconf, ctx, device, states.OK)
    assert tp._health(db, device)[0] == 'probing'
    _probed(agent, 1)
    fail(zconf, ctx, db, device)
    assert tp._health(db, device)[0] == 'unhealthy'
    assert _code(db, device) in ('probe:failed', 'probe:no-verdict')
    # No timer re-probes it: the next good reading does, at once.
    assert _due_at(db, device) is None
    _age(db, PROBE_TIMEOUT * 10)
    assert health.run_timers(zconf, ctx) == 0
    _reading(zconf, ctx, device, states.OK)
    assert tp._health(db, device)[0] == 'probing'
    _probed(agent, 2)
    _verdict(zconf, ctx, states.OK, (None, device.name))
    assert tp._health(db, device) == ('healthy', None)
    assert _code(db, device) is None
    reserved, traits = tp._provider(zconf, device.rp_uuid)
    assert reserved == 0 and states.UNHEALTHY_TRAIT not in traits


def test_a_record_the_previous_release_wrote_is_read_as_it_was(
        zconf, ctx, db, device, agent):
    """Out since a conductor of the previous release took it out (no
    code; its reason does not say who did): re-probed a probe_timeout
    after a failed re-probe, as that release did, whoever took it out;
    and one whose re-probe that release found timed out (no code, the
    reason says so) is re-admitted by the late good verdict."""
    _reading(zconf, ctx, device, states.FATAL, 'region error')
    _written_by_the_previous_release(db, device)
    _reading(zconf, ctx, device, states.OK)
    assert tp._health(db, device)[0] == 'probing'
    _probed(agent, 1)
    _no_verdict(zconf, ctx, db, device)
    assert tp._health(db, device) == ('unhealthy',
                                      'no re-probe verdict within 30 s')
    assert _code(db, device) == 'conductor:no-verdict'
    _age(db, PROBE_TIMEOUT - 1)
    assert health.run_timers(zconf, ctx) == 0
    _age(db, 1)
    assert health.run_timers(zconf, ctx) == 1
    _probed(agent, 2)
    _no_verdict(zconf, ctx, db, device)
    _written_by_the_previous_release(db, device)
    # The agent was away: its answer to the re-probe comes late.
    _verdict(zconf, ctx, states.OK, (None, device.name))
    assert tp._health(db, device) == ('healthy', None)
    reserved, traits = tp._provider(zconf, device.rp_uuid)
    assert reserved == 0 and states.UNHEALTHY_TRAIT not in traits
