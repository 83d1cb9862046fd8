"""A host whose name changes case only (``Compute-1`` becomes
``compute-1``: a [DEFAULT]host or FQDN spelt anew), while an instance
holds one of its devices, on MariaDB and PostgreSQL.

MariaDB compares host names ignoring case: the new name's reports are
the old host's, whose devices (their row uuids made from the old
spelling) go, the held one kept as gone while its allocation lasts.
The new spelling's deployable of that card then collided with the kept
one's name: every report failed with a duplicate entry until the
instance went.  Deployable names are compared exactly, as on
PostgreSQL, so the report is stored and the card offered anew under the
new name."""

import pytest
import requests
import sqlalchemy as sa
from oslo_db.sqlalchemy import exc_filters

from cyborg.conductor import inventory_apply
from cyborg.db import api as db_api
from cyborg.db import models
from tests.fixtures import conductor as cf
from tests.fixtures import databases
from tests.fixtures import placement as pf

placement = pf.placement

OLD, NEW = 'Compute-1', 'compute-1'
ADDRESS = '0000:81:00.0'


@pytest.fixture(params=['mysql', 'postgresql'])
def engine(request, conf, placement):
    with databases.throwaway_database(request.param) as url:
        databases.create_schema(url)
        engine = sa.create_engine(url)
        exc_filters.register_engine(engine)
        undo = db_api.patch_engine(engine)
        pf.placement_conf(conf, placement.url)
        for name in (OLD, NEW):
            requests.post(placement.url + '/resource_providers',
                          json={'name': name}, headers=pf.HEADERS,
                          timeout=10).raise_for_status()
        try:
            yield engine
        finally:
            undo()
            engine.dispose()


def _deployables(engine):
    with engine.connect() as connection:
        return sorted(connection.scalars(sa.select(models.Deployable.name)))


def test_a_host_renamed_in_case_only_keeps_reporting(conf, engine,
                                                     admin_context,
                                                     placement):
    old = [cf.device(OLD, ADDRESS)]
    inventory_apply.handle_report(conf, admin_context, OLD, cf.report(old))
    (name,) = _deployables(engine)
    provider = requests.get(
        f'{placement.url}/resource_providers?name={name}',
        headers=pf.HEADERS, timeout=10).json()['resource_providers'][0]
    pf.hold_allocation(placement.url, '6a1e8d3c-0c55-4c61-9f1e-8c7c2b0d9a11',
                       {provider['uuid']: {'PGPU': 1}})
    new = [cf.device(NEW, ADDRESS)]
    reply = inventory_apply.handle_report(conf, admin_context, NEW,
                                          cf.report(new))
    assert reply['need_full'] is False
    assert f'{NEW}_{ADDRESS}' in _deployables(engine)
