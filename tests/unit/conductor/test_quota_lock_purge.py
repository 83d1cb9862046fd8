"""The quota lock rows of projects left without ARQs are deleted by a
periodic (``purge_quota_locks``): nothing deleted them, and every project
that ever created an ARQ under quotas kept its row for ever.  On MariaDB
and PostgreSQL, against creates running at the same time, each on a
connection of its own: a row a create holds is skipped, not waited for
nor deleted under it, and a create that comes while the purge holds its
project's row waits, inserts the row again and is still counted against
the limit."""

import threading
import time

import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conductor import arq_binding
from cyborg.conductor import periodics
from cyborg.conductor import quotas
from cyborg.db import models
from cyborg.db.api import quotas as quota_db
from tests.fixtures import api as api_fixture
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.unit.conductor.test_quotas import _count, _create, _ctx, _limits

# Seconds a purge takes at most here when it skips a row, well under
# the lock waits of MariaDB (50 s) and of the row held (PostgreSQL waits
# for ever).
SKIPPED_WITHIN = 5


@pytest.fixture(params=databases.KINDS)
def engine(request):
    with api_fixture.database_in_use(request.param) as engine:
        yield engine


def _purge(admin_context):
    return quotas.purge_unused_locks(None, admin_context)


def _locked_projects(bind):
    with bind.connect() as connection:
        return set(connection.scalars(sa.select(
            models.QuotaLock.project_id)))


def _create_and_delete(profile, project, limits):
    arq, = _create(profile, project, limits)
    arq_binding.delete(None, _ctx(project), arq_uuids=[arq['uuid']])


def test_projects_left_without_arqs_lose_their_lock_row(
        engine, admin_context, monkeypatch):
    monkeypatch.setattr(quotas, 'PURGE_BATCH', 4)     # several batches
    profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
    limits = _limits(accelerator_requests=1)
    for i in range(10):
        _create_and_delete(profile, f'gone-{i}', limits)
    _create(profile, 'busy', limits)
    assert _count(engine, models.QuotaLock) == 11
    assert _purge(admin_context) == 10
    assert _locked_projects(engine) == {'busy'}
    assert _purge(admin_context) == 0
    # A purged project's next creates insert its row again, and its
    # quota still holds.
    _create(profile, 'gone-3', limits)
    with pytest.raises(exception.QuotaExceeded):
        _create(profile, 'gone-3', limits)
    assert _locked_projects(engine) == {'busy', 'gone-3'}


def test_the_conductor_runs_the_purge_periodically(conf, db,
                                                   admin_context):
    [(name, option, path)] = [job for job in periodics.JOBS
                              if job[0] == 'purge_quota_locks']
    assert option == 'reconcile_interval'
    profile = seed.seed_profile(db, [{'resources:FPGA': '1'}])
    _create_and_delete(profile, 'p1', _limits(accelerator_requests=1))
    periodics.run_job(conf, name, path)
    assert _count(db, models.QuotaLock) == 0


class _HeldCreate:
    """A create of ``project`` paused after it locked the project's row,
    before it counts and inserts its ARQs (its transaction open)."""

    def __init__(self, monkeypatch, profile, project, limits):
        self.locked, self._go = threading.Event(), threading.Event()
        self.outcome = []
        real = quotas.check

        def check(context, project_id, groups, limits):
            if project_id == project and not self.locked.is_set():
                self.locked.set()
                assert self._go.wait(60)
            return real(context, project_id, groups, limits)
        monkeypatch.setattr(quotas, 'check', check)
        self._thread = threading.Thread(target=self._create, args=(
            profile, project, limits))
        self._thread.start()
        assert self.locked.wait(30)

    def _create(self, profile, project, limits):
        try:
            _create(profile, project, limits)
            self.outcome.append('created')
        except Exception as exc:  # noqa: BLE001 (asserted by the test)
            self.outcome.append(exc)

    def finish(self):
        self._go.set()
        self._thread.join(60)
        return self.outcome


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_a_row_a_create_holds_is_skipped_not_waited_for(
        kind, admin_context, monkeypatch):
    with api_fixture.database_in_use(kind) as server:
        profile = seed.seed_profile(server, [{'resources:FPGA': '1'}])
        limits = _limits(accelerator_requests=1)
        for project in ('held', 'idle'):
            _create_and_delete(profile, project, limits)
        # The create has locked 'held''s row; its project has no ARQ yet.
        held = _HeldCreate(monkeypatch, profile, 'held', limits)
        try:
            started = time.monotonic()
            assert _purge(admin_context) == 1
            assert time.monotonic() - started < SKIPPED_WITHIN
            assert _locked_projects(server) == {'held'}
        finally:
            outcome = held.finish()
        assert outcome == ['created']
        # It counts: the row it held was not deleted under it.
        with pytest.raises(exception.QuotaExceeded):
            _create(profile, 'held', limits)
        assert _purge(admin_context) == 0       # it has an ARQ now
        assert _count(server, models.ExtARQ, 'held') == 1


@pytest.mark.parametrize('kind', ['mysql', 'postgresql'])
def test_creates_coming_while_the_purge_holds_the_row_wait_and_count(
        kind, admin_context, monkeypatch):
    """Two creates of a project at its limit come while the purge has
    locked its row, and wait; the purge deletes it and commits; the
    creates insert it again between them, and one is refused."""
    with api_fixture.database_in_use(kind) as server:
        profile = seed.seed_profile(server, [{'resources:FPGA': '1'}])
        limits = _limits(accelerator_requests=1)
        _create_and_delete(profile, 'p1', limits)
        real = quota_db._delete_locked
        outcomes, threads = [], []

        def create():
            try:
                _create(profile, 'p1', limits)
                outcomes.append('created')
            except exception.QuotaExceeded:
                outcomes.append('refused')
            except Exception as exc:  # noqa: BLE001 (asserted below)
                outcomes.append(exc)

        def racing(connection, ids):
            # The purge has locked the row: the creates start, and wait.
            threads.extend(threading.Thread(target=create)
                           for _ in range(2))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(2)
            assert outcomes == []
            return real(connection, ids)
        monkeypatch.setattr(quota_db, '_delete_locked', racing)
        assert _purge(admin_context) == 1
        monkeypatch.setattr(quota_db, '_delete_locked', real)
        for thread in threads:
            thread.join(60)
        assert sorted(outcomes, key=str) == ['created', 'refused']
        assert _count(server, models.ExtARQ, 'p1') == 1
        assert _locked_projects(server) == {'p1'}
