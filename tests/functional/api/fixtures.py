"""Gabbi fixtures: each YAML file gets its own database and conductor.

Values the YAML needs (seeded uuids) are published as environment
variables, read there as ``$ENVIRON['NAME']``.
"""

import os

from gabbi import fixture

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
        os.environ.update(env)


class BindingARQFixture(APIFixture):
    """APIFixture plus profile 'seeded-dp' and, of project 'admin', one
    ARQ in BindStarted for instance $ENVIRON['CYBORG_BINDING_INSTANCE']
    and one Bound ARQ for $ENVIRON['CYBORG_BOUND_INSTANCE']."""

    def seed(self, service):
        super().seed(service)
        env = api_fixture.seed_binding_arqs(service.engine)
        os.environ.update({'CYBORG_' + k.upper(): v for k, v in env.items()})


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
