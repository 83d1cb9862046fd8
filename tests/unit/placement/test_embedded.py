"""The embedded Placement is the real openstack-placement service."""

import pytest
import requests

from cyborg.common import serving
from cyborg.placement import embedded
from tests.fixtures import placement as placement_fixture

_HEADERS = {'X-Auth-Token': embedded.NOAUTH_TOKEN,
            'OpenStack-API-Version': 'placement 1.39'}


def test_serves_placement_with_its_standard_traits(placement):
    root = requests.get(placement.url + '/', timeout=5).json()
    assert root['versions'][0]['max_version'] >= '1.39'
    traits = requests.get(placement.url + '/traits?name=in:OWNER_CYBORG',
                          headers=_HEADERS, timeout=5).json()['traits']
    assert traits == ['OWNER_CYBORG']


def test_listens_with_cyborgs_backlog(placement):
    # Every agent of a cell reports to it at once after a restart.
    assert isinstance(placement._server, serving.Server)
    assert placement._server.request_queue_size == serving.LISTEN_BACKLOG


def test_noauth2_rejects_requests_without_a_token(placement):
    resp = requests.get(placement.url + '/resource_providers', timeout=5)
    assert resp.status_code == 401


def test_each_start_gets_a_fresh_database(placement):
    body = {'name': 'cn1', 'uuid': '4b8a9bb4-1b1a-4e15-9d6d-2b1d2e0e4c31'}
    resp = requests.post(placement.url + '/resource_providers', json=body,
                         headers=_HEADERS, timeout=5)
    assert resp.status_code == 200, resp.text
    placement.stop()
    placement.start()
    rps = requests.get(placement.url + '/resource_providers',
                       headers=_HEADERS, timeout=5).json()
    assert rps['resource_providers'] == []


def test_only_one_per_process(placement):
    with pytest.raises(RuntimeError, match='already runs'):
        embedded.EmbeddedPlacement().start()


def test_runs_as_a_process_on_a_database_file(tmp_path):
    db = 'sqlite:///%s' % (tmp_path / 'placement.sqlite')
    with placement_fixture.PlacementProcess(db) as url:
        body = {'name': 'cn1'}
        resp = requests.post(url + '/resource_providers', json=body,
                             headers=_HEADERS, timeout=5)
        assert resp.status_code == 200, resp.text
    with placement_fixture.PlacementProcess(db) as url:
        names = [rp['name'] for rp in requests.get(
            url + '/resource_providers', headers=_HEADERS,
            timeout=5).json()['resource_providers']]
    assert names == ['cn1']
