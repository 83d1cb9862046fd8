"""The deadline of a conductor call: when its caller stops waiting.

The API sets ``RequestContext.answer_by`` on each call (its
``[api]conductor_timeout`` from now, by the database server's clock) and
answers 503 once it passes: the conductor must then write nothing.

- ``check``: a call the conductor comes to after that (it sat in
  RabbitMQ or behind busy threads) is dropped.
- ``write``: a write that would commit too late for its caller (its
  statements or the database took that long) is rolled back instead.
  Only for a write that is the call's first effect: a write recording
  what another service already did (an agent programmed a card, Placement
  holds an allocation) must commit whatever the time, or the database
  would not say what is so.
"""

from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.objects import clock as objects_clock

# Seconds before ``answer_by`` a write stops committing: its commit and
# its answer's way back to the API fit in it, so that the API never
# answers 503 for a write that then commits.
COMMIT_MARGIN = 1.0


def _late(context, margin=0.0):
    """Seconds past ``context.answer_by`` less ``margin``, or None when
    the caller is still waiting (or sets no deadline: agents, periodic
    jobs)."""
    answer_by = getattr(context, 'answer_by', None)
    if answer_by is None:
        return None
    late = objects_clock.reference.now() - (answer_by - margin)
    return late if late > 0 else None


def check(context, name):
    """503 for a call ``name`` its caller stopped waiting for: the API
    answered 503 already, so nothing is written."""
    late = _late(context)
    if late is not None:
        raise exception.ServiceUnavailable(
            reason=f'{name} (request {context.request_id}) came '
                   f'{late:.1f} s after its caller stopped waiting; dropped')


def write(context, fn, *args, **kwargs):
    """``db_api.write_retrying(context, fn, *args, **kwargs)``, rolled
    back with a 503 when it ends less than ``COMMIT_MARGIN`` before the
    caller stops waiting."""
    def in_time():
        result = fn(*args, **kwargs)
        late = _late(context, COMMIT_MARGIN)
        if late is not None:
            raise exception.ServiceUnavailable(
                reason=f'{fn.__name__} (request {context.request_id}) '
                       f'ended too late to commit before its caller stops '
                       f'waiting; rolled back, nothing written')
        return result

    in_time.__name__ = fn.__name__
    return db_api.write_retrying(context, in_time)
