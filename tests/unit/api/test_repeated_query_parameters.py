"""A query parameter given twice is a 400 that writes nothing: keeping
one of its values dropped the other unseen (``DELETE
/v2/accelerator_requests?arqs=A&arqs=B`` deleted B alone and answered
204).  Several values go in one parameter, separated by commas."""

import json

import pytest
import sqlalchemy as sa
import webob

from cyborg.db import models
from tests.fixtures import api as api_fixture

NOVA = {'X-Roles': 'member,reader', 'X-Project-Id': 'admin',
        'X-User-Id': 'u1', 'X-Service-Token': 'nova'}
ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin',
         'X-User-Id': 'u1'}


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        yield service


def _call(service, method, path, headers=NOVA):
    resp = webob.Request.blank(path, method=method, headers=headers
                               ).get_response(service.app)
    if resp.status_int >= 400:
        return resp.status_int, json.loads(
            resp.json['error_message'])['faultstring']
    return resp.status_int, None


def _left(service):
    with service.engine.connect() as c:
        return set(c.scalars(sa.select(models.ExtARQ.uuid)))


def test_arqs_given_twice_deletes_nothing(service):
    ids = api_fixture.seed_binding_arqs(service.engine)
    both = {ids['binding_arq'], ids['bound_arq']}
    status, reason = _call(
        service, 'DELETE', '/v2/accelerator_requests?arqs=%s&arqs=%s'
        % (ids['binding_arq'], ids['bound_arq']))
    assert (status, reason) == (
        400, 'Invalid input: arqs: given twice; give a query parameter '
             'once (where it takes several values, separate them with '
             'commas in that one)')
    assert _left(service) >= both
    # In one parameter, both go.
    assert _call(service, 'DELETE', '/v2/accelerator_requests?arqs=%s,%s'
                 % (ids['binding_arq'], ids['bound_arq'])) == (204, None)
    assert not _left(service) & both


@pytest.mark.parametrize('path', [
    '/v2/device_profiles?name=a&name=b',
    '/v2/accelerator_requests?instance=a&bind_state=resolved&instance=b',
    '/v2/device_profiles?value=a&value=a',
    '/v2/devices?type=GPU&type=GPU',
])
def test_any_parameter_given_twice_is_refused(service, path):
    method = 'DELETE' if 'value=' in path else 'GET'
    status, reason = _call(service, method, path, ADMIN)
    assert status == 400, reason
    assert 'given twice' in reason


def test_an_operation_without_a_query_still_ignores_it(service):
    """Operations that take no query parameter read none: nothing there
    to be dropped."""
    assert _call(service, 'GET', '/v2?a=1&a=2')[0] == 200
