"""One cloud for the tests of this package: the real Keystone and a whole
deployment behind it (tests/fixtures/deployment.py) with two API
processes, one per policy mode, a recording Nova and a fake Glance.

Package scope: built once per pytest worker for every test here, which
must therefore not rely on lists being empty (they name what they make).
"""

import pytest

from tests.fixtures import deployment as deployment_fixture
from tests.fixtures import recording_http
from tests.fixtures.keystone import keystone  # noqa: F401 (a fixture)

NEW = 'new'
LEGACY = 'legacy'


@pytest.fixture(scope='package')
def nova():
    with recording_http.FakeNova() as server:
        yield server


@pytest.fixture(scope='package')
def glance():
    with recording_http.FakeGlance() as server:
        yield server


@pytest.fixture(scope='package')
def cloud(tmp_path_factory, keystone, nova, glance):  # noqa: F811
    apis = {NEW: deployment_fixture.NEW_DEFAULTS,
            LEGACY: deployment_fixture.LEGACY_DEFAULTS}
    with deployment_fixture.Deployment(tmp_path_factory.mktemp('cloud'),
                                       keystone, apis=apis,
                                       nova=nova, glance=glance) as running:
        yield running
