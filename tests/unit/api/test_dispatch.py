"""Every operation is declared once and the dispatcher enforces the
declaration: policy first, then the query and body schemas of the
request's microversion, the declared status, the microversion range, and
(in tests) the response schema."""

import ast
import dataclasses
import inspect
import json
import re

import pytest
import webob

from cyborg.api import routes
from cyborg.api.schemas import strict_object
from cyborg.api.schemas import Versioned
from cyborg import policies
from cyborg.policies import devices as device_policy
from tests.fixtures import api as api_fixture

OLD, NEW = 'accelerator 2.3', 'accelerator 2.4'


def _call(app, method, path, body=None, version=None, roles=None):
    req = webob.Request.blank(path, method=method)
    if version:
        req.headers['OpenStack-API-Version'] = version
    if roles:
        req.headers.update({'X-Roles': roles, 'X-Project-Id': 'p1',
                            'X-User-Id': 'u1'})
    if body is not None:
        req.body = body if isinstance(body, bytes) else json.dumps(
            body).encode()
        req.content_type = 'application/json'
    resp = req.get_response(app)
    return resp.status_int, resp.json if resp.body else None


def _reason(body):
    return json.loads(body['error_message'])['faultstring']


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_FakeDevice')
        yield service


def _with_operation(monkeypatch, **fields):
    """OPERATIONS plus one test operation at GET /v2/test_only."""
    fields.setdefault('policy', device_policy.GET_ALL)
    op = routes.Operation('GET', '/v2/test_only', **fields)
    monkeypatch.setattr(routes, 'OPERATIONS', routes.OPERATIONS + [op])
    # Routing reads its index of OPERATIONS, built at import.
    monkeypatch.setattr(routes, '_BY_LENGTH', routes._by_length())
    return op


def test_response_that_breaks_its_declaration_is_a_500(service, monkeypatch):
    def show_thing(r):
        return {'name': 'x', 'undeclared': 1}
    _with_operation(monkeypatch, handler=show_thing,
                    response=strict_object({'name': {'type': 'string'}}))
    assert service.conf.api.validate_responses     # the suite turns it on
    status, body = _call(service.app, 'GET', '/v2/test_only')
    assert status == 500
    assert 'show_thing' in _reason(body)
    assert 'undeclared' in _reason(body)

    service.conf.set_override('validate_responses', False, group='api')
    try:
        status, body = _call(service.app, 'GET', '/v2/test_only')
    finally:
        service.conf.clear_override('validate_responses', group='api')
    assert status == 200 and body == {'name': 'x', 'undeclared': 1}


def test_response_schema_of_the_requests_microversion(service, monkeypatch):
    def show_thing(r):
        return {'name': 'x'}
    _with_operation(monkeypatch, handler=show_thing, response=Versioned(
        ((2, 0), strict_object({'name': {'type': 'string'}})),
        ((2, 4), strict_object({'name': {'type': 'string'},
                                'new': {'type': 'string'}}))))
    assert _call(service.app, 'GET', '/v2/test_only', version=OLD)[0] == 200
    # At 2.4 the handler forgot the field its declaration promises.
    assert _call(service.app, 'GET', '/v2/test_only', version=NEW)[0] == 500


def test_operation_outside_its_microversions_is_not_found(service,
                                                           monkeypatch):
    _with_operation(monkeypatch, handler=lambda r: {}, min_version=(2, 4),
                    response={'type': 'object'})
    assert _call(service.app, 'GET', '/v2/test_only', version=OLD)[0] == 404
    assert _call(service.app, 'GET', '/v2/test_only', version=NEW)[0] == 200


def test_declared_status_is_answered(service, monkeypatch):
    _with_operation(monkeypatch, handler=lambda r: None, status=204)
    status, body = _call(service.app, 'GET', '/v2/test_only')
    assert (status, body) == (204, None)


def test_policy_is_checked_before_the_body(service):
    # A reader may not create profiles: 403 even for a body that is not
    # JSON at all (the body is never read).
    status, body = _call(service.app, 'POST', '/v2/device_profiles',
                         body=b'{not json', roles='reader')
    assert status == 403
    assert 'cyborg:device_profile:create' in _reason(body)


def test_query_schema_of_the_requests_microversion(service):
    # ?health= is a 2.4 parameter: refused below, naming the version, and
    # a word of the health vocabulary from there on.
    status, body = _call(service.app, 'GET', '/v2/devices?health=healthy',
                         version=OLD)
    assert status == 400
    assert 'health: needs microversion 2.4 or later' in _reason(body)
    status, body = _call(service.app, 'GET', '/v2/devices?health=bogus',
                         version=NEW)
    assert status == 400 and 'health' in _reason(body)
    status, body = _call(service.app, 'GET', '/v2/devices?health=healthy',
                         version=NEW)
    assert status == 200 and len(body['devices']) == 1


@pytest.mark.parametrize('path, name', [
    ('/v2/deployables?foo=1', 'foo'),
    ('/v2/devices?type=GPU&hostnam=h1', 'hostnam'),
    ('/v2/accelerator_requests?instances=x', 'instances'),
])
def test_unknown_query_parameters_are_refused(service, path, name):
    status, body = _call(service.app, 'GET', path)
    assert status == 400
    assert _reason(body).startswith(
        'Invalid input: %s: unknown query parameter' % name)


@pytest.mark.parametrize('body', [
    {'deployable_id': 1, 'key': 'k', 'value': 7},
    {'attribute': {'deployable_id': 1, 'key': 'k', 'value': 7}},
])
def test_errors_name_the_field_in_either_attribute_shape(service, body):
    status, error = _call(service.app, 'POST', '/v2/attributes', body=body)
    assert status == 400
    assert 'value' in _reason(error) and 'not of type' in _reason(error)


def test_too_long_keeps_the_reason(service):
    status, error = _call(service.app, 'POST', '/v2/accelerator_requests',
                          body={'device_profile_name': 'x' * 5000})
    assert status == 400
    reason = _reason(error)
    assert reason.startswith('Invalid input: device_profile_name: ')
    assert reason.endswith('is too long') and len(reason) < 200


@pytest.mark.parametrize('extra, field', [
    ({'extra': 1}, 'extra'),
    ({'device_profile_group_id': 'one'}, 'device_profile_group_id'),
    ({'device_profile_group_id': -1}, 'device_profile_group_id'),
    ({'image_uuid': 'not-a-uuid'}, 'image_uuid'),
])
def test_arq_create_refuses_unknown_or_malformed_fields(service, extra,
                                                        field):
    body = dict({'device_profile_name': 'p'}, **extra)
    status, error = _call(service.app, 'POST', '/v2/accelerator_requests',
                          body=body)
    assert status == 400 and field in _reason(error)


def test_arq_create_takes_what_python_cyborgclient_sends(service):
    # `openstack accelerator arq create` (python-cyborgclient) sends the
    # group id and image uuid, null unless given: accepted, ignored.
    status, error = _call(service.app, 'POST', '/v2/accelerator_requests',
                          body={'device_profile_name': 'nope',
                                'device_profile_group_id': None,
                                'image_uuid': None})
    assert status == 404 and 'nope' in _reason(error)


def test_every_operation_declares_a_policy_rule_of_ours():
    names = {rule.name for rule in policies.operation_rules()}
    for op in routes.OPERATIONS:
        if op.path.startswith('/v2/') and op.path != '/v2/openapi.json':
            assert op.policy in names, op
    declared = {op.policy for op in routes.OPERATIONS}
    assert names <= declared, names - declared


def test_policy_reference_documents_the_declared_operations():
    documented = {rule.name: rule.operations for rule in policies.list_rules()
                  if hasattr(rule, 'operations')}
    for op in routes.OPERATIONS:
        if op.policy:
            assert {'path': op.path, 'method': op.method} in (
                documented[op.policy])


def test_handlers_return_bodies_not_responses():
    """Status and serialisation belong to the dispatcher."""
    for op in routes.OPERATIONS:
        tree = ast.parse(inspect.getsource(inspect.getmodule(op.handler)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr not in ('json_response', 'empty_response',
                                         'authorize'), (op.name, node.attr)


def test_operations_are_unique():
    keys = [(op.method, op.path) for op in routes.OPERATIONS]
    assert len(keys) == len(set(keys))
    assert all(dataclasses.is_dataclass(op) for op in routes.OPERATIONS)


@pytest.mark.parametrize('method, path, body, reason', [
    # No body where one is needed.
    ('POST', '/v2/device_profiles', None, 'a JSON body is required'),
    ('PATCH', '/v2/accelerator_requests', None, 'a JSON body is required'),
    # Neither or both of two alternatives.
    ('DELETE', '/v2/accelerator_requests', None,
     'give exactly one of: arqs, instance'),
    ('DELETE', '/v2/accelerator_requests?arqs=a&instance='
     '7d9d6a52-5d3c-4bde-8a3f-0c3c8e0e8f11', None,
     'give exactly one of: arqs, instance'),
    # A list of the wrong length says how long it may be.
    ('POST', '/v2/device_profiles',
     [{'name': 'a1', 'groups': [{'resources:FPGA': '1'}]},
      {'name': 'a2', 'groups': [{'resources:FPGA': '1'}]}],
     'at most 1 item, not 2'),
])
def test_reasons_say_what_is_wrong(service, method, path, body, reason):
    """Not the input echoed back ("None is not of type 'object'",
    "{...} is not valid under any of the given schemas", "[...] is too
    long")."""
    status, error = _call(service.app, method, path, body=body)
    assert status == 400
    assert _reason(error) == 'Invalid input: ' + reason


def test_a_field_of_a_later_microversion_says_which(service):
    """A body that a later microversion would take names it."""
    body = [{'name': 'private-early', 'visibility': 'private',
             'groups': [{'resources:FPGA': '1'}]}]
    status, error = _call(service.app, 'POST', '/v2/device_profiles',
                          body=body, version='accelerator 2.4')
    assert status == 400
    reason = _reason(error)
    assert "'visibility' was unexpected" in reason
    assert reason.endswith('; that needs microversion 2.5 or later')
    # What no microversion takes says nothing of one.
    body[0]['colour'] = 'red'
    status, error = _call(service.app, 'POST', '/v2/device_profiles',
                          body=body, version='accelerator 2.4')
    assert status == 400 and 'needs microversion' not in _reason(error)


def test_uuids_in_the_path_are_taken_in_the_form_stored():
    from cyborg.api import dispatch as api_dispatch

    stored = '5b2b0f1e-3c43-4a55-8d3a-7a3c0bbad001'
    for spelled in (stored, stored.upper(), stored.replace('-', ''),
                    stored.upper().replace('-', '')):
        assert api_dispatch._canonical_uuids(
            {'uuid': spelled}) == {'uuid': stored}
        assert api_dispatch._canonical_uuids(
            {'name_or_uuid': spelled}) == {'name_or_uuid': stored}
    # Names, and what is not a uuid, are left alone.
    assert api_dispatch._canonical_uuids(
        {'name_or_uuid': 'gpu-dp'}) == {'name_or_uuid': 'gpu-dp'}
    assert api_dispatch._canonical_uuids(
        {'project_id': stored.upper()}) == {'project_id': stored.upper()}


def test_every_operation_is_matched_by_its_own_path():
    """Routing (an index of the operations by the number of segments)
    finds each operation by its own path, and its path's template."""
    for op in routes.OPERATIONS:
        path = re.sub(r'{[^}]+}', 'x-1', op.path)
        found, variables, allowed = routes.match(op.method, path,
                                                 op.min_version)
        assert found is op, (op.method, op.path)
        assert variables == dict.fromkeys(
            re.findall(r'{([^}]+)}', op.path), 'x-1')
        assert routes.template(path) == op.path
    assert routes.match('GET', '/v2/devices/a/b/c/d/e') == (None, {}, [])
    assert routes.template('/v2/nothing/here') is None
