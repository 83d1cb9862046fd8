"""Host names are compared exactly on every engine (binary collations on
MariaDB/MySQL, migration d4b8e2f1a7c3): ``Compute-1`` and ``compute-1``
are two hosts, each with its own row and devices.  On MariaDB the
second one's reports were taken for the first host's: its devices
replaced the other's, and the two shared one row."""

import pytest
import requests
import sqlalchemy as sa

from cyborg.conductor import inventory_apply
from cyborg.db import migration
from cyborg.db import models
from cyborg.db.api import devices as device_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import inventory as inventory_db
from tests.fixtures import api as api_fixture
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf

placement = pf.placement

UPPER, LOWER = 'Compute-1', 'compute-1'


@pytest.fixture(params=databases.KINDS)
def engine(request, conf, placement):
    pf.placement_conf(conf, placement.url)
    for name in (UPPER, LOWER):
        requests.post(placement.url + '/resource_providers',
                      json={'name': name}, headers=pf.HEADERS,
                      timeout=10).raise_for_status()
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def test_hosts_differing_in_case_only_are_two_hosts(conf, engine,
                                                    admin_context):
    upper = [cf.device(UPPER, '0000:81:00.0')]
    lower = [cf.device(LOWER, '0000:82:00.0'),
             cf.device(LOWER, '0000:83:00.0')]
    for name, devices in ((UPPER, upper), (LOWER, lower)):
        reply = inventory_apply.handle_report(conf, admin_context, name,
                                              cf.report(devices))
        assert reply['need_full'] is False
    with engine.connect() as connection:
        rows = sorted(connection.execute(sa.select(
            models.Host.hostname, models.Host.report_digest)).all())
    assert [name for name, _digest in rows] == sorted([UPPER, LOWER])
    assert len({digest for _name, digest in rows}) == 2
    for name, count in ((UPPER, 1), (LOWER, 2)):
        assert host_db.get(admin_context, name)['hostname'] == name
        assert len(inventory_db.load(admin_context, name)['devices']) == \
            count
        found = device_db.get_all(admin_context, {'hostname': name})
        assert [d.hostname for d in found] == [name] * count
    assert host_db.get(admin_context, 'COMPUTE-1') is None
    assert set(host_db.changes_and_shared(admin_context, [LOWER])) == \
        {LOWER}


def test_the_migration_keeps_the_hosts_there_and_matches_them_exactly():
    with databases.throwaway_database('mysql') as url:
        migration.upgrade(url, 'c3f1a7d92e58')
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(
                    "INSERT INTO hosts (hostname, compute_node_name, "
                    "placement_synced) VALUES ('Compute-1', 'Node-1', 1)"))
                connection.execute(sa.text(
                    "INSERT INTO devices (uuid, type, vendor, model, "
                    "hostname, status) VALUES "
                    "('d1', 'GPU', 'v', 'm', 'Compute-1', 'enabled')"))
            migration.upgrade(url)
            with engine.begin() as connection:
                def count(sql):
                    return connection.execute(sa.text(sql)).scalar()
                assert count("SELECT COUNT(*) FROM hosts h JOIN devices d "
                             "ON d.hostname = h.hostname WHERE "
                             "h.hostname = 'Compute-1' AND "
                             "h.compute_node_name = 'Node-1'") == 1
                assert count("SELECT COUNT(*) FROM hosts "
                             "WHERE hostname = 'compute-1'") == 0
                assert count("SELECT COUNT(*) FROM devices "
                             "WHERE hostname = 'compute-1'") == 0
                assert count("SELECT COUNT(*) FROM hosts "
                             "WHERE compute_node_name = 'node-1'") == 0
                # The other spelling is a host of its own.
                connection.execute(sa.text(
                    "INSERT INTO hosts (hostname, placement_synced) "
                    "VALUES ('compute-1', 0)"))
                assert count("SELECT COUNT(*) FROM hosts") == 2
        finally:
            engine.dispose()
