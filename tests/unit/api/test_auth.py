"""Authentication modes: keystone (auth_token) and noauth."""

import json
import socket
import time

from keystoneauth1 import loading as ks_loading
from keystonemiddleware import auth_token
import webob

from cyborg.api import app as api_app
from cyborg.api import auth
from cyborg.api import microversion


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
    assert resp.headers['OpenStack-API-Version'] == 'accelerator 2.0'
    # auth_token answers before the app reads the version: it is named
    # all the same, the one asked for when it is valid.
    for path in ('/v2/devices', '/accelerator/v2/devices'):
        resp = _get(app, path, {'OpenStack-API-Version': 'accelerator 2.7'})
        assert resp.status_int == 401
        assert resp.headers['OpenStack-API-Version'] == 'accelerator 2.7'
        assert resp.headers['OpenStack-API-Maximum-Version'] == (
            str(microversion.MAX_VERSION))
        assert resp.headers['Vary'] == 'OpenStack-API-Version'
    resp = _get(app, '/v2/devices', {'OpenStack-API-Version':
                                     'accelerator 9.9'})
    assert resp.status_int == 401
    # No version served: only the range is named.
    assert 'OpenStack-API-Version' not in resp.headers
    assert resp.headers['OpenStack-API-Minimum-Version'] == '2.0'


def _marked(environ, roles=('service',)):
    """IS_SERVICE as the marker set it for a confirmed user token and
    ``environ``; None when the marker refused the request (its
    status)."""
    seen = {}

    def app(env, start_response):
        seen['service'] = env[auth.IS_SERVICE]
        start_response('200 OK', [])
        return [b'']

    def start_response(status, headers):
        seen['status'] = status

    marker = auth._ServiceMarker(app, None, None)
    marker.roles = set(roles)
    marker({'REQUEST_METHOD': 'GET', 'HTTP_X_IDENTITY_STATUS': 'Confirmed',
            **environ},
           start_response)
    return seen.get('service', seen.get('status'))


def test_a_confirmed_service_token_with_a_service_role_is_a_service():
    assert _marked({'HTTP_X_SERVICE_IDENTITY_STATUS': 'Confirmed',
                    'HTTP_X_SERVICE_ROLES': 'reader,service'})


def test_a_service_token_without_a_service_role_is_not():
    assert not _marked({'HTTP_X_SERVICE_IDENTITY_STATUS': 'Confirmed',
                        'HTTP_X_SERVICE_ROLES': 'member'})


def test_an_invalid_service_token_is_refused():
    """auth_token refuses it itself unless its decision is delayed; then
    the marker does, with the same 401."""
    assert _marked({'HTTP_X_SERVICE_IDENTITY_STATUS': 'Invalid',
                    'HTTP_X_SERVICE_ROLES': 'service'}).startswith('401')


def test_delayed_auth_decision_still_answers_401(conf):
    """With [keystone_authtoken]delay_auth_decision auth_token passes a
    request without a (valid) token on, marked Invalid: it is refused
    with a 401 naming where to authenticate, as without the option (it
    was a 403 from policy)."""
    conf.set_override('auth_strategy', 'keystone', group='api')
    group = auth.register_keystone_opts(conf)
    conf.set_override('www_authenticate_uri', 'http://keystone.invalid/v3',
                      group=group)
    conf.set_override('delay_auth_decision', True, group=group)
    app = api_app.build_app(conf)
    for path in ('/v2/devices', '/v2/accelerator_requests'):
        resp = _get(app, path)
        assert resp.status_int == 401, resp.text
        assert _fault(resp)['faultcode'] == 'Client'
        assert resp.headers['WWW-Authenticate'] == \
            'Keystone uri="http://keystone.invalid/v3"'
    assert _get(app, '/v2').status_int == 200


def test_a_hung_keystone_answers_503_in_bounded_time(conf):
    """A Keystone that accepts connections and never answers: token
    validation gives up after [keystone_authtoken]http_connect_timeout
    (10 s unless set; 1 s here) and the request answers a JSON 503,
    instead of holding the request thread forever (keystonemiddleware's
    own default) or failing with the WSGI server's 500 (what auth_token
    lets out when it cannot fetch its own token)."""
    hung = socket.socket()
    hung.bind(('127.0.0.1', 0))
    hung.listen(16)             # connections complete; none is answered
    url = 'http://127.0.0.1:%d/v3' % hung.getsockname()[1]
    try:
        conf.set_override('auth_strategy', 'keystone', group='api')
        group = auth.register_keystone_opts(conf)
        # auth_token's own credentials, as the install guide sets them.
        ks_loading.register_auth_conf_options(conf, group)
        conf.register_opts(ks_loading.get_auth_plugin_conf_options(
            'password'), group=group)
        for name, value in (('www_authenticate_uri', url),
                            ('http_connect_timeout', 1),
                            ('http_request_max_retries', 0),
                            ('auth_type', 'password'), ('auth_url', url),
                            ('username', 'cyborg'), ('password', 'secret'),
                            ('user_domain_id', 'default'),
                            ('project_name', 'service'),
                            ('project_domain_id', 'default')):
            conf.set_override(name, value, group=group)
        app = api_app.build_app(conf)
        started = time.monotonic()
        resp = _get(app, '/v2/devices', {'X-Auth-Token': 'a-token'})
        took = time.monotonic() - started
    finally:
        hung.close()
    assert resp.status_int == 503, resp.text
    assert 'identity service cannot be reached' in \
        _fault(resp)['faultstring']
    assert resp.headers['OpenStack-API-Version'] == 'accelerator 2.0'
    assert took < 10, took
