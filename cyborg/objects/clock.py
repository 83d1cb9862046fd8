"""The database server's time, which the API and the conductor share
(``cyborg.common.clock``): ``reference.now()``."""

from cyborg.common import clock
from cyborg.common import context as cyborg_context
from cyborg.db.api import clock as clock_db


def _skew(context=None):
    return clock_db.skew(context or cyborg_context.get_admin_context())


reference = clock.ReferenceClock(_skew)
