"""The conductor's endpoints send 4xx answers back quietly, 5xx loudly."""

import time

import oslo_messaging as messaging
import pytest

from cyborg.common import exception
from cyborg.conductor import manager


def test_a_4xx_is_an_expected_answer_carrying_the_original(
        db, admin_context):
    endpoint = manager.ConductorManager(None, 'c1')
    with pytest.raises(messaging.ExpectedException) as caught:
        endpoint.arq_create(admin_context, 'no-such-profile', 'p1')
    assert isinstance(caught.value.exc_info[1], exception.NotFound)


def test_a_5xx_stays_a_fault():
    @manager._answer
    def broken():
        raise exception.CyborgException(message='a bug')

    with pytest.raises(exception.CyborgException):
        broken()


def test_placement_refusing_our_request_stays_a_fault():
    @manager._answer
    def refused():
        error = exception.PlacementError(reason='400 bad request')
        error.status_code = 400
        raise error

    with pytest.raises(exception.PlacementError):
        refused()


@pytest.mark.parametrize('status', [None, 502, 503])
def test_placement_away_is_an_expected_answer_and_one_line(status,
                                                           caplog):
    # Placement unreachable (no status) or failing is an outage, as the
    # database's: one WARNING line, no traceback, and the API answers 503.
    @manager._answer
    def placement_down():
        error = exception.PlacementError(reason='Placement is away')
        if status is not None:
            error.status_code = status
        raise error

    with pytest.raises(messaging.ExpectedException) as caught:
        placement_down()
    assert isinstance(caught.value.exc_info[1], exception.PlacementError)
    warnings = [r for r in caught_records(caplog)
                if 'Placement is away' in r.getMessage()]
    assert [r.levelname for r in warnings] == ['WARNING']
    assert warnings[0].exc_info is None


def caught_records(caplog):
    return [r for r in caplog.records if r.name == manager.__name__]


def _profile_values(name):
    return {'name': name, 'groups': [{'resources:FPGA': '1'}],
            'project_id': 'p1'}


def test_a_call_its_caller_stopped_waiting_for_writes_nothing(db, caplog):
    # The API answered 503 when it stopped waiting (answer_by); a call
    # the conductor comes to after that is dropped, not applied late.
    from cyborg.common import context as cyborg_context
    from cyborg.db.api import device_profiles as profile_db

    endpoint = manager.ConductorManager(None, 'c1')
    late = cyborg_context.RequestContext(
        project_id='p1', answer_by=time.time() - 2)
    with pytest.raises(messaging.ExpectedException) as caught:
        endpoint.device_profile_create(late, _profile_values('late'))
    error = caught.value.exc_info[1]
    assert isinstance(error, exception.ServiceUnavailable)
    assert 'came 2.' in str(error) and 'dropped' in str(error)
    reader = cyborg_context.get_admin_context()
    assert profile_db.get_groups(reader, name='late') is None
    awaited = cyborg_context.RequestContext(
        project_id='p1', answer_by=time.time() + 20)
    endpoint.device_profile_create(awaited, _profile_values('awaited'))
    assert profile_db.get_groups(reader, name='awaited') is not None


def test_a_write_too_late_to_commit_for_its_caller_writes_nothing(db):
    # Not late when it came (dropped), but its caller stops waiting before
    # its commit and answer could reach it: rolled back.
    from cyborg.common import context as cyborg_context
    from cyborg.conductor import awaited
    from cyborg.db.api import device_profiles as profile_db

    endpoint = manager.ConductorManager(None, 'c1')
    nearly = cyborg_context.RequestContext(
        project_id='p1',
        answer_by=time.time() + awaited.COMMIT_MARGIN / 2)
    with pytest.raises(messaging.ExpectedException) as caught:
        endpoint.device_profile_create(nearly, _profile_values('nearly'))
    error = caught.value.exc_info[1]
    assert isinstance(error, exception.ServiceUnavailable)
    assert 'rolled back, nothing written' in str(error)
    reader = cyborg_context.get_admin_context()
    assert profile_db.get_groups(reader, name='nearly') is None


def test_answer_by_travels_with_the_context():
    from cyborg.common import context as cyborg_context

    sent = cyborg_context.RequestContext(project_id='p1', answer_by=12.5)
    received = cyborg_context.RequestContext.from_dict(sent.to_dict())
    assert received.answer_by == 12.5
    # Agents' calls carry none, and are never dropped for it.
    assert 'answer_by' not in cyborg_context.get_admin_context().to_dict()
    assert cyborg_context.RequestContext.from_dict(
        {'project_id': 'p1'}).answer_by is None


def test_the_shortest_wait_leaves_the_conductor_time_to_commit():
    from cyborg.conductor import awaited
    from cyborg.conf import api as api_conf

    option, = [o for o in api_conf.opts if o.name == 'conductor_timeout']
    assert option.type.min > awaited.COMMIT_MARGIN
