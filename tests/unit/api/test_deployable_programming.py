"""From microversion 2.10 a deployable shows when its programming must
have ended (null when it is not being programmed); not before."""

import datetime
import json

import sqlalchemy as sa
import webob

from cyborg.db import models
from tests.fixtures import api as api_fixture


def _show(service, uuid, version):
    req = webob.Request.blank(f'/v2/deployables/{uuid}')
    req.headers['OpenStack-API-Version'] = f'accelerator {version}'
    resp = req.get_response(service.app)
    assert resp.status_int == 200, resp.text
    return json.loads(resp.text)


def test_a_deployable_being_programmed_says_until_when():
    with api_fixture.api_service() as service:
        seeded = api_fixture.seed_device(service.engine, 'fpga-host',
                                         'fpga-host_FakeDevice')
        with service.engine.begin() as c:
            uuid = c.execute(sa.select(models.Deployable.uuid).where(
                models.Deployable.id == seeded['deployable_id'])).scalar()
            c.execute(sa.update(models.Deployable)
                      .where(models.Deployable.id == seeded['deployable_id'])
                      .values(programming_until=datetime.datetime(
                          2026, 11, 27, 18, 0, 30)))
        assert _show(service, uuid, '2.10')['programming_until'] == \
            '2026-11-27T18:00:30+00:00'
        assert 'programming_until' not in _show(service, uuid, '2.9')
