"""Deleting ARQs by uuid: who may delete a bound one, and what a refusal
leaves.  The same rules whether the conductor checks them inside its
delete (RPC 1.5: the API sends the uuids without reading them) or, with
``[upgrade_levels]conductor`` capped below 1.5, the API reads the ARQs
first (an older conductor deletes whatever it is given)."""

import json
import threading
import uuid as uuidlib

import pytest
import sqlalchemy as sa
import webob

from cyborg.db import models
from cyborg.objects import clock as objects_clock
from tests.fixtures import api as api_fixture

PROJECT = 'admin'


@pytest.fixture(params=[None, '1.4'], ids=['conductor-checks',
                                           'capped-api-reads-first'])
def service(request):
    overrides = {}
    if request.param:
        overrides[('upgrade_levels', 'conductor')] = request.param
    with api_fixture.api_service(overrides) as service:
        yield service


def _delete(service, uuids, service_token=False, roles='member,reader'):
    req = webob.Request.blank(
        '/v2/accelerator_requests?arqs=' + ','.join(uuids), method='DELETE')
    req.headers.update({'X-Roles': roles, 'X-Project-Id': PROJECT,
                        'X-User-Id': 'u1'})
    if service_token:
        req.headers['X-Service-Token'] = 'nova'
    resp = req.get_response(service.app)
    return resp.status_int, (json.loads(resp.json['error_message'])
                             ['faultstring'] if resp.body else None)


def _left(service):
    with service.engine.connect() as c:
        return set(c.scalars(sa.select(models.ExtARQ.uuid)))


def test_a_bound_arq_goes_only_with_a_service_token(service):
    ids = api_fixture.seed_binding_arqs(service.engine, PROJECT)
    both = [ids['binding_arq'], ids['bound_arq']]
    status, reason = _delete(service, both)
    assert status == 403
    assert 'requires a service token' in reason
    # Nothing deleted, neither the bound ARQ nor the one beside it.
    assert _left(service) == set(both)
    assert _delete(service, both, service_token=True) == (204, None)
    assert _left(service) == set()


def test_missing_ones_are_404_after_the_others_are_deleted(service):
    ids = api_fixture.seed_binding_arqs(service.engine, PROJECT)
    missing = str(uuidlib.uuid4())
    status, reason = _delete(service, [ids['bound_arq'], missing],
                             service_token=True)
    assert status == 404
    assert missing in reason and ids['bound_arq'] not in reason
    assert _left(service) == {ids['binding_arq']}


def test_another_projects_arq_is_not_found_and_kept(service):
    """A project member (no service token: Nova sees every project)."""
    ids = api_fixture.seed_binding_arqs(service.engine, 'someone-else')
    status, _ = _delete(service, [ids['bound_arq']])
    assert status == 404
    assert ids['bound_arq'] in _left(service)


def test_the_api_reads_the_arqs_only_when_capped(service, request):
    """At RPC 1.5 the API sends the uuids without a statement of its own;
    capped below it, the API reads the ARQs before sending them.  The
    conductor serves on its RPC server's threads, the API on the caller's:
    statements are told apart by the thread that ran them."""
    ids = api_fixture.seed_binding_arqs(service.engine, PROJECT)
    api_thread = threading.get_ident()
    on_api_thread = []
    # The API measures the database's clock on first use and every ten
    # minutes, on the caller's thread: not now.
    objects_clock.reference.now()

    def count(*_args):
        if threading.get_ident() == api_thread:
            on_api_thread.append(1)
    sa.event.listen(service.engine, 'before_cursor_execute', count)
    try:
        assert _delete(service, [ids['bound_arq']],
                       service_token=True) == (204, None)
    finally:
        sa.event.remove(service.engine, 'before_cursor_execute', count)
    capped = request.node.callspec.params['service'] is not None
    assert bool(on_api_thread) == capped
    assert _left(service) == {ids['binding_arq']}
