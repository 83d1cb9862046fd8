"""A pool with nothing left to offer is exported as one slice of no
devices, at a newer generation: it vanished from the export, so the slice
``kubectl apply`` had made of it, listing units since held, in
maintenance or being programmed, stayed in the cluster as its pool's
newest, and Kubernetes kept handing them out.  A deployable being
programmed is out of the exports as it is out of Placement
(provider_tree.blocked).  Its own module: test_exports.py keeps one API
service, and its inventory, for its whole module."""

import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy import orm

from cyborg.db import models
from cyborg.exports import resource_slices
from tests.fixtures import api as api_fixture
from tests.unit.exports import test_exports
from tests.unit.exports import test_held_units

MANAGER = test_exports.MANAGER
HOST = 'compute-e'
FAKE = 'fake.cyborg.openstack.org'


def _slices(service):
    """{driver: [slice]} of the export of every host, checked."""
    items = test_held_units._get(
        service, '/v2/exports/resourceslices').json['items']
    test_exports.check_slices(items)
    found = {}
    for item in items:
        found.setdefault(item['spec']['driver'], []).append(item)
    return found


def _deployable(service, ids, **values):
    with orm.Session(service.engine) as session, session.begin():
        session.execute(sa.update(models.Deployable).where(
            models.Deployable.id == ids['deployable_id']).values(**values))


def _device(service, ids, **values):
    with orm.Session(service.engine) as session, session.begin():
        session.execute(sa.update(models.Device).where(
            models.Device.id == ids['device_id']).values(**values))


@pytest.fixture
def service():
    with api_fixture.api_service() as service:
        yield service


def _emptied(service, before, make_empty):
    """``make_empty`` leaves the only pool with nothing to offer: one
    slice of no devices replaces it, under its name, at a newer
    generation, labelled like every slice."""
    offered, = before[FAKE]
    assert offered['spec']['devices']
    make_empty()
    emptied, = _slices(service)[FAKE]
    assert emptied['metadata'] == offered['metadata']
    assert emptied['spec']['devices'] == []
    assert emptied['spec']['pool']['name'] == offered['spec']['pool']['name']
    assert emptied['spec']['pool']['resourceSliceCount'] == 1
    assert (emptied['spec']['pool']['generation'] >
            offered['spec']['pool']['generation'])
    assert emptied['metadata']['labels'] == {
        **resource_slices.LABELS, resource_slices.NODE_LABEL: HOST}
    return emptied


def test_a_pool_with_every_unit_held_is_an_empty_slice(service):
    ids = api_fixture.seed_device(service.engine, HOST, HOST + '_qat',
                                  handles=2)
    before = _slices(service)
    _emptied(service, before, lambda: test_held_units._hold(
        service, ids['deployable_id'], 2))


@pytest.mark.parametrize('change', [
    lambda service, ids: _device(service, ids, status='maintaining'),
    lambda service, ids: _device(service, ids, health='unhealthy'),
    lambda service, ids: _deployable(service, ids, gone=True),
    lambda service, ids: _deployable(
        service, ids, programming_until=datetime.datetime(2100, 1, 1)),
], ids=['maintenance', 'unhealthy', 'gone', 'programming'])
def test_a_host_whose_only_device_leaves_the_schedule_has_an_empty_slice(
        service, change):
    ids = api_fixture.seed_device(service.engine, HOST, HOST + '_gpu',
                                  device_type='GPU', vendor='10de',
                                  handles=1, attributes={'rc': 'PGPU'})
    before = _slices(service)
    _emptied(service, before, lambda: change(service, ids))
    text = test_held_units._get(service, '/v2/exports/gres.conf').text
    assert '# %s_gpu: out of the schedule, not offered' % HOST in text
    assert not test_exports.parse_gres_conf(text)


def test_only_the_pool_emptied_is_empty(service):
    """The other pools of the host, and other hosts, are as they were."""
    api_fixture.seed_device(service.engine, HOST, HOST + '_qat', handles=2)
    gpu = api_fixture.seed_device(service.engine, HOST, HOST + '_gpu',
                                  device_type='GPU', vendor='10de',
                                  handles=1, attributes={'rc': 'PGPU'})
    _deployable(service, gpu, driver_name='nvidia_gpu_driver')
    api_fixture.seed_device(service.engine, 'other', 'other_qat', handles=1)
    _device(service, gpu, status='maintaining')
    found = _slices(service)
    assert [len(s['spec']['devices']) for s in found[FAKE]] == [2, 1]
    empty, = found['nvidia-gpu.cyborg.openstack.org']
    assert empty['spec']['devices'] == []
    assert empty['metadata']['name'] == HOST + '-nvidia-gpu-0'


def _card_of_two(service):
    """A card (a device) of two VFs, each with a handle, both offered:
    the seeded deployable's ids."""
    ids = api_fixture.seed_device(service.engine, HOST, HOST + '_vf0',
                                  handles=1)
    with orm.Session(service.engine) as session, session.begin():
        cpid = session.scalar(sa.select(models.ControlpathID.id).where(
            models.ControlpathID.device_id == ids['device_id']))
        sibling = models.Deployable(
            uuid='6d1f3c4e-5a0b-4c1d-8e2f-000000000001', name=HOST + '_vf1',
            num_accelerators=1, device_id=ids['device_id'],
            driver_name='fake_driver')
        session.add(sibling)
        session.flush()
        session.add_all([
            models.Attribute(uuid='6d1f3c4e-5a0b-4c1d-8e2f-000000000002',
                             deployable_id=sibling.id, key='rc',
                             value='FPGA'),
            models.AttachHandle(
                uuid='6d1f3c4e-5a0b-4c1d-8e2f-000000000003',
                deployable_id=sibling.id, cpid_id=cpid, in_use=False,
                attach_type='PCI',
                attach_info='{"domain": "0000", "bus": "0c", '
                            '"device": "01", "function": "1"}')])
    return ids


def test_a_card_being_programmed_offers_none_of_its_deployables(service):
    """A programming mark on one deployable of a card (a VF) holds every
    deployable of it (its device), as Placement reserves each of its
    providers whole: the sibling VF was still exported."""
    ids = _card_of_two(service)
    before = _slices(service)
    offered, = before[FAKE]
    assert len(offered['spec']['devices']) == 2
    _emptied(service, before, lambda: _deployable(
        service, ids, programming_until=datetime.datetime(2100, 1, 1)))


def test_a_card_held_under_vanished_hardware_offers_none(service):
    """A deployable kept gone while an instance holds its handle (its
    hardware vanished, or came back reported otherwise after a reboot)
    holds every deployable of its card, as Placement reserves each of
    its providers whole (deployables.held_gone): the sibling VF was
    still exported."""
    ids = _card_of_two(service)
    before = _slices(service)

    def held_and_gone():
        with orm.Session(service.engine) as session, session.begin():
            session.execute(sa.update(models.AttachHandle).where(
                models.AttachHandle.deployable_id == ids['deployable_id'])
                .values(in_use=True))
        _deployable(service, ids, gone=True)

    _emptied(service, before, held_and_gone)
