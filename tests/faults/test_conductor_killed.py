"""cyborg-conductor SIGKILLed during 10 binds and started again 5 s later,
on MariaDB and PostgreSQL.

The first bind programs the FPGA of one host from a Glance that is slow
to serve the bitstream: the conductor dies while it is in BindStarted,
holding a handle.  Nine quick binds (a plain FPGA on another host) follow
a quarter of a second apart: some end before the kill, the others are on
their way while the conductor is away.  Nothing waits out the bind
timeout (240 s here, the default):

- every client gets an answer well within 30 s: 202, or a 503 it can act
  on (its ARQ ends in a state it can see: Initial to bind again, or how
  the bind ended);
- no ARQ stays in BindStarted: the restarted conductor fails at once the
  binds it owned, and serves the PATCHes that waited in the queue;
- Nova hears every outcome as it ended: one event per Bound or BindFailed
  ARQ, none for the others.  Delivery is at least once: an event Nova had
  accepted just before the kill, whose row the dead conductor could not
  forget, comes again from the restarted one (Nova ignores an event no
  instance waits for); it is never another status;
- no handle is held by anything but a Bound ARQ, and everything can be
  deleted.
"""

import concurrent.futures
import time
import uuid as uuidlib

import pytest

from tests.fixtures import faults
from tests.fixtures import processes

PLAIN, SLOW = 'plain-host', 'slow-host'
STATUS = {'Bound': 'completed', 'BindFailed': 'failed'}


@pytest.mark.parametrize('db_kind', ['mysql', 'postgresql'])
def test_conductor_sigkilled_during_ten_binds(tmp_path, db_kind):
    with faults.FaultDeployment(tmp_path, db_kind,
                                agents=(PLAIN, SLOW)) as d:
        image = d.glance.add_image(b'bitstream' * 100)
        d.profile('plain', {'resources:FPGA': '1'})
        d.profile('slow', {'resources:FPGA': '1',
                           'accel:bitstream_id': image})
        slow = d.create_arqs('slow', 1)
        plain = d.create_arqs('plain', 9)
        order = slow + plain
        host = dict.fromkeys(plain, PLAIN) | dict.fromkeys(slow, SLOW)
        instance = {arq: str(uuidlib.uuid4()) for arq in order}
        d.glance.delay = 30

        def client(i, arq):
            time.sleep(i * 0.25)
            return d.bind(arq, host[arq], instance[arq], timeout=45)

        with concurrent.futures.ThreadPoolExecutor(len(order)) as pool:
            answers = [pool.submit(client, i, arq)
                       for i, arq in enumerate(order)]
            # The slow bind is programming: kill the conductor now.
            d.glance.wait_for(lambda requests: any(
                r.path.endswith('/file') for r in requests), timeout=20)
            d.conductor('c1').kill()
            d.glance.release()
            time.sleep(5)
            d.start('conductor', 'c1')
            answers = [a.result(timeout=45) for a in answers]

        for (response, took), arq in zip(answers, order):
            assert response.status_code in (202, 503), response.text
            assert took < 30, (arq, took)
        processes.wait_for(
            lambda: not [r for r in d.arqs().values()
                         if r.state == 'BindStarted'],
            timeout=20, what='no ARQ left in BindStarted')
        rows = d.arqs()
        assert {r.state for r in rows.values()} <= {
            'Initial', 'Bound', 'BindFailed'}, rows
        # The bind the conductor died in was failed at start-up, not
        # after the bind timeout.
        restarted = [r for r in rows.values() if 'restarted' in (
            r.bind_failure_reason or '')]
        assert restarted, [(r.state, r.bind_failure_reason)
                           for r in rows.values()]
        assert any(r.state == 'Bound' for r in rows.values())

        ended = {u: STATUS[r.state] for u, r in rows.items()
                 if r.state in STATUS}
        processes.wait_for(lambda: set(d.events_by_arq()) >= set(ended),
                           timeout=20, what='every outcome at Nova')
        time.sleep(1.5)   # a stray event would show now
        seen = d.events_by_arq()
        assert set(seen) == set(ended), (seen, ended)
        for arq, statuses in seen.items():
            assert set(statuses) == {ended[arq]}, (arq, statuses)
            assert len(statuses) <= 2, (arq, statuses)
        assert sum(len(s) for s in seen.values()) <= len(ended) + 1, seen
        assert all(e['server_uuid'] == instance[e['tag']]
                   for e in d.nova.events)
        assert d.handles_in_use() == sum(
            1 for r in rows.values() if r.state == 'Bound')

        for arq in order:
            response, _ = d.call('DELETE', '/accelerator_requests?instance='
                                 + instance[arq])
            assert response.status_code == 204, response.text
        response, _ = d.call('DELETE', '/accelerator_requests?arqs='
                             + ','.join(order))
        assert response.status_code in (204, 404), response.text
        assert d.arqs() == {}
        assert d.handles_in_use() == 0
        d.logs_without_tracebacks('conductor-c1', 'api-api')
