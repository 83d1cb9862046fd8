"""At start-up: is this conductor's clock near the database server's?

The API and the conductor tell the time of ``RequestContext.answer_by``
by the database server's clock, each measuring how far its own is from it
(``cyborg.objects.clock.reference``); this start-up job takes the
conductor's first measurement.  The times the conductor writes are told
by the same clock (``cyborg.db.api.clock.utcnow``); a host whose clock is
off is worth a WARNING all the same (its logs are off, Keystone's tokens
may be refused), and ``cyborg-status upgrade check`` compares an API
host's.
"""

from oslo_log import log as logging

from cyborg.db.api import clock as clock_db
from cyborg.objects import clock as objects_clock

LOG = logging.getLogger(__name__)


def check(conf, context, started_at):
    """Measure this host's clock against the database server's, and log a
    WARNING when it is more than ``clock_db.TOLERATED_SKEW`` seconds off;
    returns the skew (None on SQLite)."""
    skew = objects_clock.reference.measure(context)
    if skew is not None and abs(skew) > clock_db.TOLERATED_SKEW:
        LOG.warning('The clock of %s is %.1f s %s the database server\'s: '
                    'the times it writes are off until the clocks agree '
                    '(NTP); calls are timed by the database server\'s '
                    'clock', conf.host, abs(skew),
                    'ahead of' if skew > 0 else 'behind')
    return skew
