"""A pool's generation is the time of the host's newest change in
microseconds: in whole seconds, two changes within one second (a unit
held, then another) kept one generation, and Kubernetes could not tell
which slices of a pool were the newer.  Every engine keeps the
microseconds (MariaDB and MySQL since migration 6b2d8f4e1c07, DATETIME(6):
there the generation moved once a second at most).  Its own module:
test_exports.py keeps one API service, and its inventory, for its whole
module."""

import datetime

import pytest
import sqlalchemy as sa
import webob
from oslo_utils import timeutils
from sqlalchemy import orm

from cyborg.common import context as cyborg_context
from cyborg.conductor import attributes
from cyborg.db import api as db_api
from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.fixtures import databases
from tests.unit.exports import test_exports

SECOND = datetime.datetime(2030, 5, 1, 10, 0, 0)
EPOCH_SECONDS = 1903860000    # SECOND, in seconds since the epoch


def _generation(service):
    response = webob.Request.blank(
        '/v2/exports/resourceslices', headers=test_exports.MANAGER
    ).get_response(service.app)
    assert response.status_int == 200, response.text
    item, = response.json['items']
    return item['spec']['pool']['generation']


def _changed_at(service, ids, table, microseconds):
    """A change of one row of the host, at ``SECOND`` and ``microseconds``
    (the newest of all)."""
    model, key = {'device': (models.Device, 'device_id'),
                  'deployable': (models.Deployable, 'deployable_id')}[table]
    with orm.Session(service.engine) as session, session.begin():
        session.execute(sa.update(model).where(model.id == ids[key]).values(
            updated_at=SECOND + datetime.timedelta(
                microseconds=microseconds)))


@pytest.mark.parametrize('db_kind', databases.KINDS)
def test_two_changes_in_one_second(db_kind):
    with api_fixture.api_service(db_kind=db_kind) as service:
        ids = api_fixture.seed_device(service.engine, 'host1', 'host1_qat',
                                      handles=1)
        _changed_at(service, ids, 'device', 200000)
        first = _generation(service)
        _changed_at(service, ids, 'deployable', 700000)
        second = _generation(service)
    assert (first, second) == (EPOCH_SECONDS * 10 ** 6 + 200000,
                               EPOCH_SECONDS * 10 ** 6 + 700000)


def test_an_attribute_deleted_moves_the_generation():
    """An attribute deleted through the API leaves no row behind: the
    generation went back to the newest change left, below the one
    Kubernetes had.  The deletion marks the host unsynced, which moves
    the host's row, and the generation with it."""
    then = timeutils.utcnow() - datetime.timedelta(hours=1)
    with api_fixture.api_service() as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_qat',
                                handles=1,
                                attributes={'rc': 'QAT', 'extra': 'x'})
        with orm.Session(service.engine) as session, session.begin():
            session.add(models.Host(hostname='host1', placement_synced=True,
                                    last_report_at=then))
            session.flush()
            for model in (models.Host, models.Device, models.Deployable,
                          models.ControlpathID, models.AttachHandle,
                          models.Attribute):
                session.execute(sa.update(model).values(
                    created_at=then, updated_at=then))
            # The attribute is the host's newest change.
            extra = session.scalars(sa.select(models.Attribute).where(
                models.Attribute.key == 'extra')).one()
            extra.updated_at = then + datetime.timedelta(seconds=5)
            extra_uuid = extra.uuid
        before = _generation(service)
        context = cyborg_context.get_admin_context()
        db_api.write_retrying(context, attributes._delete_in, context,
                              extra_uuid)
        after = _generation(service)
    assert after > before
