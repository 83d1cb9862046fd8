"""Watching devices end to end: real cyborg-conductor, cyborg-agent and
cyborg-api processes over RabbitMQ and MariaDB, the real Placement, fake
hardware (sysfs tree + the fake NVML's XID stream, edited while the agent
runs).

One deployment goes through a device's whole life in order: an
application XID leaves it alone; a fatal XID takes it out of Placement
(reserved = total, CUSTOM_ACCEL_UNHEALTHY) within 2 s and the API shows it
unhealthy; after the hold-down a good re-probe re-admits it; failing again
right away it stays out twice as long (hysteresis); a fatal XID on a
MIG-mode GPU takes both its instances out; a GPU that keeps slowing itself
down for heat is suspect, then out, and so is one whose slowdown simply
lasts; the notifications are read back from RabbitMQ and the metrics
endpoints show what happened.
"""

import time

import pytest

from tests.fixtures import health_deployment as hd

@pytest.fixture(scope='module')
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('health')
    with hd.deployment(tmp, gpus=1, mig_gpus=1) as d:
        notifications = hd.NotificationLog(d.transport_url).start()
        d.notifications = notifications
        try:
            yield d
        finally:
            notifications.stop()


def _health(env, address):
    return env.device(address)['health']


def test_an_application_xid_leaves_the_gpu_alone(env):
    gpu = env.whole[0]
    name = env.provider_name(gpu)
    env.nvml.add_xid(gpu, 13)     # Graphics Engine Exception: the app's
    # The agent saw and classified it...
    hd.wait(lambda: 'xid="13"' in env.metrics('agent'), 10,
            'XID 13 counted by the agent')
    # ...and a few check rounds later nothing changed.
    time.sleep(1.0)
    assert env.back(name)
    assert _health(env, gpu) == 'healthy'


def test_a_fatal_xid_takes_the_gpu_out_and_a_good_probe_brings_it_back(env):
    gpu = env.whole[0]
    name = env.provider_name(gpu)
    assert env.back(name)

    started = time.monotonic()
    env.nvml.add_xid(gpu, 79)     # fallen off the bus
    hd.wait(lambda: env.out(name), 10, 'the GPU out of Placement',
            interval=0.02)
    assert time.monotonic() - started < 2.0
    device = env.device(gpu)
    assert device['health'] in ('unhealthy', 'probing')
    assert 'XID 79' in device['health_reason'] or \
        '79' in device['health_reason']
    assert device['health_updated_at']
    # Older microversions are unchanged.
    assert 'health' not in env.device(gpu, version='2.3')
    # The API filters by health.
    unhealthy = env.api('/devices?health=unhealthy')['devices']
    probing = env.api('/devices?health=probing')['devices']
    assert device['uuid'] in {d['uuid'] for d in unhealthy + probing}

    # No new fault: after the hold-down (1 s) the agent re-probes it and
    # the conductor re-admits it.
    hd.wait(lambda: env.back(name), 15, 'the GPU re-admitted')
    assert _health(env, gpu) == 'healthy'

    # The notifications reached a real queue.
    changes = hd.wait(lambda: [
        e for e in env.notifications.of_type('device.health_change')
        if e['payload']['cyborg_object.data'].get('device_uuid') ==
        device['uuid']], 10, 'device.health_change notifications')
    data = [e['payload']['cyborg_object.data'] for e in changes]
    assert {d['health'] for d in data} >= {'unhealthy', 'healthy'}
    assert all(e['payload']['cyborg_object.namespace'] == 'cyborg'
               for e in changes)
    assert all(e['publisher'].startswith('cyborg-conductor:')
               for e in changes)

    # The metrics endpoints show it.
    conductor = env.metrics('conductor')
    assert 'cyborg_conductor_health_transitions_total' in conductor
    assert 'to_state="unhealthy"' in conductor
    assert 'xid="79"' in env.metrics('agent')


def test_a_flapping_gpu_stays_out_longer(env):
    gpu = env.whole[0]
    name = env.provider_name(gpu)
    hd.wait(lambda: env.back(name), 15, 'the GPU in service')
    # A first fault and re-admission (another test may have made one
    # already: the hold-downs below are then longer still).
    env.nvml.add_xid(gpu, 79)
    hd.wait(lambda: env.out(name), 5, 'the GPU out')
    hd.wait(lambda: env.back(name), 15, 'the GPU re-admitted')

    # It was re-admitted once already: the next hold-down is 2 s or more,
    # not 1 s.
    env.nvml.add_xid(gpu, 79)
    hd.wait(lambda: env.out(name), 5, 'the GPU out again')
    out_at = time.monotonic()
    hd.wait(lambda: env.back(name), 30, 'the GPU re-admitted again')
    # Seen out from shortly after the fault until 2 s after its first
    # good reading: well over the first hold-down (1 s).
    assert time.monotonic() - out_at >= 1.3

    # Flapping again: 4 s or more now.
    env.nvml.add_xid(gpu, 79)
    hd.wait(lambda: env.out(name), 5, 'the GPU out a third time')
    time.sleep(2.5)
    assert env.out(name), 'a flapping GPU came back too soon'
    hd.wait(lambda: env.back(name), 30, 'the GPU re-admitted a third time')


def test_a_fatal_fault_on_a_mig_gpu_takes_its_instances_out(env):
    gpu = env.mig[0]
    instances = [env.provider_name(gpu, 1), env.provider_name(gpu, 2)]
    assert all(env.back(n) for n in instances)

    env.nvml.add_xid(gpu, 48)     # double-bit ECC error
    hd.wait(lambda: all(env.out(n) for n in instances), 5,
            'both MIG instances out of Placement')
    deployables = {d['name']: d for d in env.api(
        '/deployables')['deployables']}
    assert all(deployables[n]['health'] in ('unhealthy', 'probing')
               for n in instances), {
        n: (deployables[n]['health'], deployables[n]['health_reason'])
        for n in instances}
    # The other GPU and the fake device are untouched.
    assert env.back(env.provider_name(env.whole[0]))
    assert env.back(f'{hd.HOST}_FakeDevice')
    hd.wait(lambda: all(env.back(n) for n in instances), 15,
            'the MIG instances re-admitted')


def test_the_fake_device_can_be_broken_and_healed(env):
    name = f'{hd.HOST}_FakeDevice'
    fault = env.tmp / 'state' / 'fake_driver_health.json'
    fault.write_text('{"severity": "fatal", "reason": "broken by a test"}')
    hd.wait(lambda: env.out(name), 5, 'the fake device out')
    fault.unlink()
    hd.wait(lambda: env.back(name), 15, 'the fake device back')


def _agent_says_healthy(env, address):
    """The agent's last reading of the GPU: True harmless, False not."""
    line = f'cyborg_agent_device_healthy{{device="{env.device_key(address)}"}}'
    for row in env.metrics('agent').splitlines():
        if row.startswith(line):
            return float(row.split()[-1]) == 1.0
    return None


def test_a_gpu_that_keeps_overheating_is_suspect_then_out(env):
    gpu = env.mig[0]
    instances = [env.provider_name(gpu, 1), env.provider_name(gpu, 2)]
    hd.wait(lambda: all(env.back(n) for n in instances), 15,
            'the MIG instances in service')
    hot = {'clock_events': ['hw_slowdown', 'hw_thermal_slowdown'],
           'temperature': 90}
    cool = {'clock_events': ['gpu_idle'], 'temperature': 41}

    # Its cooling fails: the GPU halves its clocks.  Suspect, still
    # scheduled (a busy GPU at its power cap would not even be that).
    env.nvml.update_gpu(gpu, **hot)
    hd.wait(lambda: _health(env, gpu) == 'suspect', 10, 'the GPU suspect')
    device = env.device(gpu)
    assert device['health_reason'].startswith(
        'Hardware slowdown (hw_thermal_slowdown)'), device
    assert all(env.back(n) for n in instances)

    # It keeps doing it: the third slowdown within [health]suspect_window
    # (3 s here) takes it out.  (A cycle slower than the window, on a
    # loaded machine, starts the count again: cycle until out.)
    for _ in range(8):
        env.nvml.update_gpu(gpu, **cool)
        hd.wait(lambda: _agent_says_healthy(env, gpu), 5,
                'the agent reading the GPU cool')
        env.nvml.update_gpu(gpu, **hot)
        hd.wait(lambda: _agent_says_healthy(env, gpu) is False, 5,
                'the agent reading the GPU hot')
        try:
            hd.wait(lambda: _health(env, gpu) != 'suspect', 0.6,
                    'the GPU no longer only suspect')
            break
        except AssertionError:
            continue
    hd.wait(lambda: all(env.out(n) for n in instances), 10,
            'both MIG instances out of Placement')
    device = env.device(gpu)
    assert device['health'] in ('unhealthy', 'probing'), device
    # (On a machine so loaded that the cycles took longer than
    # [health]max_suspect_time, 10 s here, that rule took it out first.)
    assert ('transient faults within 3 s' in device['health_reason'] or
            'longer than max_suspect_time' in device['health_reason']), device
    text = env.metrics('agent')
    assert 'cyborg_agent_device_temperature_celsius' in text
    hd.wait(lambda: (f'cyborg_agent_device_clock_event_active{{device="'
                     f'{env.device_key(gpu)}",reason="hw_thermal_slowdown"}}'
                     f' 1.0') in env.metrics('agent'), 10,
            'the slowdown in the agent\'s metrics')

    # Cooled down: back after the hold-down and a good re-probe.
    env.nvml.update_gpu(gpu, **cool)
    hd.wait(lambda: all(env.back(n) for n in instances), 30,
            'the MIG instances re-admitted')
    assert _health(env, gpu) == 'healthy'


def test_a_gpu_whose_slowdown_lasts_is_taken_out(env):
    gpu = env.mig[0]
    instances = [env.provider_name(gpu, 1), env.provider_name(gpu, 2)]
    hd.wait(lambda: all(env.back(n) for n in instances) and
            _health(env, gpu) == 'healthy', 30, 'the GPU in service')

    # Held in thermal slowdown: one fault, re-stated by every full report
    # (each second here).  Suspect throughout, never passing for healthy
    # when [health]suspect_window (3 s) ends, until it has been suspect
    # for [health]max_suspect_time (10 s): then out.
    env.nvml.update_gpu(gpu, clock_events=['hw_thermal_slowdown'],
                        temperature=92)
    hd.wait(lambda: _health(env, gpu) == 'suspect', 10, 'the GPU suspect')
    suspect_at = time.monotonic()
    seen = []

    def out():
        seen.append(_health(env, gpu))
        return seen[-1] in ('unhealthy', 'probing')

    hd.wait(out, 30, 'the GPU out', interval=0.2)
    assert 'healthy' not in seen, seen
    assert time.monotonic() - suspect_at > 8, seen
    device = env.device(gpu)
    assert 'longer than max_suspect_time (10 s)' in \
        device['health_reason'], device
    assert 'Hardware slowdown (hw_thermal_slowdown)' in \
        device['health_reason'], device
    hd.wait(lambda: all(env.out(n) for n in instances), 10,
            'both MIG instances out of Placement')

    # Out while it lasts: longer than a hold-down and a probe.
    time.sleep(3)
    assert _health(env, gpu) == 'unhealthy'
    assert all(env.out(n) for n in instances)

    # Cooled down: back after the hold-down and a good re-probe.
    env.nvml.update_gpu(gpu, clock_events=['gpu_idle'], temperature=41)
    hd.wait(lambda: all(env.back(n) for n in instances), 30,
            'the MIG instances re-admitted')
    assert _health(env, gpu) == 'healthy'
