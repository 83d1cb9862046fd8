"""Whether a host's agent has fallen silent: no inventory report for
``SILENT_PERIODS`` report periods (``[DEFAULT]periodic_interval``, the
same on conductors and agents).  Agents report every period, changed or
not, so a silent agent is down or cut off from the conductors: the
``cyborg_conductor_silent_hosts`` metric counts such hosts, the
conductor does not wait on an RPC call to one (an mdev to create or
remove) that cannot be answered, and only a silent host may be forgotten
(``cyborg-manage host forget``, cyborg.conductor.hosts): a reporting
agent would make it again at its next report."""

import datetime

from cyborg.db.api import clock as clock_db
from cyborg.db.api import hosts as host_db

# Report periods without a report after which a host counts as silent:
# one late report is not an outage.
SILENT_PERIODS = 3


def silent_after(periodic_interval):
    """How long a host goes without a report before it is silent."""
    return datetime.timedelta(seconds=periodic_interval * SILENT_PERIODS)


def is_silent(conf, last_report_at, now):
    """Whether a host last reported at ``last_report_at`` (None: never)
    is silent at ``now``, as the metric counts it."""
    return (last_report_at is None or
            now - last_report_at > silent_after(conf.periodic_interval))


def why_silent(conf, context, hostname):
    """None while the agent of ``hostname`` reports (or no report time is
    known: nothing to judge by); else why it is taken for silent."""
    host = host_db.get(context, hostname)
    last = host.get('last_report_at') if host else None
    if last is None:
        return None
    if is_silent(conf, last, clock_db.utcnow()):
        return (f'the agent on {hostname} has not reported since '
                f'{last:%Y-%m-%d %H:%M:%S} UTC')
    return None
