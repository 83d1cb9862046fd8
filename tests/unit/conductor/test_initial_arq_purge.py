"""ARQs never bound past ``[conductor]initial_arq_max_age`` are deleted
by a periodic (``purge_initial_arqs``): a create answered 503 (a
conductor that died after its write) left ARQs Nova never learned the
uuids of, Initial for ever and counted against their project's quota.
Off by default; on, only ARQs still Initial and that old go, checked
again in the transaction that deletes them, on every database."""

import datetime
import logging

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import exception
from cyborg.common import notify
from cyborg.common import states
from cyborg.conductor import arq_binding
from cyborg.conductor import periodics
from cyborg.db import models
from cyborg.db.api import arqs as arq_db
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.fixtures import notifications as notification_fixture
from tests.fixtures import recording_http
from tests.unit.conductor.test_quotas import _create, _limits

_ARQ = models.ExtARQ.__table__
DAY = 86400

# For a bind: the module's Placement and a recording Nova.
placement_url = seed.placement_url
fake_nova = recording_http.fake_nova
bind_conf = seed.bind_conf
service_ctx = seed.service_ctx


@pytest.fixture(params=databases.KINDS)
def engine(request):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _age(bind, uuids, seconds, state=None):
    values = {'created_at': timeutils.utcnow() -
              datetime.timedelta(seconds=seconds)}
    if state is not None:
        values['state'] = state
    with bind.begin() as connection:
        connection.execute(sa.update(_ARQ).where(
            _ARQ.c.uuid.in_(list(uuids))).values(**values))


def _left(bind):
    with bind.connect() as connection:
        return dict(connection.execute(sa.select(_ARQ.c.uuid,
                                                 _ARQ.c.state)).all())


def _arqs(profile, project, count, limits=None):
    return [_create(profile, project, limits)[0]['uuid']
            for _ in range(count)]


def test_old_initial_arqs_go_and_free_the_quota(engine, conf, admin_context,
                                                caplog, monkeypatch):
    monkeypatch.setattr(arq_binding, 'PURGE_BATCH', 3)    # several batches
    conf.set_override('initial_arq_max_age', DAY, group='conductor')
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    limits = _limits(accelerator_requests=7)
    orphans = _arqs(profile, 'p1', 7, limits)
    with pytest.raises(exception.QuotaExceeded):
        _create(profile, 'p1', limits)
    recent = _arqs(profile, 'p2', 1)
    binding, bound, failed = _arqs(profile, 'p2', 3)
    _age(engine, orphans, DAY + 60)
    _age(engine, [binding], DAY + 60, states.BIND_STARTED)
    _age(engine, [bound], DAY + 60, states.BOUND)
    _age(engine, [failed], DAY + 60, states.BIND_FAILED)
    with notification_fixture.published(conf) as published, \
            caplog.at_level(logging.WARNING,
                            logger='cyborg.conductor.arq_binding'):
        assert arq_binding.purge_initial(conf, admin_context) == 7
        sent = [n[1] for n in published()]
    assert _left(engine) == {recent[0]: states.INITIAL,
                             binding: states.BIND_STARTED,
                             bound: states.BOUND, failed: states.BIND_FAILED}
    deleted = [n['payload']['cyborg_object.data'] for n in sent
               if n['event_type'] == notify.ARQ_DELETE[0]]
    assert sorted(d['uuid'] for d in deleted) == sorted(orphans)
    assert {(d['state'], d['previous_state']) for d in deleted} == {
        (states.DELETING, states.INITIAL)}
    [record] = [r for r in caplog.records
                if r.name == 'cyborg.conductor.arq_binding']
    assert record.getMessage().startswith(
        'Deleted 7 accelerator request(s) never bound in the 86400 s after '
        'their creation ([conductor]initial_arq_max_age): ')
    assert '(project p1)' in record.getMessage()
    # Their share of the quota is free.
    assert len(_arqs(profile, 'p1', 7, limits)) == 7
    assert arq_binding.purge_initial(conf, admin_context) == 0


def test_off_by_default(conf, db, admin_context):
    assert conf.conductor.initial_arq_max_age == 0
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    orphans = _arqs(profile, 'p1', 2)
    _age(db, orphans, 365 * DAY)
    assert arq_binding.purge_initial(conf, admin_context) == 0
    assert set(_left(db)) == set(orphans)


def test_a_bind_that_took_one_meanwhile_keeps_it(engine, conf,
                                                 admin_context, monkeypatch):
    """Read Initial by the purge, then bound before its transaction: the
    delete checks again, under the row's lock, and leaves it."""
    conf.set_override('initial_arq_max_age', DAY, group='conductor')
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    taken, orphan = _arqs(profile, 'p1', 2)
    _age(engine, [taken, orphan], DAY + 60)
    read = arq_db.initial_before

    def then_bound(context, created_before, limit):
        uuids = read(context, created_before, limit)
        _age(engine, [taken], DAY + 60, states.BIND_STARTED)
        return uuids
    monkeypatch.setattr(arq_db, 'initial_before', then_bound)
    assert arq_binding.purge_initial(conf, admin_context) == 1
    assert _left(engine) == {taken: states.BIND_STARTED}


def test_the_conductor_runs_it_periodically(conf, db, admin_context):
    [(name, option, path)] = [job for job in periodics.JOBS
                              if job[0] == 'purge_initial_arqs']
    assert option == 'reconcile_interval'
    conf.set_override('initial_arq_max_age', 60, group='conductor')
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    orphans = _arqs(profile, 'p1', 2)
    _age(db, orphans[:1], 120)
    periodics.run_job(conf, name, path)
    assert set(_left(db)) == set(orphans[1:])


def test_a_bind_of_an_arq_deleted_after_it_was_read_is_404(
        bind_conf, db, service_ctx, monkeypatch):
    """The purge (or a delete) removed the ARQ between the bind's read
    and its move to BindStarted: 404, as for an ARQ not found, not
    "already being bound" (409)."""
    from tests.unit.conductor import test_arq_binding as tb
    device = seed.seed_device(db, handles=4)
    uuid, = tb._create(db, service_ctx)
    move = arq_db.transition

    def deleted_first(context, arq_uuid, *args, **kwargs):
        context.session.execute(sa.delete(_ARQ).where(
            _ARQ.c.uuid == arq_uuid))
        return move(context, arq_uuid, *args, **kwargs)
    monkeypatch.setattr(arq_db, 'transition', deleted_first)
    with pytest.raises(exception.ARQNotFound):
        arq_binding.start_bind(bind_conf, service_ctx,
                               {uuid: tb._binding(device)})
    assert seed.handles_in_use(db) == 0
