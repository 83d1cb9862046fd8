"""?hostname= of the exports names a host that may not exist: a name no
row can hold (a NUL, which PostgreSQL refuses even in a query) exports
nothing rather than failing.  Its own module: test_exports.py keeps one
API service for its whole module."""

import pytest
import webob

from tests.fixtures import api as api_fixture

MANAGER = {'X-Project-Id': 'p1', 'X-User-Id': 'u', 'X-Roles': 'manager',
           'OpenStack-API-Version': 'accelerator 2.9'}


def _get(service, path):
    return webob.Request.blank(path, headers=MANAGER).get_response(
        service.app)


@pytest.mark.parametrize('db_kind', ['sqlite', 'postgresql'])
def test_a_host_name_no_row_can_hold_exports_nothing(db_kind):
    with api_fixture.api_service(db_kind=db_kind) as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_qat')
        slices = _get(service, '/v2/exports/resourceslices?hostname=a%00b')
        assert slices.status_int == 200, slices.text
        assert slices.json['items'] == []
        gres = _get(service, '/v2/exports/gres.conf?hostname=a%00b')
        assert gres.status_int == 200, gres.text
        assert not [line for line in gres.text.splitlines()
                    if line and not line.startswith('#')], gres.text
        # The host that exists is exported (the filter is not ignored).
        known = _get(service, '/v2/exports/resourceslices?hostname=host1')
        assert len(known.json['items']) == 1, known.text
