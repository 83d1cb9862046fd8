import json

import pytest
import webob

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
