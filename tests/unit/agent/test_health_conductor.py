"""The agent's health monitor against the real conductor (fake:// RPC, real
Placement): a fault injected into the fake driver takes the device out of
the schedule, and once it reads well the conductor's re-probe, answered
by the agent, brings it back."""

import json
import time

import requests
import sqlalchemy as sa

from cyborg.agent import health as agent_health
from cyborg.agent import manager as agent_manager
from cyborg.agent import reporter as agent_reporter
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import context as cyborg_context
from cyborg.common import service
from cyborg.common import states
from cyborg.conductor import health as conductor_health
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.drivers import fake
from cyborg.drivers import loader
from tests.fixtures import placement as placement_fixture
from tests.fixtures import sysfs as fake_sysfs

HOST = fake_sysfs.HOST
FAKE = f'{HOST}_FakeDevice'


def _device_health(engine):
    with engine.connect() as c:
        return c.execute(sa.select(models.Device.health)
                         .where(models.Device.hostname == HOST)).scalar_one()


def _fake_provider(placement_url):
    """(reserved, traits) of the fake device's provider."""
    headers = placement_fixture.HEADERS
    [rp] = requests.get(placement_url + '/resource_providers',
                        params={'name': FAKE}, headers=headers,
                        timeout=10).json()['resource_providers']
    url = f"{placement_url}/resource_providers/{rp['uuid']}"
    inventories = requests.get(url + '/inventories', headers=headers,
                               timeout=10).json()['inventories']
    traits = requests.get(url + '/traits', headers=headers,
                          timeout=10).json()['traits']
    return inventories['FPGA']['reserved'], set(traits)


def _wait_for(predicate, timeout=30, tick=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f'condition not met within {timeout} s')


def test_fault_out_of_schedule_then_reprobed_back(conf, tmp_path,
                                                  conductor):
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('enabled_drivers', ['fake_driver'], 'agent')
    conf.set_override('check_interval', 0.1, 'health')
    conf.set_override('hold_down', 0, 'health')
    drivers = loader.load_drivers(conf, HOST)
    api = conductor_rpcapi.ConductorAPI(conf, timeout=30)
    reporter = agent_reporter.Reporter(conf, HOST, drivers,
                                       conductor_api=api)
    reporter.report_now()
    monitor = agent_health.HealthMonitor(conf, HOST, drivers,
                                         reporter.known_devices,
                                         conductor_api=api)
    manager = agent_manager.AgentManager(conf, HOST, reporter=reporter,
                                         drivers=drivers,
                                         health_monitor=monitor)
    server = service.RPCService(conf, agent_rpcapi.TOPIC, HOST, [manager])
    server.start()
    monitor.start()
    injection = fake.health_file(conf)
    context = cyborg_context.get_admin_context()
    try:
        _wait_for(lambda: monitor.reports_sent >= 1)
        assert _device_health(conductor.engine) == states.HEALTHY

        with open(injection, 'w') as f:
            json.dump({'severity': 'fatal', 'reason': 'injected',
                       'code': 'xid:79'}, f)
        _wait_for(lambda: _device_health(conductor.engine) ==
                  states.UNHEALTHY)
        # Placement is synced right after the health is committed.
        _wait_for(lambda: _fake_provider(conductor.placement_url) ==
                  (fake.NUM_ACCELERATORS, {'CUSTOM_FAKE_DEVICE',
                                           'OWNER_CYBORG',
                                           states.UNHEALTHY_TRAIT}))

        # Healed: the hold-down (0 s here) ends at the conductor's next
        # timer tick, which asks this agent for a probe; its verdict
        # re-admits the device.
        with open(injection, 'w') as f:
            json.dump({'severity': 'ok'}, f)
        _wait_for(lambda: _device_health(conductor.engine) ==
                  states.HEALTHY,
                  tick=lambda: conductor_health.run_timers(conf, context))
        # The conductor commits before it answers (after its Placement
        # sync): the agent sees its probe report taken a little later.
        _wait_for(lambda: monitor.last_report['readings'][-1]['source'] ==
                  'probe')
        _wait_for(lambda: _fake_provider(conductor.placement_url) ==
                  (0, {'CUSTOM_FAKE_DEVICE', 'OWNER_CYBORG'}))
    finally:
        monitor.stop()
        server.stop()
        server.wait()
