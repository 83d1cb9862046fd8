"""Device profile names, and the projects a private profile is owned by
and shared with, are compared exactly on every database engine: on
MariaDB the default collation ignored case, so Nova's
``?name=FPGA-SMALL`` found ``fpga-small``, ``FPGA-SMALL`` could not be
made beside it, and a DELETE or an ARQ create naming ``FPGA-small``
took ``fpga-small`` (SQLite and PostgreSQL, and Cyborg, compare
exactly)."""


import pytest

from tests.fixtures import api as api_fixture
from tests.fixtures import databases
from tests.unit.api import test_profile_review

_request = test_profile_review._request


def _as(project):
    return {'X-Roles': 'member,reader', 'X-Project-Id': project,
            'X-User-Id': 'u2', 'OpenStack-API-Version': 'accelerator latest'}


def _create(service, name, **more):
    return _request(service, 'POST', '/v2/device_profiles', [
        dict(name=name, groups=[{'resources:FPGA': '1'}], **more)])


def _listed(service, query):
    status, body = _request(service, 'GET', '/v2/device_profiles' + query)
    assert status == 200, body
    return [p['name'] for p in body['device_profiles']]


@pytest.mark.parametrize('kind', databases.KINDS)
def test_profile_names_are_exact(kind):
    with api_fixture.api_service(db_kind=kind) as service:
        assert _create(service, 'fpga-small')[0] == 201
        # Another case, or trailing spaces (which MariaDB's collations
        # ignore, binary ones too), name no profile.
        assert _listed(service, '?name=FPGA-SMALL') == []
        for other in ('FPGA-SMALL', 'fpga-small%20', 'fpga-small%20%20'):
            status, body = _request(service, 'GET',
                                    '/v2/device_profiles/' + other)
            assert status == 404, (other, body)
        status, body = _request(service, 'POST', '/v2/accelerator_requests',
                                {'device_profile_name': 'FPGA-small'})
        assert status == 404, body
        status, body = _request(service, 'DELETE',
                                '/v2/device_profiles/FPGA-small')
        assert status == 404, body

        # ... and may be made beside it.
        status, body = _create(service, 'FPGA-SMALL')
        assert status == 201, body
        assert _listed(service, '?name=fpga-small') == ['fpga-small']
        assert _listed(service, '?name=FPGA-SMALL') == ['FPGA-SMALL']
        status, body = _request(service, 'POST', '/v2/accelerator_requests',
                                {'device_profile_name': 'FPGA-SMALL'})
        assert status == 201, body
        assert [a['device_profile_name'] for a in body['arqs']] == [
            'FPGA-SMALL']
        status, body = _request(service, 'DELETE',
                                '/v2/device_profiles/fpga-small')
        assert status == 204, body
        assert _listed(service, '') == ['FPGA-SMALL']


@pytest.mark.parametrize('kind', databases.KINDS)
def test_private_profiles_match_project_ids_exactly(kind):
    """Project ids are opaque: ``Tenant-A`` is not ``tenant-a``."""
    with api_fixture.api_service(db_kind=kind) as service:
        status, body = _create(service, 'lic', visibility='private',
                               projects=['Tenant-A', 'tenant-a'])
        assert status == 201, body
        assert body['projects'] == ['Tenant-A', 'tenant-a']
        status, body = _create(service, 'lic-b', visibility='private',
                               projects=['Tenant-B'])
        assert status == 201, body
        for name, project, seen in (
                ('lic', 'Tenant-A', 200), ('lic', 'tenant-a', 200),
                ('lic', 'TENANT-A', 404), ('lic-b', 'Tenant-B', 200),
                ('lic-b', 'tenant-b', 404)):
            status, body = _request(service, 'GET',
                                    '/v2/device_profiles/' + name,
                                    headers=_as(project))
            assert status == seen, (name, project, body)
