"""The fault matrix: real processes killed, RabbitMQ, the database and
Placement taken away, concurrent binds; a CI stage of its own
(tools/run-tests.sh runs it after the rest of the suite).

Every test here has a hard time bound (pytest-timeout, setup and teardown
included): a fault that makes the service hang fails its test instead of
the run.  A test may ask for less with its own ``timeout`` mark.
"""

import pathlib

import pytest

TEST_TIMEOUT = 120
HERE = pathlib.Path(__file__).parent
# The stage's longest module (the API fuzzed for minutes), collected first:
# pytest-xdist then starts it at once on one worker while the other works
# through the rest, instead of starting it last and waiting for it alone.
FIRST = 'test_schemathesis.py'
if not (HERE / FIRST).is_file():
    # Renamed or moved, it would match nothing and only slow the stage.
    raise RuntimeError('tests/faults/conftest.py: FIRST names %s, which is '
                       'not there' % FIRST)


def pytest_collection_modifyitems(config, items):
    # Called with the whole session's items: only this directory's.
    for item in items:
        if (HERE in pathlib.Path(item.path).parents
                and item.get_closest_marker('timeout') is None):
            # 'signal' raises in the test, so its fixtures still stop the
            # processes it started.
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT,
                                                method='signal'))
    # A stable sort: the rest keep their order.
    items.sort(key=lambda item: pathlib.Path(item.path) != HERE / FIRST)
