"""Quotas on a Galera cluster: two creates of one project on two nodes at
once never pass a limit together.

A quota-checked create locks its project's row of ``quota_locks`` by
writing it.  The write set only ``updated_at``, whole seconds on
MariaDB: a project that created a moment before (in the same second)
had its row left unchanged, Galera then certified nothing for it, and
both nodes' creates counted the usage before the other's rows: 4 ARQs
under a limit of 3, in 18 rounds of 20.  Every lock now changes the row
(``generation``), so one create is aborted by the other's write and run
again, and counts it.

Each node's create runs in a process of its own (the database layer has
one engine per process), through cyborg's own ``arq_binding.create``.
"""

import multiprocessing
import time

import sqlalchemy as sa

from cyborg.db import models
from tests.fixtures import arqs as seed
from tests.fixtures import databases
from tests.fixtures import galera

ROUNDS = 8
LIMIT = 3


def _creator(url, barrier, jobs, results):
    from cyborg.common import context as cyborg_context
    from cyborg.common import exception
    from cyborg.common import quota
    from cyborg.conductor import arq_binding
    from cyborg.db import api as db_api
    from tests.fixtures import api as api_fixture

    db_api.patch_engine(api_fixture._engine(url))
    limits = quota.Limits({'accelerator_requests': LIMIT})
    while (job := jobs.get()) is not None:
        profile, project, first = job
        context = cyborg_context.RequestContext(project_id=project,
                                                user_id='u')
        for _ in range(first):
            # The project's lock row made, then written again: this
            # second's time is in it.
            arq_binding.create(context, profile, project, limits=limits)
        barrier.wait()
        time.sleep(0.05)        # the first creates applied on each node
        barrier.wait()
        try:
            arq_binding.create(context, profile, project, limits=limits)
            results.put('created')
        except exception.QuotaExceeded:
            results.put('refused')
        except Exception as exc:  # noqa: BLE001 - the test says what
            results.put(repr(exc))


def test_creates_on_two_nodes_do_not_pass_a_limit_together(tmp_path):
    with galera.GaleraCluster(tmp_path, size=2) as cluster:
        database = cluster.database()
        urls = [node.url(database) for node in cluster.nodes]
        databases.create_schema(urls[0])
        engine = sa.create_engine(urls[0], poolclass=sa.pool.NullPool)
        spawn = multiprocessing.get_context('spawn')
        barrier = spawn.Barrier(2)
        jobs = [spawn.Queue(), spawn.Queue()]
        results = spawn.Queue()
        creators = [spawn.Process(target=_creator, daemon=True,
                                  args=(url, barrier, queue, results))
                    for url, queue in zip(urls, jobs)]
        try:
            profile = seed.seed_profile(engine, [{'resources:FPGA': '1'}])
            for creator in creators:
                creator.start()
            conflicts = cluster.conflicts()
            held = {}
            for index in range(ROUNDS):
                project = f'project-{index}'
                jobs[0].put((profile, project, LIMIT - 1))
                jobs[1].put((profile, project, 0))
                outcomes = sorted(results.get(timeout=120)
                                  for _ in creators)
                assert outcomes == ['created', 'refused'], outcomes
                with engine.connect() as c:
                    held[project] = c.scalar(
                        sa.select(sa.func.count())
                        .select_from(models.ExtARQ)
                        .where(models.ExtARQ.project_id == project))
            assert held == {f'project-{index}': LIMIT
                            for index in range(ROUNDS)}
            # They did meet: one node's create aborted by the other's.
            assert cluster.conflicts() > conflicts
        finally:
            for queue in jobs:
                queue.put(None)
            for creator in creators:
                creator.join(30)
            engine.dispose()
