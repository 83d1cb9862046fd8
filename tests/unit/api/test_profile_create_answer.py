"""POST /v2/device_profiles answers with the profile the conductor
wrote, not with a second read of it: a profile deleted between the
conductor's commit and that read left nothing to show, and the create
was a 500."""

import json
import threading

import pytest
import sqlalchemy as sa
import webob

from tests.fixtures import api as api_fixture

ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'admin',
         'X-User-Id': 'u1', 'OpenStack-API-Version': 'accelerator latest'}


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        yield service


def _request(service, method, path, body=None):
    req = webob.Request.blank(path, method=method, headers=ADMIN)
    if body is not None:
        req.headers['Content-Type'] = 'application/json'
        req.body = json.dumps(body).encode()
    resp = req.get_response(service.app)
    return resp.status_int, resp.json if resp.body else None


def test_a_profile_deleted_before_the_api_reads_it_is_still_answered(
        service):
    """The API thread's first statement on device_profiles, if it makes
    one, comes after the conductor committed: the profile is deleted
    just before it, as a concurrent DELETE could."""
    api_thread = threading.get_ident()
    on_api_thread = []

    def delete_first(conn, cursor, statement, *args):
        if (threading.get_ident() == api_thread and not on_api_thread
                and 'device_profiles' in statement):
            on_api_thread.append(statement)
            with service.engine.begin() as other:
                other.execute(sa.text(
                    "DELETE FROM device_profiles WHERE name = 'fleeting'"))

    sa.event.listen(service.engine, 'before_cursor_execute', delete_first)
    try:
        status, body = _request(service, 'POST', '/v2/device_profiles', [
            {'name': 'fleeting', 'groups': [{'resources:FPGA': '1'}]}])
    finally:
        sa.event.remove(service.engine, 'before_cursor_execute',
                        delete_first)
    assert status == 201, body
    assert body['name'] == 'fleeting'
    assert body['groups'] == [{'resources:FPGA': '1'}]
    # Rendered from the conductor's answer: no read of its own.
    assert on_api_thread == []


def test_the_answer_is_what_a_read_shows(service):
    status, created = _request(service, 'POST', '/v2/device_profiles', [
        {'name': 'shared', 'description': 'd', 'visibility': 'private',
         'projects': ['p2', 'p1'],
         'groups': [{'resources:FPGA': '2', 'trait:CUSTOM_A': 'required'},
                    {'resources:PGPU': '1'}]}])
    assert status == 201, created
    status, shown = _request(service, 'GET',
                             '/v2/device_profiles/' + created['uuid'])
    assert status == 200, shown
    assert created == shown['device_profile']
    assert created['projects'] == ['p1', 'p2']
    assert created['created_at'] is not None
