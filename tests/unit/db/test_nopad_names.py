"""Names compared exactly tell trailing spaces apart on MariaDB too
(``utf8mb4_nopad_bin``, migration 6b2d8f4e1c07), as on PostgreSQL and
SQLite: an attribute key ``k `` (``POST /v2/attributes`` takes any
string) may be set beside ``k``, and profiles ``gpu`` and ``gpu ``
(imported from Cyborg: cyborg's API refuses spaces in a new profile's
name) are two, each found by its own name.  ``utf8mb4_bin``, MariaDB's
before, is PAD SPACE: it took ``k `` for ``k``, and the unique key
refused the second."""

import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.fixtures import databases
from tests.unit.api import test_profile_review
from tests.unit.db import test_precise_times

_request = test_profile_review._request


@pytest.mark.parametrize('kind', databases.KINDS)
def test_attribute_keys_differing_in_trailing_spaces_are_two(kind):
    with api_fixture.api_service(db_kind=kind) as service:
        ids = api_fixture.seed_device(service.engine, 'host1', 'host1_fpga',
                                      handles=1, attributes={'k': 'plain'})
        status, body = _request(service, 'POST', '/v2/attributes', {
            'deployable_id': ids['deployable_id'], 'key': 'k ',
            'value': 'spaced'})
        assert status == 201, body
        for key, values in (('k', ['plain']), ('k%20', ['spaced']),
                            ('k%20%20', [])):
            status, body = _request(
                service, 'GET', '/v2/attributes?deployable_id=%d&key=%s'
                % (ids['deployable_id'], key))
            assert status == 200, body
            assert [a['value'] for a in body['attributes']] == values, key


@pytest.mark.parametrize('kind', databases.KINDS)
def test_profiles_differing_in_trailing_spaces_are_two(kind):
    with api_fixture.api_service(db_kind=kind) as service:
        with service.engine.begin() as connection:
            connection.execute(sa.insert(models.DeviceProfile), [
                {'uuid': uuid, 'name': name, 'profile_json':
                 '[{"resources:FPGA": "1"}]'}
                for uuid, name in (('u1', 'gpu'), ('u2', 'gpu '))])
        status, body = _request(service, 'GET',
                                '/v2/device_profiles?name=gpu')
        assert [p['uuid'] for p in body['device_profiles']] == ['u1']
        for name, uuid in (('gpu', 'u1'), ('gpu%20', 'u2'),
                           ('gpu%20%20', None)):
            status, body = _request(service, 'GET',
                                    '/v2/device_profiles/' + name)
            if uuid is None:
                assert status == 404, body
            else:
                assert status == 200, body
                assert body['device_profile']['uuid'] == uuid


def test_the_migration_makes_exact_names_no_pad_and_keeps_them():
    with databases.throwaway_database('mysql') as url:
        migration.upgrade(url, test_precise_times.BEFORE)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(
                    "INSERT INTO hosts (hostname, placement_synced) "
                    "VALUES ('compute-1', 0)"))
                # PAD SPACE: 'compute-1 ' is the host above.
                with pytest.raises(sa.exc.IntegrityError):
                    with connection.begin_nested():
                        connection.execute(sa.text(
                            "INSERT INTO hosts (hostname, placement_synced) "
                            "VALUES ('compute-1 ', 0)"))
            migration.upgrade(url)
            with engine.begin() as connection:
                collations = set(connection.execute(sa.text(
                    'SELECT collation_name FROM information_schema.columns '
                    "WHERE table_schema = DATABASE() AND collation_name "
                    "LIKE '%bin'")).scalars())
                connection.execute(sa.text(
                    "INSERT INTO hosts (hostname, placement_synced) "
                    "VALUES ('compute-1 ', 0)"))
                found = connection.execute(sa.text(
                    'SELECT hostname FROM hosts WHERE hostname = :h'),
                    {'h': 'compute-1'}).scalars().all()
        finally:
            engine.dispose()
    assert collations == {models.EXACT_COLLATION_MARIADB}
    assert found == ['compute-1']
