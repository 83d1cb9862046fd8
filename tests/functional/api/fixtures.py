"""Gabbi fixtures: each YAML file gets its own database and conductor.

Values the YAML needs (seeded uuids) are published as environment
variables, read there as ``$ENVIRON['NAME']``.
"""

import datetime
import os

from gabbi import fixture
import sqlalchemy as sa
from sqlalchemy import orm

from cyborg.common import states
from cyborg.db import models
from tests.fixtures import api as api_fixture

# The app of the running suite; the intercept hands it to gabbi.
CURRENT = {}


def current_app():
    """The intercept: gabbi asks for the app before fixtures start, so
    hand it one that finds the running suite's app per request."""
    def app(environ, start_response):
        return CURRENT['service'].app(environ, start_response)
    return app


class APIFixture(fixture.GabbiFixture):
    """The API on a fresh database with two seeded devices: an FPGA on
    host1 (4 handles) and a GPU on host2 (1 handle)."""

    def start_fixture(self):
        self._cm = api_fixture.api_service(CURRENT.get('overrides'),
                                           CURRENT.get('db_kind', 'sqlite'))
        service = self._cm.__enter__()
        CURRENT['service'] = service
        self.seed(service)

    def stop_fixture(self):
        CURRENT.pop('service', None)
        self._cm.__exit__(None, None, None)

    def seed(self, service):
        fpga = api_fixture.seed_device(service.engine, 'host1',
                                       'host1_FakeDevice')
        gpu = api_fixture.seed_device(
            service.engine, 'host2', 'host2_0000:3b:00.0', device_type='GPU',
            vendor='10de', handles=1,
            attributes={'rc': 'PGPU', 'trait0': 'CUSTOM_GPU_NVIDIA'})
        env = {}
        for prefix, seeded in (('FPGA', fpga), ('GPU', gpu)):
            for key, value in seeded.items():
                env['CYBORG_%s_%s' % (prefix, key.upper())] = str(value)
                if key.endswith('uuid'):
                    # The same uuid spelt otherwise (upper case, no dashes).
                    env['CYBORG_%s_%s_PLAIN' % (prefix, key.upper())] = \
                        str(value).upper().replace('-', '')
        os.environ.update(env)


class BindingARQFixture(APIFixture):
    """APIFixture plus profile 'seeded-dp' and, of project 'admin', one
    ARQ in BindStarted for instance $ENVIRON['CYBORG_BINDING_INSTANCE']
    and one Bound ARQ for $ENVIRON['CYBORG_BOUND_INSTANCE']."""

    def seed(self, service):
        super().seed(service)
        env = api_fixture.seed_binding_arqs(service.engine)
        os.environ.update({'CYBORG_' + k.upper(): v for k, v in env.items()})


def set_health(engine, model, uuid, health, reason, at):
    """Write a health state as the conductor's state machine leaves it on
    a device or deployable row (``model``)."""
    with orm.Session(engine) as session, session.begin():
        session.execute(sa.update(model).where(model.uuid == uuid).values(
            health=health, health_reason=reason, health_updated_at=at))


def bind_to(engine, arq_uuid, deployable_id):
    """Point an ARQ at the deployable it is bound to (a bind's doing)."""
    with orm.Session(engine) as session, session.begin():
        session.execute(sa.update(models.ExtARQ)
                        .where(models.ExtARQ.uuid == arq_uuid)
                        .values(deployable_id=deployable_id))


class HealthFixture(BindingARQFixture):
    """BindingARQFixture with health set: the FPGA device suspect and its
    deployable unhealthy (its own health is the worse); the GPU device
    unhealthy and its deployable probing (the device's is the worse).
    The Bound ARQ is bound to the GPU deployable, the BindStarted one to
    the FPGA deployable."""

    AT = datetime.datetime(2024, 5, 1, 10, 0, 0)

    def seed(self, service):
        super().seed(service)
        env, engine = os.environ, service.engine
        minute = datetime.timedelta(minutes=1)
        for model, key, health, reason, at in (
                (models.Device, 'CYBORG_FPGA_DEVICE_UUID', states.SUSPECT,
                 'corrected AER errors', self.AT),
                (models.Deployable, 'CYBORG_FPGA_DEPLOYABLE_UUID',
                 states.UNHEALTHY, 'XID 79', self.AT + minute),
                (models.Device, 'CYBORG_GPU_DEVICE_UUID', states.UNHEALTHY,
                 'row remap failure', self.AT + 2 * minute),
                (models.Deployable, 'CYBORG_GPU_DEPLOYABLE_UUID',
                 states.PROBING, 'read well again', self.AT + 3 * minute)):
            set_health(engine, model, env[key], health, reason, at)
        bind_to(engine, env['CYBORG_BOUND_ARQ'],
                int(env['CYBORG_GPU_DEPLOYABLE_ID']))
        bind_to(engine, env['CYBORG_BINDING_ARQ'],
                int(env['CYBORG_FPGA_DEPLOYABLE_ID']))


class PlacementFixture(fixture.GabbiFixture):
    """The real Placement in-process, for the suites whose conductor calls
    reach it (device enable/disable); list it before APIFixture."""

    def start_fixture(self):
        from cyborg.placement import embedded
        self._server = embedded.EmbeddedPlacement('sqlite://')
        url = self._server.start()
        CURRENT['overrides'] = {('placement', 'auth_type'): 'none',
                                ('placement', 'endpoint_override'): url}

    def stop_fixture(self):
        CURRENT.pop('overrides', None)
        self._server.stop()


class NoNovaFixture(PlacementFixture):
    """PlacementFixture for suites that bind: no Nova to tell, so bind
    outcomes are not sent (the conductor still records them)."""

    def start_fixture(self):
        super().start_fixture()
        CURRENT['overrides'][('nova', 'send_events')] = False
