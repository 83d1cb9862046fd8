"""Authentication modes: keystone (auth_token) and noauth."""

import json

from keystonemiddleware import auth_token
import webob

from cyborg.api import app as api_app
from cyborg.api import auth


def _get(app, path, headers=None):
    return webob.Request.blank(path, headers=headers or {}).get_response(app)


def _fault(resp):
    return json.loads(json.loads(resp.text)['error_message'])


def test_keystone_mode_serves_version_documents_without_a_token(conf):
    conf.set_override('auth_strategy', 'keystone', group='api')
    app = api_app.build_app(conf)
    assert _get(app, '/').status_int == 200
    assert _get(app, '/v2').status_int == 200
    assert _get(app, '/accelerator/v2').status_int == 200


def test_keystone_mode_refuses_a_request_without_a_token(conf):
    conf.set_override('auth_strategy', 'keystone', group='api')
    for group, opts in auth_token.list_opts():
        conf.register_opts(opts, group=group)
    conf.set_override('www_authenticate_uri', 'http://keystone.invalid/v3',
                      group='keystone_authtoken')
    app = api_app.build_app(conf)
    resp = _get(app, '/v2/devices')
    assert resp.status_int == 401
    assert _fault(resp)['faultcode'] == 'Client'
    assert 'WWW-Authenticate' in resp.headers


def _marked(environ, roles=('service',)):
    seen = {}

    def app(env, start_response):
        seen['service'] = env[auth.IS_SERVICE]
        start_response('200 OK', [])
        return [b'']

    marker = auth._ServiceMarker(app, None, None)
    marker.roles = set(roles)
    marker(environ, lambda *a: None)
    return seen['service']


def test_a_confirmed_service_token_with_a_service_role_is_a_service():
    assert _marked({'HTTP_X_SERVICE_IDENTITY_STATUS': 'Confirmed',
                    'HTTP_X_SERVICE_ROLES': 'reader,service'})


def test_a_service_token_without_a_service_role_is_not():
    assert not _marked({'HTTP_X_SERVICE_IDENTITY_STATUS': 'Confirmed',
                        'HTTP_X_SERVICE_ROLES': 'member'})


def test_an_invalid_service_token_is_not():
    assert not _marked({'HTTP_X_SERVICE_IDENTITY_STATUS': 'Invalid',
                        'HTTP_X_SERVICE_ROLES': 'service'})
