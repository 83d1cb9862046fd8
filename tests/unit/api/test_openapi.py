"""The OpenAPI document: served, generated from every operation's
declaration, and committed up to date."""

import json
import os

import webob

from cyborg.api import app as api_app
from cyborg.api import openapi
from cyborg.api import routes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
COMMITTED = os.path.join(ROOT, 'doc', 'api', 'openapi.json')


def render():
    """The text of doc/api/openapi.json (regenerate by writing this)."""
    return json.dumps(openapi.document(), indent=2, sort_keys=True) + '\n'


def test_committed_copy_is_current():
    with open(COMMITTED) as f:
        assert f.read() == render(), (
            'doc/api/openapi.json is stale; regenerate with: python -c '
            '"from tests.unit.api import test_openapi as t; '
            'open(t.COMMITTED, \'w\').write(t.render())"')


def test_every_operation_is_documented_as_declared():
    doc = openapi.document()
    for op in routes.OPERATIONS:
        documented = doc['paths'][op.path][op.method.lower()]
        assert documented['operationId'] == op.name
        assert documented.get('x-openstack-policy') == op.policy
        responses = documented['responses']
        # A body over the size limit: 413 before the operation is known;
        # one that is not JSON: 415.
        assert set(responses) == {str(op.status)} | {
            str(code) for code in op.errors} | (
            {'413', '415'} if op.body is not None else set())
        ok = responses[str(op.status)]
        assert ('content' in ok) == (op.status not in (202, 204))
        assert ('requestBody' in documented) == (op.body is not None)


def test_versioned_schemas_list_every_variant():
    doc = openapi.document()
    device = doc['paths']['/v2/devices/{uuid}']['get']['responses']['200']
    variants = device['content']['application/json']['schema']['anyOf']
    assert [v['title'] for v in variants] == [
        'Microversions 2.0 to 2.2', 'Microversion 2.3',
        'Microversion 2.4 and later']
    assert 'status' not in variants[0]['properties']
    assert 'health' in variants[2]['properties']
    params = doc['paths']['/v2/devices']['get']['parameters']
    health = [p for p in params if p['name'] == 'health']
    assert health and 'Microversion 2.4' in health[0]['schema'][
        'description']


def test_served_at_v2(conf):
    conf.set_override('auth_strategy', 'noauth', group='api')
    resp = webob.Request.blank('/v2/openapi.json').get_response(
        api_app.build_app(conf))
    assert resp.status_int == 200
    assert resp.json == openapi.document()
