"""Runs every gabbi YAML file under gabbits/ against the in-process API.

One pytest test per file (and database kind): each file is one ordered
suite with its own database and conductor, so suites also run correctly
under pytest-xdist.
"""

import os
import unittest
import uuid

from gabbi import handlers
from gabbi import suitemaker
from gabbi import utils
import pytest

from tests.functional.api import fixtures

GABBITS = os.path.join(os.path.dirname(__file__), 'gabbits')
FILES = sorted(f[:-5] for f in os.listdir(GABBITS) if f.endswith('.yaml'))


def _suite(name):
    suite_dict = utils.load_yaml(
        yaml_file=os.path.join(GABBITS, name + '.yaml'), safe=True)
    return suitemaker.test_suite_from_dict(
        unittest.TestLoader(), name.replace('-', ''), suite_dict, GABBITS,
        str(uuid.uuid4()), None, fixtures, fixtures.current_app,
        handlers=[h() for h in handlers.RESPONSE_HANDLERS],
        test_loader_name=__name__)


# The suites whose reads and writes differ most between engines (paging,
# enums, integrity errors) also run on the servers' databases.
ON_SERVERS = ('accelerator-requests', 'attributes', 'deployables',
              'device-profiles', 'device-profiles-visibility', 'devices',
              'health', 'pagination')
CASES = ([(name, 'sqlite') for name in FILES]
         + [(name, kind) for kind in ('mysql', 'postgresql')
            for name in ON_SERVERS])


@pytest.mark.parametrize('name, db_kind', CASES)
def test_gabbi(name, db_kind):
    fixtures.CURRENT['db_kind'] = db_kind
    suite = _suite(name)
    assert suite.countTestCases(), 'no gabbi tests in %s.yaml' % name
    result = unittest.TextTestRunner(verbosity=0).run(suite)
    problems = ['%s\n%s' % (test.id(), text)
                for test, text in result.failures + result.errors]
    assert result.wasSuccessful(), '\n\n'.join(problems)
    assert not result.skipped, result.skipped
