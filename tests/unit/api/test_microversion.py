import json

from oslo_middleware import cors
import pytest
import webob

from cyborg.api import app as api_app
from cyborg.api import microversion
from cyborg.common import exception
from tests.fixtures import api as api_fixture


def _version(header):
    return microversion.from_headers(
        {} if header is None else {'OpenStack-API-Version': header})


def test_no_header_is_the_minimum():
    assert str(_version(None)) == '2.0'


def test_latest_is_the_maximum():
    assert _version('accelerator latest') == microversion.MAX_VERSION
    assert str(microversion.MAX_VERSION) == microversion.VERSIONS[-1]


def test_one_of_several_services():
    assert str(_version('compute 2.1, accelerator 2.2')) == '2.2'


ONE_PAST_MAX = 'accelerator 2.%d' % len(microversion.VERSIONS)


@pytest.mark.parametrize('header', [ONE_PAST_MAX, 'accelerator 1.0',
                                    'accelerator 3.0'])
def test_out_of_range_is_406(header):
    with pytest.raises(exception.NotAcceptable):
        _version(header)


@pytest.mark.parametrize('header', ['accelerator 2', 'accelerator 2.01',
                                    'accelerator x.y'])
def test_malformed_is_400(header):
    with pytest.raises(exception.Invalid):
        _version(header)


def test_matches():
    v = microversion.APIVersion(2, 2)
    assert v.matches((2, 2))
    assert v.matches((2, 0), (2, 2))
    assert not v.matches((2, 3))
    assert not v.matches(max_version=(2, 1))


def test_versions_are_consecutive():
    minors = [microversion.APIVersion.parse(v).minor
              for v in microversion.VERSIONS]
    assert minors == list(range(len(minors)))


@pytest.mark.parametrize('header', [
    'accelerator 2.' + '1' * 4301, 'accelerator ' + '1' * 4301 + '.0',
    'accelerator 2.1000000'])
def test_a_number_too_long_for_any_version_is_406(header):
    """Thousands of digits were more than int() takes: a ValueError,
    and a 500."""
    with pytest.raises(exception.NotAcceptable) as raised:
        _version(header)
    assert len(str(raised.value)) < 200


def test_a_number_too_long_is_406_on_the_unauthenticated_root():
    with api_fixture.api_service() as service:
        resp = webob.Request.blank('/v2', headers={
            'OpenStack-API-Version': 'accelerator 2.' + '1' * 4301}
        ).get_response(service.app)
    assert resp.status_int == 406, resp.text
    fault = json.loads(resp.json['error_message'])
    assert fault['faultcode'] == 'Client'
    assert fault['faultstring'].startswith(
        'Not acceptable: version 2.1111')
    assert 'minimum is 2.0 and maximum is %s' % (
        microversion.MAX_VERSION) in fault['faultstring']


def _version_headers(resp):
    return {name: resp.headers.get(name) for name in (
        'OpenStack-API-Version', 'OpenStack-API-Minimum-Version',
        'OpenStack-API-Maximum-Version', 'Vary')}


def _named(version):
    return {'OpenStack-API-Version': (None if version is None
                                      else 'accelerator %s' % version),
            'OpenStack-API-Minimum-Version': str(microversion.MIN_VERSION),
            'OpenStack-API-Maximum-Version': str(microversion.MAX_VERSION),
            'Vary': 'OpenStack-API-Version'}


LIMIT = 114688      # [oslo_middleware]max_request_body_size's default


def _too_large(req):
    req.method = 'POST'
    req.headers['Content-Type'] = 'application/json'
    req.body = b'[' + b' ' * LIMIT + b']'


def _chunked_too_large(req):
    _too_large(req)
    del req.headers['Content-Length']
    req.environ.pop('CONTENT_LENGTH', None)
    req.headers['Transfer-Encoding'] = 'chunked'


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        yield service


@pytest.mark.parametrize('path, change, status', [
    # The application's own error (400 or 406 for a bad version).
    ('/v2/nothing_here', None, None),
    ('/v2/device_profiles/%FF', None, 400),
    ('/accelerator/v2/device_profiles/%FF', None, 400),
    ('/v2/device_profiles', _too_large, 413),
    ('/v2/device_profiles', _chunked_too_large, 413),
    ('/accelerator/v2/device_profiles', _too_large, 413),
], ids=['404', 'path-not-utf8', 'mounted-path-not-utf8', '413',
        '413-chunked', 'mounted-413'])
@pytest.mark.parametrize('asked, named', [
    (None, '2.0'), ('accelerator 2.7', '2.7'),
    ('accelerator latest', str(microversion.MAX_VERSION)),
    ('accelerator two', None), (ONE_PAST_MAX, None)])
def test_every_v2_error_names_its_version(service, path, change, status,
                                          asked, named):
    """Errors made before the application read the version (the body
    limit's 413, a path that is not UTF-8) lacked the headers: they name
    the version asked for, as the application's own errors do; when it
    is malformed or out of range, none (no version was served: they
    named 2.0), only the range."""
    req = webob.Request.blank(path)
    if asked is not None:
        req.headers['OpenStack-API-Version'] = asked
    if change is not None:
        change(req)
    resp = req.get_response(service.app)
    assert resp.status_int >= 400, resp.text
    if status is not None:
        assert resp.status_int == status, resp.text
    assert _version_headers(resp) == _named(named)


def test_other_paths_name_no_version(service):
    for path in ('/', '/healthcheck', '/nothing', '/v2x'):
        resp = webob.Request.blank(path).get_response(service.app)
        assert set(_version_headers(resp).values()) == {None}, path


def test_cors_keeps_its_vary():
    """A browser's request: CORS's ``Vary: Origin`` and ours, on its
    preflight as on the answer."""
    conf = api_fixture.make_conf()
    conf.register_opts(cors.CORS_OPTS, 'cors')
    conf.set_override('allowed_origin', ['https://dashboard.example'],
                      group='cors')
    app = api_app.build_app(conf)
    origin = {'Origin': 'https://dashboard.example'}
    preflight = webob.Request.blank(
        '/v2/devices', method='OPTIONS', headers=dict(
            origin, **{'Access-Control-Request-Method': 'GET'}),
    ).get_response(app)
    answer = webob.Request.blank('/v2', headers=origin).get_response(app)
    for resp in (preflight, answer):
        assert resp.status_int == 200, resp.text
        assert resp.headers['OpenStack-API-Version'] == 'accelerator 2.0'
        assert resp.headers['Vary'] == 'Origin, OpenStack-API-Version'


@pytest.mark.parametrize('path', ['/v2', '/v2/devices',
                                  '/accelerator/v2/devices'])
def test_a_version_out_of_range_is_406_naming_the_range_not_a_version(
        service, path):
    """The 406 said ``OpenStack-API-Version: accelerator 2.0``, a version
    the client had not asked for and was not served at: like Cyborg's
    and Placement's, it names none; the headers and the message give the
    range to pick from."""
    resp = webob.Request.blank(path, headers={
        'OpenStack-API-Version': ONE_PAST_MAX}).get_response(service.app)
    assert resp.status_int == 406, resp.text
    assert _version_headers(resp) == _named(None)
    fault = json.loads(resp.json['error_message'])
    assert fault['faultstring'] == (
        'Not acceptable: version 2.%d is not supported by the API; '
        'minimum is 2.0 and maximum is %s' % (len(microversion.VERSIONS),
                                              microversion.MAX_VERSION))
