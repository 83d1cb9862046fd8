"""The real conductor, in process, over oslo.messaging's fake:// driver,
with an in-memory database and the real Placement: what the agent's
reporter talks to in these tests (no stand-in for our own seams)."""

import uuid

import oslo_messaging as messaging
import pytest
import requests
import sqlalchemy as sa
from oslo_db.sqlalchemy import engines

from cyborg.common import rpc
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import api as db_api
from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.fixtures import sysfs as fake_sysfs
from tests.fixtures.placement import placement  # noqa: F401


class Conductor:
    """A conductor RPC server that tests can take down and bring back."""

    def __init__(self, conf, engine, placement_url):
        self.conf = conf
        self.engine = engine
        self.placement_url = placement_url
        self._server = None

    def start(self):
        endpoint = conductor_manager.ConductorManager(self.conf, 'cond-1')
        self._server = rpc.get_server(self.conf, conductor_rpcapi.TOPIC,
                                      'cond-1', [endpoint])
        self._server.start()

    def stop(self):
        if self._server is not None:
            self._server.stop()
            self._server.wait()
            self._server = None

    def deployables(self, hostname=fake_sysfs.HOST):
        """{deployable name: num_accelerators} stored for ``hostname``."""
        with self.engine.connect() as c:
            rows = c.execute(
                sa.select(models.Deployable.name,
                          models.Deployable.num_accelerators)
                .join(models.Device,
                      models.Device.id == models.Deployable.device_id)
                .where(models.Device.hostname == hostname)).all()
        return dict(rows)

    def providers(self):
        """{provider name: total of its one inventory} in Placement."""
        headers = placement_fixture.HEADERS
        url = self.placement_url
        found = {}
        for rp in requests.get(url + '/resource_providers', headers=headers,
                               timeout=10).json()['resource_providers']:
            inv = requests.get(
                f"{url}/resource_providers/{rp['uuid']}/inventories",
                headers=headers, timeout=10).json()['inventories']
            found[rp['name']] = sum(i['total'] for i in inv.values())
        return found


def create_compute_node(url, name):
    resp = requests.post(url + '/resource_providers',
                         json={'name': name, 'uuid': str(uuid.uuid4())},
                         headers=placement_fixture.HEADERS, timeout=10)
    assert resp.status_code in (200, 201), resp.text


@pytest.fixture
def conductor_db():
    """A migrated SQLite file behind oslo.db's engine, as in production:
    the conductor's RPC threads each get their own connection, and
    transactions (and their locks) are real."""
    with databases.throwaway_database('sqlite') as url:
        databases.create_schema(url)
        engine = engines.create_engine(url, sqlite_fk=True)
        undo = db_api.patch_engine(engine)
        yield engine
        undo()
        engine.dispose()


@pytest.fixture
def conductor(conf, conductor_db, placement):  # noqa: F811
    placement_fixture.placement_conf(conf, placement.url)
    api_fixture._register_messaging_opts(conf)
    transport = messaging.get_rpc_transport(conf, url='fake:/')
    rpc.set_transport(transport)
    create_compute_node(placement.url, fake_sysfs.HOST)
    server = Conductor(conf, conductor_db, placement.url)
    server.start()
    yield server
    server.stop()
    rpc.set_transport(None)
    transport.cleanup()
