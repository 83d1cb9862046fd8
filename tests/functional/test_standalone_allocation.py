"""Standalone allocation (microversion 2.6) over HTTP against real
processes: cyborg-api, cyborg-conductor and cyborg-agent (fake driver,
16 FPGAs) over RabbitMQ, on MariaDB, with the real Placement.  No Nova.

Two consumers race for the last free accelerator: exactly one wins, the
other gets a 409 that says why; deleting the winner's ARQ releases its
Placement allocation, and the loser can then have it.
"""

import threading
import uuid as uuidlib

import pytest
import requests

from tests.fixtures import databases, rabbit, recording_http
from tests.fixtures import placement as placement_fixture
from tests.functional import test_arq_nova_flow as flow

COMPUTE = flow.COMPUTE
DEVICE_RP = flow.DEVICE_RP
TOTAL = 16
# A Kubernetes-like scheduler: a service, no service token, microversion
# 2.6.
SCHEDULER = {'X-Project-Id': 'scheduler', 'X-User-Id': 'k8s',
             'X-Roles': 'service', 'OpenStack-API-Version': 'accelerator 2.6'}
USER = {'X-Project-Id': 'tenant-a', 'X-User-Id': 'alice',
        'X-Roles': 'member,reader', 'OpenStack-API-Version': 'accelerator 2.6'}


@pytest.fixture(scope='module')
def deployment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('standalone')
    (tmp / 'sysfs').mkdir()
    with rabbit.throwaway_vhost() as transport_url, \
            databases.throwaway_database('mysql') as db_url, \
            placement_fixture.PlacementProcess(
                log_path=tmp / 'placement.log') as placement_url, \
            recording_http.FakeNova() as nova, \
            recording_http.FakeGlance() as glance:
        databases.create_schema(db_url)
        flow._placement(placement_url, 'POST', '/resource_providers',
                        {'name': COMPUTE, 'uuid': str(uuidlib.uuid4())})
        d = flow.Deployment(tmp, transport_url, db_url, placement_url, nova,
                            glance)
        try:
            d.start('conductor').wait_for_log('cyborg-conductor started')
            d.start('agent')
            d.start('api')
            flow._wait(lambda: flow._ok(d, '/devices?hostname=' + COMPUTE),
                       60, 'the fake device to be reported')
            flow._wait(lambda: flow._inventory(placement_url), 30,
                       'the fake device provider in Placement')
            # Each test's ARQs ask for it (made here: xdist may run the
            # tests of this module on different workers).
            assert d.call('POST', '/device_profiles', headers=flow.ADMIN,
                          json=[{'name': 'standalone-fpga', 'groups': [{
                              'resources:FPGA': '1',
                              'trait:CUSTOM_FAKE_DEVICE': 'required'}]}]
                          ).status_code == 201
            yield d
        finally:
            for service in d.services.values():
                service.kill()


def _usage(d):
    return requests.get(
        f'{d.placement_url}/resource_providers/{DEVICE_RP}/usages',
        headers=placement_fixture.HEADERS,
        timeout=10).json()['usages'].get('FPGA', 0)


def _held(d, consumer):
    return requests.get(f'{d.placement_url}/allocations/{consumer}',
                        headers=placement_fixture.HEADERS,
                        timeout=10).json()


def _fault(response):
    return response.json()['error_message']


def test_two_consumers_race_for_the_last_accelerator(deployment):
    d = deployment
    arqs = []
    for _ in range(2):
        created = d.call('POST', '/accelerator_requests', headers=USER,
                         json={'device_profile_name': 'standalone-fpga'})
        assert created.status_code == 201, created.text
        arqs.append(created.json()['arqs'][0]['uuid'])
    # Someone else (an instance Nova scheduled) holds all but one.
    others = str(uuidlib.uuid4())
    placement_fixture.hold_allocation(d.placement_url, others,
                                      {DEVICE_RP: {'FPGA': TOTAL - 1}})
    assert _usage(d) == TOTAL - 1

    # A project member may not allocate: it is the scheduler's call.
    refused = d.call('POST', f'/accelerator_requests/{arqs[0]}/allocate',
                     headers=USER, json={'consumer_id': 'pod-x',
                                         'consumer_type': 'k8s-pod'})
    assert refused.status_code == 403, refused.text

    start = threading.Barrier(2)
    answers = {}

    def allocate(arq_uuid, pod):
        start.wait()
        answers[arq_uuid] = d.call(
            'POST', f'/accelerator_requests/{arq_uuid}/allocate',
            headers=SCHEDULER, json={'consumer_id': pod,
                                     'consumer_type': 'k8s-pod'})

    threads = [threading.Thread(target=allocate, args=(arq, 'pod-%d' % i))
               for i, arq in enumerate(arqs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    statuses = sorted(a.status_code for a in answers.values())
    assert statuses == [200, 409], {k: (a.status_code, a.text)
                                    for k, a in answers.items()}
    winner = next(u for u, a in answers.items() if a.status_code == 200)
    loser = next(u for u in arqs if u != winner)
    assert 'No free accelerator matches accelerator request %s' % loser \
        in _fault(answers[loser])
    assert 'FPGA:1' in _fault(answers[loser])

    won = answers[winner].json()
    assert won['state'] == 'Bound'
    assert won['consumer_type'] == 'k8s-pod'
    assert won['consumer_id'] in ('pod-0', 'pod-1')
    assert won['hostname'] == COMPUTE
    assert won['device_rp_uuid'] == DEVICE_RP
    assert won['instance_uuid'] is None
    assert won['attach_handle_type'] == 'TEST_PCI'
    assert set(won['attach_handle_info']) == {'domain', 'bus', 'device',
                                              'function'}
    lost = d.call('GET', f'/accelerator_requests/{loser}', headers=USER)
    assert lost.json()['state'] == 'Initial'
    assert lost.json()['consumer_id'] is None
    # The user sees who holds its ARQ; below 2.6 the fields are absent.
    mine = d.call('GET', f'/accelerator_requests/{winner}',
                  headers=dict(USER, **{'OpenStack-API-Version':
                                        'accelerator 2.5'}))
    assert 'consumer_id' not in mine.json()

    assert _usage(d) == TOTAL
    held = _held(d, winner)
    assert held['allocations'][DEVICE_RP]['resources'] == {'FPGA': 1}
    assert held['consumer_type'] == 'K8S_POD'
    assert held['project_id'] == 'tenant-a'
    assert _held(d, loser)['allocations'] == {}
    # No instance: Nova is told nothing.
    assert d.nova.events == []

    # The scheduler deletes the pod's ARQ: its allocation goes with it.
    deleted = d.call('DELETE', f'/accelerator_requests/{winner}',
                     headers=SCHEDULER)
    assert deleted.status_code == 204, deleted.text
    assert _held(d, winner)['allocations'] == {}
    assert _usage(d) == TOTAL - 1

    # Now the other consumer gets it, and gives it back the same way.
    again = d.call('POST', f'/accelerator_requests/{loser}/allocate',
                   headers=SCHEDULER, json={'consumer_id': 'pod-2',
                                            'consumer_type': 'k8s-pod'})
    assert again.status_code == 200, again.text
    assert _usage(d) == TOTAL
    assert d.call('DELETE', f'/accelerator_requests/{loser}',
                  headers=SCHEDULER).status_code == 204
    placement_fixture.hold_allocation(d.placement_url, others, {})
    assert _usage(d) == 0
    assert d.call('GET', '/accelerator_requests',
                  headers=flow.ADMIN).json()['arqs'] == []


def test_a_user_cannot_delete_an_allocated_arq_without_a_service(
        deployment):
    d = deployment
    created = d.call('POST', '/accelerator_requests', headers=USER,
                     json={'device_profile_name': 'standalone-fpga'})
    assert created.status_code == 201, created.text
    arq = created.json()['arqs'][0]['uuid']
    allocated = d.call('POST', f'/accelerator_requests/{arq}/allocate',
                       headers=SCHEDULER, json={'consumer_id': 'pod-9',
                                                'consumer_type': 'k8s-pod'})
    assert allocated.status_code == 200, allocated.text
    refused = d.call('DELETE', f'/accelerator_requests/{arq}', headers=USER)
    assert refused.status_code == 403
    assert 'requires a service token' in _fault(refused)
    assert _usage(d) == 1
    # An admin may (it could have allocated it too).
    assert d.call('DELETE', f'/accelerator_requests/{arq}',
                  headers=flow.ADMIN).status_code == 204
    assert _usage(d) == 0
