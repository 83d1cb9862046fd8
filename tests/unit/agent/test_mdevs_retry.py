"""The mdevs of Bound ARQs the agent could not make again at start (a
GPU's driver not ready yet at boot: no ``mdev_supported_types``, its
SR-IOV VFs not enabled yet) are tried again before each later report,
asking the conductor again which are still bound.

Against the real conductor (fake:// RPC, a real database, the real
Placement), the agent as ``cmd.agent`` makes it, on the fake sysfs tree
of ``test_mdevs`` whose privileged writes run in process."""

import logging
import os

import oslo_messaging as messaging
import sqlalchemy as sa

from cyborg.agent import mdevs as agent_mdevs
from cyborg.common import metrics
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from tests.unit.agent import test_mdevs
from tests.unit.agent import test_ready
from tests.unit.agent.test_mdevs import kernel  # noqa: F401
from tests.unit.common.test_systemd import notify_socket  # noqa: F401

GPU = test_mdevs.GPU
HOST = test_mdevs.HOST
TWO = ('nvidia-223', 'nvidia-223')
NOT_MADE = 'cyborg_agent_bound_mdevs_not_made'
_wait_for = test_mdevs._wait_for


def _not_made():
    return metrics.REGISTRY.get_sample_value(NOT_MADE, {'host': HOST})


def _served():
    """The line the agent's metrics port serves for the gauge."""
    _type, body = metrics.render(metrics.AGENT)
    lines = [line for line in body.decode().splitlines()
             if line.startswith(NOT_MADE + '{host="%s"} ' % HOST)]
    assert len(lines) == 1, body
    return float(lines[0].split()[1])


class Types:
    """The GPU's ``mdev_supported_types``, which its driver (nvidia)
    creates only once it has bound the GPU: taken away, put back."""

    def __init__(self, kernel, tmp_path):  # noqa: F811
        self.path = os.path.join(kernel.tree.device_path(GPU),
                                 'mdev_supported_types')
        self.aside = str(tmp_path / 'types-aside')

    def away(self):
        os.rename(self.path, self.aside)

    def back(self):
        os.rename(self.aside, self.path)


def _started(reporter):
    """Start the reporter and wait for its first acknowledged report."""
    reporter.start()
    _wait_for(lambda: reporter.reports_acknowledged > 0)


def _next_report(reporter, until=lambda: True):
    """Ask for a report and wait for one acknowledged after it (and
    ``until``)."""
    count = reporter.reports_acknowledged
    reporter.request_report()
    _wait_for(lambda: reporter.reports_acknowledged > count and until())


def _unbind(engine, arq):
    """The conductor's unbind, as the database keeps it."""
    with sa.orm.Session(engine) as session, session.begin():
        found = session.scalars(sa.select(models.ExtARQ).where(
            models.ExtARQ.uuid == arq)).one()
        found.state = 'Unbound'
        found.attach_handle_id = None


def _warnings(caplog, mdev_uuid):
    return [r for r in caplog.records
            if r.levelname == 'WARNING' and r.name == agent_mdevs.__name__
            and mdev_uuid in r.getMessage()]


def test_mdevs_whose_types_appear_later_are_made_at_the_next_report(
        conf, kernel, conductor, tmp_path, caplog):  # noqa: F811
    """At boot the agent starts before the GPU's driver created its
    ``mdev_supported_types``: neither vGPU can be made (NotFound), one
    WARNING each, and the gauge says 2.  Reports meanwhile log nothing
    new; once the types appear, the next report makes both (INFO) and
    the gauge goes to 0, also as the agent's port serves it."""
    bound = test_mdevs._running_host(conf, kernel, conductor, types=TWO)
    kernel.reboot()
    types = Types(kernel, tmp_path)
    types.away()
    caplog.set_level(logging.DEBUG, logger=agent_mdevs.__name__)
    reporter, manager = test_mdevs._agent(conf)
    try:
        _started(reporter)
        assert sorted(manager.mdevs.failed) == sorted(bound)
        assert _not_made() == 2 and _served() == 2
        for _ in range(2):
            _next_report(reporter)
        assert kernel.mdevs() == []
        assert _not_made() == 2
        for handle in bound:
            assert len(_warnings(caplog, handle)) == 1, handle

        types.back()
        _next_report(reporter, until=lambda: kernel.mdevs() == sorted(bound))
        # The report after the mdevs were made offers what the host
        # offered before the reboot: 223 only.
        _next_report(reporter)
    finally:
        reporter.stop(timeout=10)
    assert manager.mdevs.failed == {}
    assert _not_made() == 0 and _served() == 0
    assert sorted(manager.mdevs.made) == sorted(bound)
    made = [r.getMessage() for r in caplog.records
            if r.levelname == 'INFO' and 'at last' in r.getMessage()]
    assert sorted(m.split()[2] for m in made) == sorted(bound)
    assert conductor.deployables() == {f'{HOST}_{GPU}_nvidia-222': 0,
                                       f'{HOST}_{GPU}_nvidia-223': 8}


def test_an_arq_unbound_between_attempts_is_not_made(
        conf, kernel, conductor, tmp_path):  # noqa: F811
    """Three vGPUs failed at start.  Before the next attempt one ARQ is
    unbound (the conductor no longer lists it), and another's unbind
    reaches the agent as the conductor answers (listed still, removed
    after): neither is made; the third is, and none is tried again."""
    bound = test_mdevs._running_host(conf, kernel, conductor,
                                     types=TWO + ('nvidia-223',))
    (gone, gone_arq), (racing, _arq), (kept, _arq2) = bound.items()
    kernel.reboot()
    types = Types(kernel, tmp_path)
    types.away()
    reporter, manager = test_mdevs._agent(conf)
    asked = []

    class Racing(conductor_rpcapi.ConductorAPI):
        """The conductor's client; an unbind's removal arrives as it
        answers the retry."""

        def bound_mdevs(self, context, hostname):
            listed = super().bound_mdevs(context, hostname)
            if manager.mdevs.restored:
                asked.append([m['mdev_uuid'] for m in listed])
                manager.remove_vgpu_mdev(context, GPU, racing, 'nvidia-223')
            return listed

    manager.mdevs._conductor = Racing(conf, timeout=10)
    try:
        _started(reporter)
        assert sorted(manager.mdevs.failed) == sorted(bound)
        assert _not_made() == 3
        _unbind(conductor.engine, gone_arq)
        types.back()
        _next_report(reporter, until=lambda: bool(asked))
        _next_report(reporter)
    finally:
        reporter.stop(timeout=10)
    assert sorted(asked[0]) == sorted([racing, kept])
    assert kernel.mdevs() == [kept]
    assert manager.mdevs.failed == {}
    assert _not_made() == 0
    # Nothing failed any more: the conductor was asked once.
    assert len(asked) == 1


def test_a_conductor_away_during_a_retry_does_not_stop_the_report(
        conf, kernel, conductor, tmp_path, caplog):  # noqa: F811
    """The conductor does not answer the retry's question: the report
    goes out all the same, the failed mdev stays counted, and it is made
    at the report after the conductor answers again."""
    bound = test_mdevs._running_host(conf, kernel, conductor)
    (handle, _arq), = bound.items()
    kernel.reboot()
    types = Types(kernel, tmp_path)
    types.away()
    reporter, manager = test_mdevs._agent(conf)
    state = {'away': False, 'unanswered': 0}

    class Away(conductor_rpcapi.ConductorAPI):
        """The conductor's client: no answer while it is away."""

        def bound_mdevs(self, context, hostname):
            if state['away']:
                state['unanswered'] += 1
                raise messaging.MessagingTimeout('no reply in time')
            return super().bound_mdevs(context, hostname)

    manager.mdevs._conductor = Away(conf, timeout=10)
    caplog.set_level(logging.INFO, logger=agent_mdevs.__name__)
    try:
        _started(reporter)
        state['away'] = True
        types.back()
        for _ in range(2):
            _next_report(reporter)
        # Asked before the first of them; not again before
        # [DEFAULT]periodic_interval has passed (a hung conductor holds
        # each ask, and its report, for the RPC timeout).
        assert state['unanswered'] == 1
        assert kernel.mdevs() == []
        assert _not_made() == 1
        told = [r for r in caplog.records
                if 'no reply in time' in r.getMessage()]
        assert [r.levelname for r in told] == ['INFO']
        assert told[0].getMessage().endswith(
            'asking again before a report in %d s or more.'
            % conf.periodic_interval)

        state['away'] = False
        manager.mdevs._ask_after = 0.0      # the interval has passed
        _next_report(reporter, until=lambda: kernel.mdevs() == [handle])
    finally:
        reporter.stop(timeout=10)
    assert manager.mdevs.failed == {}
    assert _not_made() == 0


def test_systemd_is_told_of_a_retry_but_ready_only_once(
        conf, kernel, conductor, tmp_path, notify_socket):  # noqa: F811
    """READY=1 follows the first attempt, one mdev failed; once it is
    made at a later report, the status systemd shows says so, with no
    second READY=1."""
    conf.set_override('host', HOST)
    conf.set_override('hotplug', False, 'agent')
    conf.set_override('enabled', False, 'health')
    bound = test_mdevs._running_host(conf, kernel, conductor)
    kernel.reboot()
    types = Types(kernel, tmp_path)
    types.away()
    services, _manager = test_ready._process(conf)
    reporter = services[2]
    with test_ready._running(services):
        notify_socket.next()                # waiting for the conductor
        ready = notify_socket.next()
        _wait_for(lambda: reporter.reports_acknowledged > 0)
        types.back()
        _next_report(reporter, until=lambda: kernel.mdevs() == sorted(bound))
        retried = notify_socket.next()
    assert ready == dict(READY='1', STATUS=(
        'mdevs of bound accelerator requests: 0 made again, 1 failed, of '
        '1 listed; the failed ones are tried again before each report'))
    assert retried == test_ready._made(1)
    assert notify_socket.pending() == test_ready.STOPPING
