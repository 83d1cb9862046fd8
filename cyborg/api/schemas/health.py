"""The health fields devices, deployables and ARQs show from 2.4."""

from cyborg.api import microversion
from cyborg.api.schemas import common
from cyborg.common import states

STATE = {'type': 'string', 'enum': list(states.HEALTH_STATES)}


def fields(what):
    """health, health_reason and health_updated_at of ``what``."""
    return {
        'health': dict(STATE, description=common.since(
            microversion.HEALTH, what)),
        'health_reason': dict(common.NULLABLE_STRING,
                              description=common.since(
                                  microversion.HEALTH, 'Why, in words.')),
        'health_updated_at': dict(common.TIMESTAMP,
                                  description=common.since(
                                      microversion.HEALTH,
                                      'When it last changed.')),
    }
