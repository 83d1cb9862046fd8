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
    def placement_down():
        raise exception.PlacementError(reason='down')

    with pytest.raises(exception.PlacementError):
        placement_down()
