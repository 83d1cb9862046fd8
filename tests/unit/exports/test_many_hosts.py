"""The exports of every host are read in the same few queries however
many hosts there are: they were read host by host (six queries each),
so a cloud of thousands of hosts took one API request tens of thousands
of round trips.  Its own module: test_exports.py keeps one API service
for its whole module."""

import pytest
import sqlalchemy as sa
import webob

from tests.fixtures import api as api_fixture

MANAGER = {'X-Project-Id': 'p1', 'X-User-Id': 'u', 'X-Roles': 'manager',
           'OpenStack-API-Version': 'accelerator 2.9'}


def _statements(service, path):
    """(response, statements the request ran)."""
    ran = []

    def count(*_args):
        ran.append(1)
    sa.event.listen(service.engine, 'before_cursor_execute', count)
    try:
        response = webob.Request.blank(path, headers=MANAGER).get_response(
            service.app)
    finally:
        sa.event.remove(service.engine, 'before_cursor_execute', count)
    assert response.status_int == 200, response.text
    return response, len(ran)


def _pools(response):
    """{pool name: devices offered in its slices}."""
    pools = {}
    for item in response.json['items']:
        pool = item['spec']['pool']['name']
        pools[pool] = pools.get(pool, 0) + len(item['spec']['devices'])
    return pools


@pytest.mark.parametrize('db_kind', ['sqlite', 'mysql', 'postgresql'])
def test_every_host_is_read_in_the_same_few_queries(db_kind):
    with api_fixture.api_service(db_kind=db_kind) as service:
        api_fixture.seed_device(service.engine, 'host0', 'host0_qat',
                                handles=2)
        path = '/v2/exports/resourceslices'
        one, alone = _statements(service, path)
        assert _pools(one) == {'host0': 2}
        for index in range(1, 6):
            for name in ('qat', 'fpga'):
                api_fixture.seed_device(
                    service.engine, f'host{index}',
                    f'host{index}_{name}', handles=index)
        many, together = _statements(service, path)
        assert together == alone
        assert _pools(many) == {'host0': 2, **{
            f'host{index}': 2 * index for index in range(1, 6)}}
        # One host asked for: its own, the same way.
        host3, _ = _statements(service, path + '?hostname=host3')
        assert _pools(host3) == {'host3': 6}
        gres, together = _statements(service, '/v2/exports/gres.conf')
        assert together == alone
        assert 'NodeName=host4 Name=fpga Type=0xABCD_model-host4_qat ' \
            'Count=4' in gres.text, gres.text
