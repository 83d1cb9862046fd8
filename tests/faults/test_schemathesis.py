"""Fuzzing: schemathesis drives every operation of /v2/openapi.json against
the in-process API (real database, real conductor on fake://).  No request
may answer 5xx, and every response must conform to the document: a status
the operation declares, JSON, and a body matching the declared schema
(the document is generated from the operations' declarations, so this
checks the declarations against what the code answers).  About 2,500
requests in all.

(schemathesis' own pytest plugin does not run on pytest 9, so the
operations are driven through their hypothesis strategies here.)
"""

import collections

from hypothesis import given
from hypothesis import HealthCheck
from hypothesis import settings
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi import checks as openapi_checks

from tests.fixtures import api as api_fixture

EXAMPLES_PER_OPERATION = 100
CHECKS = [not_a_server_error,
          openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance,
          openapi_checks.response_schema_conformance]


def _fuzz(operation):
    """Run the operation's generated cases; return the first failure."""
    failures = []

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None,
              database=None, suppress_health_check=list(HealthCheck),
              derandomize=True)
    def run(case):
        try:
            case.call_and_validate(checks=CHECKS)
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append('%s %s: %s' % (operation.method.upper(),
                                           operation.path, e))
            raise

    try:
        run()
    except Exception:  # noqa: BLE001 - hypothesis re-raises the minimal one
        pass
    return failures[-1:] if failures else []


def test_no_server_errors_and_responses_conform():
    with api_fixture.api_service() as service:
        api_fixture.seed_device(service.engine, 'host1', 'host1_FakeDevice')
        api_fixture.seed_binding_arqs(service.engine)
        statuses = collections.Counter()

        def counting_app(environ, start_response):
            def start(status, headers, exc_info=None):
                statuses[int(status.split()[0])] += 1
                return start_response(status, headers, exc_info)
            return service.app(environ, start)

        schema = schemathesis.openapi.from_wsgi('/v2/openapi.json',
                                                counting_app)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 24   # all but the document itself
        failures = []
        for operation in operations:
            failures += _fuzz(operation)
    assert not failures, '\n\n'.join(failures)
    assert sum(statuses.values()) >= 2000, statuses
    assert not [code for code in statuses if code >= 500], statuses
    # The generated input reached past validation, not only 400s.
    assert statuses[200] and statuses[201] and statuses[204], statuses
