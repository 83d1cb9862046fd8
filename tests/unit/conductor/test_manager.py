"""The conductor's endpoints send 4xx answers back quietly, 5xx loudly."""

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
