"""The database server is there but cyborg's schema is not (a service
started before ``cyborg-dbsync upgrade``, a table dropped): reads in the
API and writes through the conductor answer 503 saying what to run, on
every engine; it was a 500 with a traceback, and a conductor's start-up
jobs gave up on it at once instead of waiting."""

import datetime
import logging

import pytest
import sqlalchemy as sa
import webob

from cyborg.conductor import periodics
from tests.fixtures import api as api_fixture

MEMBER = {'X-Project-Id': 'p1', 'X-User-Id': 'u', 'X-Roles': 'member,reader',
          'Content-Type': 'application/json'}
ADMIN = dict(MEMBER, **{'X-Roles': 'admin'})


def _call(service, method, path, headers, body=None):
    request = webob.Request.blank(path, method=method, headers=headers)
    if body is not None:
        request.body = body
    return request.get_response(service.app)


@pytest.mark.parametrize('db_kind', ['sqlite', 'mysql', 'postgresql'])
def test_a_missing_table_is_a_503_naming_dbsync(db_kind):
    with api_fixture.api_service(db_kind=db_kind) as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_qat')
        with service.engine.begin() as c:
            c.execute(sa.text('DROP TABLE attributes'))
            c.execute(sa.text('DROP TABLE quota_locks'))
        read = _call(service, 'GET', '/v2/attributes', ADMIN)
        assert read.status_int == 503, read.text
        assert 'cyborg-dbsync upgrade' in read.text
        write = _call(service, 'POST', '/v2/attributes', ADMIN,
                      b'{"deployable_id": 1, "key": "k", "value": "v"}')
        assert write.status_int == 503, write.text
        assert 'cyborg-dbsync upgrade' in write.text


def test_a_start_up_job_waits_for_the_schema(conf, caplog, monkeypatch):
    """A conductor started before cyborg-dbsync: its start-up job tries
    again, as while the database is away."""
    from oslo_db import exception as db_exc

    calls = []

    def job(conf, context, started_at):
        calls.append(1)
        if len(calls) == 1:
            raise db_exc.DBNonExistentTable('arqs')
    monkeypatch.setattr(periodics, '_load', lambda path: job)
    caplog.set_level(logging.WARNING, logger='cyborg.conductor.periodics')
    startup = periodics.AtStart(conf, 'recover', 'x:y',
                                datetime.datetime(2026, 1, 1), retry=0.01)
    startup._run()
    assert len(calls) == 2
    assert 'waits for the database' in caplog.text
