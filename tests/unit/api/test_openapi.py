"""The OpenAPI document: served, complete, and committed up to date."""

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


def test_every_route_is_documented():
    doc = openapi.document()
    for route in routes.ROUTES:
        operation = doc['paths'][route.path][route.method.lower()]
        assert str(route.status) in operation['responses']
        if route.body is not None:
            assert operation['requestBody']['content']['application/json']


def test_served_at_v2(conf):
    conf.set_override('auth_strategy', 'noauth', group='api')
    resp = webob.Request.blank('/v2/openapi.json').get_response(
        api_app.build_app(conf))
    assert resp.status_int == 200
    assert resp.json == openapi.document()
