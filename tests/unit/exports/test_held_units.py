"""The exports offer only the units no consumer holds: a handle bound to
a Nova instance or allocated to a standalone consumer is not another
scheduler's to hand out again.  The units left keep their names as
others are taken and given back.  Its own module: test_exports.py keeps
one API service, and its inventory, for its whole module."""

import pytest
import sqlalchemy as sa
import webob
from sqlalchemy import orm

from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.unit.exports import test_exports

MANAGER = test_exports.MANAGER
HOST = 'compute-h'


def _get(service, path):
    response = webob.Request.blank(path, headers=MANAGER).get_response(
        service.app)
    assert response.status_int == 200, response.text
    return response


def _hold(service, deployable_id, count, in_use=True):
    """Mark the first ``count`` handles of a deployable held (or free),
    as a bind or a standalone allocation leaves them."""
    with orm.Session(service.engine) as session, session.begin():
        ids = session.scalars(
            sa.select(models.AttachHandle.id)
            .where(models.AttachHandle.deployable_id == deployable_id)
            .order_by(models.AttachHandle.id).limit(count)).all()
        session.execute(sa.update(models.AttachHandle).where(
            models.AttachHandle.id.in_(ids)).values(in_use=in_use))


def _slice_devices(service):
    items = _get(service, '/v2/exports/resourceslices').json['items']
    test_exports.check_slices(items)
    return {item['spec']['driver']: [d['name'] for d in
                                      item['spec']['devices']]
            for item in items}


def _gres(service):
    text = _get(service, '/v2/exports/gres.conf').text
    return text, {(r['name'], r['count'], r.get('file'))
                  for r in test_exports.parse_gres_conf(text)}


@pytest.fixture
def service():
    with api_fixture.api_service() as service:
        yield service


def test_held_units_are_not_offered(service):
    vfs = api_fixture.seed_device(service.engine, HOST, HOST + '_qat',
                                  device_type='QAT', vendor='8086',
                                  handles=4, attributes={'rc': 'QAT'})
    gpu = api_fixture.seed_device(
        service.engine, HOST, HOST + '_gpu', device_type='GPU',
        vendor='10de', handles=1, attributes={'rc': 'PGPU',
                                              'iommu_group': '7'})
    free = _slice_devices(service)['fake.cyborg.openstack.org']
    assert len(free) == 5
    _text, records = _gres(service)
    assert records == {('qat', '4', None), ('gpu', '1', '/dev/vfio/7')}

    _hold(service, vfs['deployable_id'], 2)
    _hold(service, gpu['deployable_id'], 1)
    held = _slice_devices(service)['fake.cyborg.openstack.org']
    # Two VFs left, under the names they had while all were free.
    assert len(held) == 2 and set(held) < set(free)
    text, records = _gres(service)
    assert records == {('qat', '2', None)}
    assert '# %s_gpu: all 1 in use, not offered' % HOST in text

    # Given back: offered again, under the same names.
    _hold(service, vfs['deployable_id'], 2, in_use=False)
    _hold(service, gpu['deployable_id'], 1, in_use=False)
    assert _slice_devices(service)['fake.cyborg.openstack.org'] == free
    assert _gres(service)[1] == {('qat', '4', None),
                                 ('gpu', '1', '/dev/vfio/7')}


def test_the_memory_of_a_one_unit_deployable_stays_with_it(service):
    """A deployable of two units, one of them held: the one offered is
    not taken for a deployable of one unit (the memory is the whole
    deployable's, not the unit's)."""
    pair = api_fixture.seed_device(
        service.engine, HOST, HOST + '_pair', device_type='GPU',
        vendor='10de', handles=2, attributes={'rc': 'PGPU',
                                              'memory_mb': '1024',
                                              'iommu_group': '9'})
    _hold(service, pair['deployable_id'], 1)
    items = _get(service, '/v2/exports/resourceslices').json['items']
    device, = items[0]['spec']['devices']
    assert 'capacity' not in device
    _text, records = _gres(service)
    # Nor is the VFIO group of a pool given as the file of one function.
    assert records == {('gpu', '1', None)}
