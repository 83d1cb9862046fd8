"""At start-up: is this conductor's clock near the database server's?

A conductor drops the calls it comes to after the API stopped waiting for
them (``RequestContext.answer_by``, the API host's clock): with its own
clock far ahead it would drop calls the API still waits for.  The
database server's clock, which every cyborg host reaches, is the common
reference (``cyborg-status upgrade check`` compares an API host's).
"""

from oslo_log import log as logging

from cyborg.db.api import clock as clock_db

LOG = logging.getLogger(__name__)


def check(conf, context, started_at):
    """Log a WARNING when this host's clock is more than
    ``clock_db.TOLERATED_SKEW`` seconds from the database server's;
    returns the skew (None on SQLite)."""
    skew = clock_db.skew(context)
    if skew is not None and abs(skew) > clock_db.TOLERATED_SKEW:
        LOG.warning('The clock of %s is %.1f s %s the database server\'s: '
                    'calls may be dropped as late, or applied after the '
                    'API answered 503, until the clocks agree (NTP)',
                    conf.host, abs(skew), 'ahead of' if skew > 0 else
                    'behind')
    return skew
