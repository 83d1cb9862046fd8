"""A MariaDB Galera cluster of three behaves as the single server: two
cyborg-conductors, each connected to a node of its own (the API to the
third), bind 24 ARQs at once on the 16 attach handles of one device.

Each node takes the lowest free handle for its binds without seeing the
other node's locks, so binds of the two nodes take the same handle: the
one whose write set is ordered first wins, the other transaction is
aborted by it (or fails certification at commit) with error 1213 and is
run again.  The end is the one of a single server: 16 Bound, 8 binds
refused (400: no free attach handle) with their ARQs left Initial, no
handle twice, one event per Bound ARQ at Nova and none for the others,
every node showing the same rows, everything deletable.

A round of binds meets a few such conflicts (1 to 6 in the runs this was
written with), not always one: rounds go on, each checked the same way,
until the nodes counted an aborted transaction and the conductors a
transaction run again (``cyborg_db_transaction_retries_total``).
"""

import concurrent.futures
import time

import sqlalchemy as sa

from cyborg.db import models
from tests.fixtures import faults
from tests.fixtures import galera
from tests.fixtures import processes

HOST = 'galera-host'
BINDS = 24
HANDLES = 16
RETRIES = 'cyborg_db_transaction_retries_total'
MAX_ROUNDS = 5


def _settled(d):
    return not [r for r in d.arqs().values() if r.state == 'BindStarted']


def _rows_on(node, database):
    """(ARQ rows, handles in use) as ``node`` shows them once it has
    applied every write the cluster committed before the read."""
    engine = sa.create_engine(
        node.url(database), poolclass=sa.pool.NullPool,
        connect_args={'init_command': 'SET SESSION wsrep_sync_wait = 1'})
    try:
        with engine.connect() as c:
            arqs = sorted(
                (r.uuid, r.state, r.attach_handle_id) for r in c.execute(
                    sa.select(models.ExtARQ.__table__)))
            in_use = sorted(c.scalars(
                sa.select(models.AttachHandle.id)
                .where(models.AttachHandle.in_use.is_(True))))
        return arqs, in_use
    finally:
        engine.dispose()


def _bind_round(d, cluster, database):
    """24 binds at once and their end, checked; then all deleted."""
    with concurrent.futures.ThreadPoolExecutor(BINDS) as pool:
        arqs = [u for created in pool.map(
            lambda _: d.create_arqs('plain', 1), range(BINDS))
            for u in created]
    instance, refused = d.bind_at_once(arqs, HOST)
    processes.wait_for(lambda: _settled(d), timeout=30,
                       what='every bind to end')

    rows = d.arqs()
    assert sorted(rows) == sorted(arqs)
    assert len(refused) == BINDS - HANDLES
    bound = {u: r for u, r in rows.items() if u not in refused}
    assert {r.state for r in bound.values()} == {'Bound'}
    assert {r.bind_owner for r in bound.values()} == {'c1', 'c2'}
    assert {u: r.instance_uuid for u, r in bound.items()} == {
        u: instance[u] for u in bound}
    # A refused PATCH wrote nothing: its ARQ is as it was.
    assert {(rows[u].state, rows[u].hostname, rows[u].instance_uuid,
             rows[u].attach_handle_id, rows[u].bind_id, rows[u].bind_owner)
            for u in refused} == {('Initial',) + (None,) * 5}
    held = [r.attach_handle_id for r in bound.values()]
    assert len(held) == len(set(held)) == HANDLES
    assert d.handles_in_use() == HANDLES
    ended = dict.fromkeys(bound, 'completed')

    def events():
        return {u: s for u, s in d.events_by_arq().items() if u in arqs}
    processes.wait_for(lambda: set(events()) == set(ended), timeout=20,
                       what='every outcome at Nova')
    time.sleep(1)
    # One event per Bound ARQ; none for a refused one.
    assert events() == {u: [s] for u, s in ended.items()}
    # Every node has applied the same rows.
    seen = [_rows_on(node, database) for node in cluster.nodes]
    assert seen[0][0] == sorted((r.uuid, r.state, r.attach_handle_id)
                                for r in rows.values())
    assert seen[1] == seen[0] and seen[2] == seen[0]

    response, _ = d.call('DELETE', '/accelerator_requests?arqs=' +
                         ','.join(rows))
    assert response.status_code == 204, response.text
    for node in cluster.nodes:
        assert _rows_on(node, database) == ([], [])


def test_binds_across_galera_nodes_end_as_on_one_server(tmp_path):
    with galera.GaleraCluster(tmp_path, size=3) as cluster:
        database = cluster.database()
        first, second, third = (n.url(database) for n in cluster.nodes)
        with faults.FaultDeployment(
                tmp_path, 'mysql', conductors=('c1', 'c2'), agents=(HOST,),
                api_options={'threads': 64}, database=first,
                service_databases={'conductor-c1': first,
                                   'conductor-c2': second,
                                   'api-api': third},
                metrics=True) as d:
            d.profile('plain', {'resources:FPGA': '1'})
            conflicts = cluster.conflicts()
            for rounds in range(1, MAX_ROUNDS + 1):
                _bind_round(d, cluster, database)
                aborted = cluster.conflicts() - conflicts
                retried = sum(d.metric(host, RETRIES)
                              for host in ('c1', 'c2'))
                if aborted and retried:
                    break
            print('Galera cluster started in %.1f s; %d round(s) of %d '
                  'binds: %d transaction(s) aborted by another node\'s '
                  'write, %d run again'
                  % (cluster.started_in, rounds, BINDS, aborted, retried))
            assert aborted >= 1, 'no transaction met a conflict'
            assert retried >= 1, 'no conductor ran a transaction again'
            d.logs_without_tracebacks('conductor-c1', 'conductor-c2',
                                      'api-api')
