"""Phase accounting (cyborg.common.timing): what the benchmarks' per-hop
breakdown is made of."""

import sqlalchemy as sa

from cyborg.common import timing


def test_statements_are_counted_and_timed_inside_a_unit_of_work():
    engine = sa.create_engine('sqlite://')
    with engine.connect() as connection:
        connection.execute(sa.text('SELECT 1'))  # not measured
        with timing.measure() as timings:
            with timing.phase(timing.HANDLER):
                connection.execute(sa.text('SELECT 1'))
                connection.execute(sa.text('SELECT 2'))
    assert timings.statements == 2
    assert 0 < timings.seconds[timing.DB] <= timings.seconds[timing.HANDLER]


def test_a_failed_statement_leaves_nothing_behind():
    engine = sa.create_engine('sqlite://')
    with engine.connect() as connection:
        with timing.measure() as timings:
            try:
                connection.execute(sa.text('SELECT * FROM nowhere'))
            except sa.exc.OperationalError:
                pass
            connection.execute(sa.text('SELECT 1'))
        assert not connection.info.get('cyborg_started')
    assert timings.statements == 1


def test_outside_a_unit_of_work_nothing_is_kept():
    assert timing.current() is None
    with timing.phase(timing.RPC):
        timing.add(timing.NOVA, 1.0)
    assert timing.current() is None


def test_units_of_work_nest_and_restore():
    with timing.measure() as outer:
        with timing.measure() as inner:
            timing.add(timing.RPC, 0.5)
        assert timing.current() is outer
    assert inner.seconds == {timing.RPC: 0.5} and outer.seconds == {}


def test_an_rpc_call_is_recorded_under_its_method():
    from cyborg.common import metrics

    def value(name, **labels):
        return metrics.REGISTRY.get_sample_value(name, labels) or 0

    before = value('cyborg_conductor_rpc_seconds_count', method='probe')
    with timing.rpc_served('probe'):
        timing.add(timing.COMMIT, 0.25)
    assert value('cyborg_conductor_rpc_seconds_count',
                 method='probe') == before + 1
    assert value('cyborg_conductor_rpc_phase_seconds_sum', method='probe',
                 phase='commit') >= 0.25
