"""Bad input: schemathesis drives every operation of /v2/openapi.json
against the in-process API (a real conductor over RabbitMQ), on MariaDB and
on PostgreSQL.

- No request may answer 5xx.
- Every response conforms to the document: a status the operation
  declares, JSON, and a body matching the declared schema (the document
  is generated from the operations' declarations, so this checks the
  declarations against what the code answers).
- A request answered 4xx writes nothing: no INSERT, UPDATE or DELETE
  touching a row is committed on the database while it is served (the
  API and its conductor share one engine here, whose statements and
  commits are watched).

The cases are generated once (the costly part), on MariaDB, and the same
requests, in the same order, are then sent to a PostgreSQL deployment
seeded alike: about 5,000 requests on each.  (Runs of 600 and 1,500
examples per operation found a profile group asking for no accelerator
answered 201 with no ARQ, and a NUL character in a body a 500 on
PostgreSQL; both now pass.)  (schemathesis' own pytest
plugin does not run on pytest 9, so the operations are driven through
their hypothesis strategies here.)  The hostile bodies and bad
microversions sent to every route are
``tests/faults/test_hostile_every_route.py``.
"""

import collections
import contextlib
import os
import random
import threading

from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import seed
from hypothesis import settings
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi import checks as openapi_checks
import sqlalchemy as sa

from tests.fixtures import api as api_fixture
from tests.fixtures import rabbit

# About 10,000 requests on real database servers: more than the stage's
# default bound.
pytestmark = pytest.mark.timeout(
    int(os.environ.get('CYBORG_FUZZ_TIMEOUT', 600)), method='signal')

EXAMPLES_PER_OPERATION = int(os.environ.get('CYBORG_FUZZ_EXAMPLES', 250))
# CI sends the same cases every time (derandomized).  A longer hunt sets
# CYBORG_FUZZ_SEED to a number (to repeat a run) or to "random" (the seed
# used is printed), and CYBORG_FUZZ_EXAMPLES to more than 250, with a
# longer CYBORG_FUZZ_TIMEOUT: doc/source/testing.rst.
FUZZ_SEED = os.environ.get('CYBORG_FUZZ_SEED')
if FUZZ_SEED == 'random':
    FUZZ_SEED = str(random.SystemRandom().randrange(2 ** 32))
# What a failed case raises: schemathesis' FailureGroup is a
# BaseExceptionGroup, not an Exception.
FAILED = (Exception, FailureGroup)
CHECKS = [not_a_server_error,
          openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance,
          openapi_checks.response_schema_conformance]


def _name(operation):
    return '%s %s' % (operation.method.upper(), operation.path)


def _fuzz(operation, cases):
    """Run the operation's generated cases, appending each to ``cases``;
    return the first failure."""
    failures = []

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None,
              database=None, suppress_health_check=list(HealthCheck),
              derandomize=FUZZ_SEED is None, report_multiple_bugs=False)
    def run(case):
        cases.append(case)
        try:
            case.call_and_validate(checks=CHECKS)
        except FAILED as e:
            failures.append('%s: %s' % (_name(operation), e))
            raise

    if FUZZ_SEED is not None:
        run = seed(int(FUZZ_SEED))(run)
    try:
        run()
    except FAILED:      # hypothesis re-raises the minimal one
        pass
    return failures[-1:] if failures else []


def _replay(cases, app):
    """Send ``cases`` to ``app``; the first failure of each operation."""
    failures = {}
    for case in cases:
        name = _name(case.operation)
        if name in failures:
            continue
        try:
            case.call_and_validate(checks=CHECKS, app=app)
        except FAILED as e:
            failures[name] = '%s: %s' % (name, e)
    return list(failures.values())


class _Writes:
    """Counts the rows that statements committed on ``engine`` wrote,
    whatever the thread or connection: a DML statement's rows are held
    per connection until its transaction commits (counted) or rolls back
    (dropped)."""

    def __init__(self, engine):
        self.committed = 0
        self._pending = {}
        self._lock = threading.Lock()
        sa.event.listen(engine, 'begin', self._rollback)
        sa.event.listen(engine, 'after_cursor_execute', self._executed)
        sa.event.listen(engine, 'commit', self._commit)
        sa.event.listen(engine, 'rollback', self._rollback)

    def _executed(self, conn, cursor, statement, parameters, context,
                  executemany):
        if context.isinsert or context.isupdate or context.isdelete or \
                statement.lstrip().upper().startswith(
                    ('INSERT', 'UPDATE', 'DELETE')):
            # -1: the driver cannot say (an executemany): count it.
            rows = cursor.rowcount if cursor.rowcount >= 0 else 1
            if rows:
                with self._lock:
                    self._pending[id(conn)] = self._pending.get(
                        id(conn), 0) + rows

    def _commit(self, conn):
        with self._lock:
            self.committed += self._pending.pop(id(conn), 0)

    def _rollback(self, conn):
        with self._lock:
            self._pending.pop(id(conn), None)


class _Watched:
    """A service's app that counts the statuses it answers, and which
    requests wrote rows."""

    def __init__(self, service):
        self.service = service
        self.writes = _Writes(service.engine)
        self.statuses = collections.Counter()
        self.writing = collections.Counter()    # status -> requests
        self.wrote_on_4xx = []

    def __call__(self, environ, start_response):
        answered = []

        def start(status, headers, exc_info=None):
            answered.append(int(status.split()[0]))
            return start_response(status, headers, exc_info)

        before = self.writes.committed
        # The whole body, so that the request's work is done.
        body = list(self.service.app(environ, start))
        wrote = self.writes.committed - before
        self.statuses[answered[0]] += 1
        self.writing[answered[0]] += bool(wrote)
        if wrote and 400 <= answered[0] < 500:
            self.wrote_on_4xx.append('%s %s?%s answered %d, wrote %d row(s)'
                                     % (environ['REQUEST_METHOD'],
                                        environ['PATH_INFO'],
                                        environ.get('QUERY_STRING', ''),
                                        answered[0], wrote))
        return body

    def check(self):
        statuses = self.statuses
        assert not self.wrote_on_4xx, '\n'.join(self.wrote_on_4xx)
        # The watch sees writes: every request answered 201 wrote.
        assert self.writing[201] == statuses[201], (self.writing, statuses)
        assert sum(statuses.values()) >= 2000, statuses
        assert not [code for code in statuses if code >= 500], statuses
        # The generated input reached past validation, not only 400s.
        assert statuses[200] and statuses[201] and statuses[204], statuses


@contextlib.contextmanager
def _deployment(db_kind):
    with rabbit.throwaway_vhost() as transport_url, \
            api_fixture.api_service(db_kind=db_kind,
                                    transport_url=transport_url) as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_FakeDevice')
        api_fixture.seed_binding_arqs(service.engine)
        yield _Watched(service)


def test_no_server_errors_responses_conform_and_4xx_write_nothing():
    if FUZZ_SEED is not None:
        print('CYBORG_FUZZ_SEED=%s CYBORG_FUZZ_EXAMPLES=%d'
              % (FUZZ_SEED, EXAMPLES_PER_OPERATION))
    cases, failures = [], []
    with _deployment('mysql') as mariadb:
        schema = schemathesis.openapi.from_wsgi('/v2/openapi.json', mariadb)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 24   # all but the document itself
        for operation in operations:
            failures += ['MariaDB: ' + f for f in _fuzz(operation, cases)]
    with _deployment('postgresql') as postgresql:
        failures += ['PostgreSQL: ' + f for f in _replay(cases, postgresql)]
    assert not failures, '\n\n'.join(failures)
    for watched in (mariadb, postgresql):
        watched.check()
