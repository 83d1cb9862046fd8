"""Migration 07cc1cd55872: ``bind_timeout`` on ARQs, the seconds the
bind of one in BindStarted has from its start (the ``bind_timeout`` of
the conductor that started it; for one marked Deleting, the seconds
its delete has).  A nullable column: a bind of before it, which its
conductor may still carry across the upgrade, has no ``bind_timeout``
(the stuck-bind check holds it to the checker's, as before), and the
previous release's writes, which do not name it, go on unchanged.  Run
again (after an interruption) it changes nothing more."""

import datetime
import uuid as uuidlib

import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from tests.fixtures import databases

BEFORE = '8db7069d63f0'
REVISION = '07cc1cd55872'

_ARQ = models.ExtARQ.__table__


def _binding(engine, started):
    """An ARQ in BindStarted since ``started``, as the previous release
    writes it (no ``bind_timeout``); its uuid."""
    profile = models.DeviceProfile.__table__
    uuid = str(uuidlib.uuid4())
    with engine.begin() as c:
        profile_id = c.execute(sa.insert(profile).values(
            uuid=str(uuidlib.uuid4()), name='dp-' + uuid[:8],
            profile_json='[{"resources:FPGA": "1"}]')).inserted_primary_key[0]
        c.execute(sa.insert(_ARQ).values(
            uuid=uuid, state='Initial', device_profile_id=profile_id,
            device_profile_group_id=0, project_id='p1'))
        c.execute(sa.update(_ARQ).where(_ARQ.c.uuid == uuid).values(
            state='BindStarted', bind_started_at=started,
            bind_owner='conductor-old', bind_id=str(uuidlib.uuid4()),
            hostname='host1', instance_uuid=str(uuidlib.uuid4())))
    return uuid


def _added(engine):
    with engine.connect() as c:
        return {uuid: tuple(rest) for uuid, *rest in c.execute(sa.select(
            _ARQ.c.uuid, _ARQ.c.bind_timeout))}


@pytest.mark.parametrize('kind', databases.KINDS)
def test_binds_of_before_have_no_deadline_of_their_own(kind):
    started = datetime.datetime(2026, 12, 11, 10, 0, 0, 123456)
    with databases.throwaway_database(kind) as url:
        migration.upgrade(url, BEFORE)
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            before = _binding(engine, started)
            migration.upgrade(url, REVISION)
            assert migration.version(url) == REVISION
            columns = {c['name']: c for c in sa.inspect(engine).get_columns(
                'extended_accelerator_requests')}
            assert columns['bind_timeout']['nullable']
            assert isinstance(columns['bind_timeout']['type'], sa.Integer)
            assert _added(engine) == {before: (None,)}
            # The previous release binds as it did, naming no deadline.
            during = _binding(engine, started)
            with engine.begin() as c:
                c.execute(sa.update(_ARQ).where(_ARQ.c.uuid == before)
                          .values(bind_timeout=240))
            # Run again (an interrupted upgrade starts it over): what was
            # written since stays.
            migration.stamp(url, BEFORE)
            migration.upgrade(url)
            assert migration.version(url) == migration.head()
            assert _added(engine) == {before: (240,), during: (None,)}
        finally:
            engine.dispose()
