"""An ARQ create whose device profile is deleted between the conductor's
read of it and the insert of the ARQs, on MariaDB and PostgreSQL: the
create answers 404 (the profile is gone) and writes nothing, not a 500
from the foreign key.

The interleaving is made, not hoped for: another transaction deletes the
profile row and stays open.  The create still reads the profile (that
delete is not committed), then its insert waits for the row's lock (the
foreign key check); once the delete commits, the insert finds no
profile."""

import concurrent.futures
import json
import time

import pytest
import sqlalchemy as sa
import webob

from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.fixtures import databases

PROJECT = 'p1'
# The ARQs' insert, issued and not answered yet, as each server tells.
INSERTING = {
    'mysql': "SELECT COUNT(*) FROM information_schema.processlist WHERE "
             "info LIKE 'INSERT INTO extended_accelerator_requests%'",
    'postgresql': "SELECT COUNT(*) FROM pg_stat_activity WHERE state = "
                  "'active' AND query LIKE "
                  "'INSERT INTO extended_accelerator_requests%'",
}


def _create(service, name):
    req = webob.Request.blank('/v2/accelerator_requests', method='POST')
    req.headers.update({'X-Roles': 'member,reader', 'X-Project-Id': PROJECT,
                        'X-User-Id': 'u1'})
    req.content_type = 'application/json'
    req.body = json.dumps({'device_profile_name': name}).encode()
    resp = req.get_response(service.app)
    return resp.status_int, resp.json


def _inserting(engine, kind):
    """Whether the create's insert is waiting (asked on a connection of
    its own: not one of the service's few pooled ones)."""
    with engine.connect() as connection:
        return connection.execute(sa.text(INSERTING[kind])).scalar() > 0


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_a_create_whose_profile_goes_meanwhile_is_404(kind):
    with api_fixture.api_service(db_kind=kind) as service:
        with sa.orm.Session(service.engine) as session, session.begin():
            session.add(models.DeviceProfile(
                uuid='0f0e1d2c-3b4a-4958-8776-a5b4c3d2e1f0', name='going',
                profile_json=json.dumps([{'resources:FPGA': '1'}])))
        url = service.engine.url.render_as_string(hide_password=False)
        watcher = sa.create_engine(url)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            with databases.row_locked(
                    url, "DELETE FROM device_profiles WHERE name = 'going'"):
                creating = pool.submit(_create, service, 'going')
                deadline = time.monotonic() + 10
                while not _inserting(watcher, kind):
                    assert not creating.done(), creating.result()
                    assert time.monotonic() < deadline, (
                        'the create never waited for the profile row')
                    time.sleep(0.02)
            # The delete is committed: the create goes on, and fails.
            status, body = creating.result(30)
        watcher.dispose()
        assert status == 404, body
        assert 'Device profile going could not be found' in (
            body['error_message'])
        with service.engine.connect() as connection:
            assert connection.scalar(sa.select(sa.func.count()).select_from(
                models.ExtARQ)) == 0
