"""CORS: an allowed origin may send the microversion header and read the
version headers back."""

from oslo_middleware import cors
import webob

from cyborg.api import app as api_app
from tests.fixtures import api as api_fixture


def test_preflight_and_exposed_headers():
    conf = api_fixture.make_conf()
    conf.register_opts(cors.CORS_OPTS, 'cors')
    conf.set_override('allowed_origin', ['https://dashboard.example'],
                      group='cors')
    app = api_app.build_app(conf)
    preflight = webob.Request.blank('/v2/devices', method='OPTIONS', headers={
        'Origin': 'https://dashboard.example',
        'Access-Control-Request-Method': 'GET',
        'Access-Control-Request-Headers': 'OpenStack-API-Version'},
    ).get_response(app)
    assert preflight.status_int == 200
    assert preflight.headers['Access-Control-Allow-Origin'] == (
        'https://dashboard.example')
    assert 'openstack-api-version' in preflight.headers[
        'Access-Control-Allow-Headers'].lower()

    resp = webob.Request.blank('/v2', headers={
        'Origin': 'https://dashboard.example'}).get_response(app)
    exposed = resp.headers['Access-Control-Expose-Headers'].lower()
    assert 'openstack-api-version' in exposed
    assert 'openstack-api-maximum-version' in exposed
