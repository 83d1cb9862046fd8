"""A uuid in upper case or without dashes names the same ARQ as the
stored (lower case, dashed) one wherever the ARQ API takes one: the path,
``?arqs=``, ``?instance=``, a PATCH's keys and a bind's values.  On
SQLite, as on PostgreSQL, a string compare would miss every other
spelling (MariaDB's collation finds the upper case one only)."""

import json
import uuid as uuidlib

import pytest
import sqlalchemy as sa
import webob

from cyborg.db import models
from tests.fixtures import api as api_fixture

PROJECT = 'admin'
NOVA = {'X-Roles': 'admin,service', 'X-Project-Id': PROJECT,
        'X-User-Id': 'nova', 'X-Service-Token': 'nova'}


@pytest.fixture
def service():
    with api_fixture.api_service() as service:
        yield service


def _call(service, method, path, body=None):
    req = webob.Request.blank(path, method=method)
    req.headers.update(NOVA)
    if body is not None:
        req.content_type = 'application/json'
        req.body = json.dumps(body).encode()
    resp = req.get_response(service.app)
    return resp.status_int, resp.json if resp.body else None


def _states(service):
    with service.engine.connect() as c:
        return dict(c.execute(sa.select(models.ExtARQ.uuid,
                                        models.ExtARQ.state)).all())


def _spellings(uuid):
    return [uuid.upper(), uuid.replace('-', ''),
            uuid.upper().replace('-', '')]


@pytest.mark.parametrize('spell', range(3))
def test_delete_by_arqs_takes_any_spelling(service, spell):
    ids = api_fixture.seed_binding_arqs(service.engine, PROJECT)
    # The same ARQ twice, spelled two ways, is deleted once.
    named = [_spellings(ids['bound_arq'])[spell], ids['bound_arq'],
             _spellings(ids['binding_arq'])[spell]]
    assert _call(service, 'DELETE', '/v2/accelerator_requests?arqs='
                 + ','.join(named)) == (204, None)
    assert _states(service) == {}


def test_delete_and_list_by_instance_take_any_spelling(service):
    ids = api_fixture.seed_binding_arqs(service.engine, PROJECT)
    spelled = ids['bound_instance'].upper()
    status, body = _call(service, 'GET',
                         '/v2/accelerator_requests?instance=' + spelled)
    assert status == 200
    assert [a['uuid'] for a in body['arqs']] == [ids['bound_arq']]
    status, body = _call(service, 'GET', '/v2/accelerator_requests?'
                         'bind_state=resolved&instance=' + spelled)
    assert (status, [a['uuid'] for a in body['arqs']]) == (
        200, [ids['bound_arq']])
    assert _call(service, 'DELETE', '/v2/accelerator_requests?instance='
                 + spelled.replace('-', '')) == (204, None)
    assert _states(service) == {ids['binding_arq']: 'BindStarted'}


def test_a_patch_keyed_by_another_spelling_unbinds(service):
    ids = api_fixture.seed_binding_arqs(service.engine, PROJECT)
    unbind = [{'op': 'remove', 'path': p}
              for p in ('/hostname', '/device_rp_uuid', '/instance_uuid')]
    assert _call(service, 'PATCH', '/v2/accelerator_requests',
                 {ids['bound_arq'].upper(): unbind})[0] == 202
    # On its own URL, the body's key spelled otherwise than the URL.
    assert _call(service, 'PATCH', '/v2/accelerator_requests/'
                 + ids['binding_arq'].upper(),
                 {ids['binding_arq'].replace('-', ''): unbind})[0] == 202
    assert _states(service) == {ids['bound_arq']: 'Unbound',
                                ids['binding_arq']: 'Unbound'}


def test_one_arq_named_twice_in_a_patch_is_refused(service):
    ids = api_fixture.seed_binding_arqs(service.engine, PROJECT)
    bind = [{'op': 'add', 'path': '/hostname', 'value': 'host1'},
            {'op': 'add', 'path': '/device_rp_uuid',
             'value': str(uuidlib.uuid4())},
            {'op': 'add', 'path': '/instance_uuid',
             'value': str(uuidlib.uuid4())}]
    status, body = _call(service, 'PATCH', '/v2/accelerator_requests', {
        ids['bound_arq']: bind, ids['bound_arq'].upper(): bind})
    assert status == 400
    assert 'named twice' in body['error_message']
    assert _states(service) == {ids['bound_arq']: 'Bound',
                                ids['binding_arq']: 'BindStarted'}


def test_a_bind_s_uuids_are_taken_as_stored():
    from cyborg.api.controllers.v2 import accelerator_requests as arqs

    rp, instance = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    assert arqs._binding('a', [
        {'op': 'add', 'path': '/hostname', 'value': 'Host1'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp.upper()},
        {'op': 'add', 'path': '/instance_uuid',
         'value': instance.replace('-', '')}]) == {
        'hostname': 'Host1', 'device_rp_uuid': rp, 'instance_uuid': instance}
