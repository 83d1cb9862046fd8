"""Two cyborg-conductors serving the same binds at once, on PostgreSQL:
the same end state as one.

- A conductor started again fails only the binds it owned: a bind the
  other conductor is carrying through (programming an FPGA from a Glance
  that holds the bitstream back) goes on and ends Bound.
- 24 binds at once, spread over both conductors, on the 15 handles left:
  15 Bound, 9 refused (400: no free attach handle) with their ARQs left
  Initial, no handle twice, one event per Bound ARQ at Nova and none for
  the refused ones, everything deletable, no handle leaked.
"""

import time

import pytest

from tests.fixtures import faults
from tests.fixtures import processes

HOST = 'shared-host'
BINDS = 24


def _settled(d):
    return not [r for r in d.arqs().values() if r.state == 'BindStarted']


@pytest.mark.parametrize('db_kind', ['mysql', 'postgresql'])
def test_two_conductors_bind_as_one(tmp_path, db_kind):
    with faults.FaultDeployment(tmp_path, db_kind,
                                conductors=('c1', 'c2'), agents=(HOST,),
                                api_options={'threads': 64}) as d:
        image = d.glance.add_image(b'bitstream' * 100)
        d.profile('slow', {'resources:FPGA': '1',
                           'accel:bitstream_id': image})
        d.profile('plain', {'resources:FPGA': '1'})

        # One conductor programs (from a Glance that holds the bitstream
        # back) while the other is killed and started again.
        d.conductor('c2').kill()
        slow, = d.create_arqs('slow', 1)
        d.glance.delay = 60
        response, _ = d.bind(slow, HOST)
        assert response.status_code == 202, response.text
        d.glance.wait_for(lambda requests: any(
            r.path.endswith('/file') for r in requests), timeout=20)
        assert d.arqs()[slow].bind_owner == 'c1'
        # (The log keeps the first run's lines: the second is count 2.)
        d.start('conductor', 'c2').wait_for_log(
            'Start-up recovery of c2 done: 0 bind(s) failed', timeout=30,
            count=2)
        assert d.arqs()[slow].state == 'BindStarted'
        d.glance.release()
        processes.wait_for(lambda: _settled(d), timeout=30,
                           what='the slow bind to end')
        assert d.arqs()[slow].state == 'Bound'

        d.conductor('c2').wait_for_log('RPC server listening', count=2)
        arqs = d.create_arqs('plain', BINDS)
        instance, refused = d.bind_at_once(arqs, HOST)
        processes.wait_for(lambda: _settled(d), timeout=30,
                           what='every bind to end')

        rows = d.arqs()
        assert len(refused) == 9
        bound = [rows[arq] for arq in arqs if arq not in refused]
        assert {r.state for r in bound} == {'Bound'}
        assert {r.bind_owner for r in bound} == {'c1', 'c2'}
        assert all(r.instance_uuid == instance[r.uuid] for r in bound)
        # A refused PATCH wrote nothing: its ARQ is as it was.
        assert {(rows[arq].state, rows[arq].hostname,
                 rows[arq].instance_uuid, rows[arq].attach_handle_id,
                 rows[arq].bind_id, rows[arq].bind_owner)
                for arq in refused} == {('Initial',) + (None,) * 5}
        held = [r.attach_handle_id for r in rows.values()
                if r.state == 'Bound']
        assert len(held) == len(set(held)) == 16
        assert d.handles_in_use() == 16
        ended = {u: 'completed' for u, r in rows.items()
                 if r.state == 'Bound'}
        assert len(ended) == 16 and slow in ended
        processes.wait_for(lambda: set(d.events_by_arq()) >= set(ended),
                           timeout=20, what='every outcome at Nova')
        time.sleep(1)
        # One event per Bound ARQ; none for a refused one.
        assert d.events_by_arq() == {u: [s] for u, s in ended.items()}

        response, _ = d.call('DELETE', '/accelerator_requests?arqs=' +
                             ','.join(rows))
        assert response.status_code == 204, response.text
        assert d.arqs() == {}
        assert d.handles_in_use() == 0
        d.logs_without_tracebacks('conductor-c1', 'conductor-c2', 'api-api')
