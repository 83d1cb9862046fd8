"""``POST /v2/devices/{uuid}/enable`` on a device that failed: the admin
vouches for it, and the API answers with the re-probe under way."""

import sqlalchemy as sa
import webob

from cyborg.db import models
from tests.fixtures import api as api_fixture


def _post(service, path):
    req = webob.Request.blank(path, method='POST')
    req.headers.update({'X-Roles': 'admin,member,reader',
                        'X-Project-Id': 'admin', 'X-User-Id': 'u1',
                        'OpenStack-API-Version': 'accelerator 2.4'})
    resp = req.get_response(service.app)
    return resp.status_int, resp.json


def test_enabling_an_unhealthy_device_answers_it_probing():
    with api_fixture.api_service() as service:
        seeded = api_fixture.seed_device(service.engine, 'host1', 'gpu0')
        with service.engine.begin() as conn:
            # As the host's first report leaves it.
            conn.execute(sa.insert(models.Host.__table__).values(
                hostname='host1', placement_synced=True))
            conn.execute(sa.update(models.Device.__table__)
                         .where(models.Device.__table__.c.id ==
                                seeded['device_id'])
                         .values(health='unhealthy',
                                 health_reason='XID 79', health_flaps=3))
        uuid = seeded['device_uuid']
        status, body = _post(service, f'/v2/devices/{uuid}/enable')
        assert status == 200, body
        assert (body['status'], body['health'], body['health_reason']) == (
            'enabled', 'probing', 'XID 79')
        # Disabling it leaves its health alone.
        status, body = _post(service, f'/v2/devices/{uuid}/disable')
        assert (status, body['status'], body['health']) == (
            200, 'maintaining', 'probing')
