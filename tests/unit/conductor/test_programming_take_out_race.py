"""Every conductor runs ``take_out_overdue`` (periodics.JOBS), on its own
clock: two of them can read the same overdue programming mark at once.
The card is taken out, and counted as abandoned, by one of them only.

Each conductor is a thread here, without the other's in-process lock (as
in another process); on SQLite and on the real servers, whose row locks
decide which one wins."""

import contextlib
import datetime
import threading

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import context as cyborg_context
from cyborg.conductor import programming
from cyborg.db import models
from cyborg.db.api import deployables as deployable_db
from cyborg.placement import client as placement_client
from tests.fixtures import api as api_fixture
from tests.fixtures import databases
from tests.fixtures import placement as placement_fixture
from tests.unit.conductor import test_programming as tp

placement_url = tp.placement_url


@pytest.fixture(params=databases.KINDS)
def engine(request, conf):
    if request.param == 'sqlite':
        yield request.getfixturevalue('db')
        return
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


@pytest.fixture
def tconf(conf, engine, placement_url):
    """The conductor's configuration, with the real Placement."""
    placement_fixture.placement_conf(conf, placement_url)
    placement_client.reset_clients()
    return conf


@pytest.fixture
def ctx():
    return cyborg_context.RequestContext(project_id='p1', is_service=True)


def test_two_conductors_take_an_abandoned_programming_out_once(
        tconf, ctx, engine, monkeypatch):
    device = tp._reported(tconf, engine, handles=2,
                          traits={programming.TRAIT_ATTRIBUTE:
                                  tp.OLD_TRAIT})
    until = timeutils.utcnow() - datetime.timedelta(seconds=1)
    with engine.begin() as c:
        c.execute(sa.update(models.Deployable)
                  .where(models.Deployable.id == device.deployable_id)
                  .values(bitstream_id='left-behind',
                          programming_until=until))
    # Two processes share no lock: both read the overdue mark before
    # either acts on it.
    monkeypatch.setattr(programming, '_deployable_lock',
                        lambda _id: contextlib.nullcontext())
    both_read = threading.Barrier(2)
    waited = threading.local()
    read = deployable_db.program_target_by_id

    def read_then_wait(*args, **kwargs):
        target = read(*args, **kwargs)
        if not getattr(waited, 'done', False):
            waited.done = True
            both_read.wait(30)
        return target

    monkeypatch.setattr(deployable_db, 'program_target_by_id',
                        read_then_wait)
    abandoned = tp._programmings('abandoned')[0]
    taken, errors = [], []

    def conductor():
        try:
            taken.append(programming.take_out_overdue(tconf, ctx))
        except Exception as exc:   # reported below, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=conductor) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert sorted(taken) == [0, 1]
    assert tp._programmings('abandoned')[0] == abandoned + 1
    # Taken out all the same: no image, unhealthy, the mark cleared.
    assert taken_out(engine, device)


def taken_out(engine, device):
    """Whether the device's deployable is as a take-out leaves it: no
    image, unhealthy, its mark cleared."""
    with engine.connect() as c:
        row = c.execute(sa.select(models.Deployable.bitstream_id,
                                  models.Deployable.health,
                                  models.Deployable.programming_until)
                        .where(models.Deployable.id ==
                               device.deployable_id)).one()
    return tuple(row) == (None, 'unhealthy', None)
