"""The conductor's scrape-time metrics: counts read from the database.

Nothing is stored for metrics: each scrape of the conductor's registry runs
a few small queries (one GROUP BY or COUNT each, with an admin context)::

    cyborg_conductor_arqs{state}              ARQs by state
    cyborg_conductor_nova_events_pending      bind outcomes not yet
                                              accepted by Nova
    cyborg_conductor_nova_event_oldest_seconds
                                              how long the oldest of
                                              them has waited (0: none)
    cyborg_conductor_placement_releases_owed  Placement consumers whose
                                              claims cyborg still has to
                                              release
    cyborg_conductor_devices{health}          devices by health state
    cyborg_conductor_maintained_devices{health}
                                              of them, those an operator
                                              put in maintenance
    cyborg_conductor_deployables{health}      deployables (partitions:
                                              MIG instances, FPGA
                                              regions...) by their own
                                              health state; those lost
                                              with their device left out
    cyborg_conductor_hosts                    hosts whose agent ever
                                              reported
    cyborg_conductor_silent_hosts             of them, those with no
                                              inventory report for
                                              SILENT_PERIODS report periods

An agent reports its inventory every ``[DEFAULT]periodic_interval``
seconds, changed or not (set the same value for conductors and agents):
a silent host's agent is down or cannot reach the conductor, and its
devices' health is not watched meanwhile (they keep the health last
reported).

Every known state is reported, with 0 when no row has it, so a series
never vanishes when its count drops to nothing.  A database error during a
scrape drops that metric's sample (logged) instead of failing the scrape:
the conductor's other metrics still come out.

``register()`` adds the collector to ``cyborg.common.metrics.REGISTRY``
once per process; the conductor (and the all-in-one) call it at start.
"""

import threading

from oslo_log import log as logging
from prometheus_client.core import GaugeMetricFamily

from cyborg.common import context as cyborg_context
from cyborg.common import metrics
from cyborg.common import states
from cyborg.conductor import silence
from cyborg.conf import default as default_opts
from cyborg.db.api import arqs as arq_db
from cyborg.db.api import clock as clock_db
from cyborg.db.api import deployables as deployable_db
from cyborg.db.api import devices as device_db
from cyborg.db.api import hosts as host_db
from cyborg.db.api import nova_events as event_db
from cyborg.db.api import placement_releases as release_db

LOG = logging.getLogger(__name__)

ARQS = ('cyborg_conductor_arqs', 'Accelerator requests by state.')
NOVA_EVENTS_PENDING = (
    'cyborg_conductor_nova_events_pending',
    'Bind outcomes recorded for Nova and not delivered yet.')
NOVA_EVENT_OLDEST = (
    'cyborg_conductor_nova_event_oldest_seconds',
    'Seconds since the oldest bind outcome Nova has not accepted yet was '
    'recorded (0: none is waiting).  Nova fails a build whose events have '
    'not come within its [compute]arq_binding_timeout (300 s).')
PLACEMENT_RELEASES_OWED = (
    'cyborg_conductor_placement_releases_owed',
    'Placement consumers whose claims cyborg owes a release (standalone '
    'allocations whose request went while Placement was away): the '
    'stuck-bind periodic releases them once Placement answers.')
DEVICES = ('cyborg_conductor_devices', 'Devices by health state.')
MAINTAINED_DEVICES = (
    'cyborg_conductor_maintained_devices',
    'Of cyborg_conductor_devices, those an operator put in maintenance '
    '(status maintaining): out of the schedule by choice, whatever their '
    'health (a card pulled for repair is lost).')
DEPLOYABLES = (
    'cyborg_conductor_deployables',
    'Deployables (partitions: MIG instances, FPGA regions, vGPU types, '
    'VF pools) by their own health state; a device\'s fault is counted '
    'in cyborg_conductor_devices: lost is a partition that vanished '
    'while its device is not lost, those lost with their device are '
    'not counted.')
PROGRAMMING = (
    'cyborg_conductor_programmings_in_progress',
    'FPGA deployables a conductor is programming now (out of the '
    'schedule meanwhile).')
HOSTS = ('cyborg_conductor_hosts',
         'Hosts whose agent has reported its inventory.')
SILENT_HOSTS = (
    'cyborg_conductor_silent_hosts',
    'Hosts whose agent has sent no inventory report for SILENT_PERIODS '
    'periodic intervals: down, or cut off from the conductor.')

# Report periods ([DEFAULT]periodic_interval) without a report after
# which a host counts as silent (cyborg.conductor.silence).
SILENT_PERIODS = silence.SILENT_PERIODS

_REGISTERED = []
_LOCK = threading.Lock()


class ConductorCollector:
    """A prometheus_client custom collector over the database; a host
    is silent after ``report_interval`` (seconds) times SILENT_PERIODS
    without an inventory report."""

    def __init__(self, report_interval=default_opts.PERIODIC_INTERVAL):
        self.silent_after = silence.silent_after(report_interval)

    def describe(self):
        """The families without samples: lets the registry check names at
        registration without touching the database."""
        return ([_arqs({}), _gauge(NOVA_EVENTS_PENDING, None),
                 _gauge(NOVA_EVENT_OLDEST, None),
                 _gauge(PLACEMENT_RELEASES_OWED, None), _devices({}),
                 _devices({}, MAINTAINED_DEVICES), _devices({}, DEPLOYABLES),
                 _gauge(PROGRAMMING, None)]
                + _hosts(None))

    def collect(self):
        context = cyborg_context.get_admin_context()
        counts = _read(arq_db.count_by_state, context)
        if counts is not None:
            yield _arqs(counts)
        pending = _read(event_db.pending, context)
        if pending is not None:
            count, oldest = pending
            yield _gauge(NOVA_EVENTS_PENDING, count)
            yield _gauge(NOVA_EVENT_OLDEST, 0.0 if oldest is None else max(
                0.0, (clock_db.utcnow() - oldest).total_seconds()))
        owed = _read(release_db.count_owed, context)
        if owed is not None:
            yield _gauge(PLACEMENT_RELEASES_OWED, owed)
        health = _read(device_db.count_by_health, context)
        if health is not None:
            yield _devices(health[0])
            yield _devices(health[1], MAINTAINED_DEVICES)
        health = _read(deployable_db.count_by_health, context)
        if health is not None:
            yield _devices(health, DEPLOYABLES)
        programming = _read(deployable_db.count_programming, context)
        if programming is not None:
            yield _gauge(PROGRAMMING, programming)
        since = clock_db.utcnow() - self.silent_after
        hosts = _read(host_db.count_reporting, context, since=since)
        if hosts is not None:
            yield from _hosts(hosts)


def _read(reader, context, **kwargs):
    """``reader(context, **kwargs)``, or None (logged) when the database
    fails."""
    try:
        return reader(context, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a scrape never fails on it
        LOG.warning('Metrics: %s failed: %s', reader.__name__, exc)
        return None


def _arqs(counts):
    family = GaugeMetricFamily(*ARQS, labels=['state'])
    for state in _known(states.ARQ_STATES, counts):
        family.add_metric([state], counts.get(state, 0))
    return family


def _gauge(name_and_doc, count):
    """A gauge family without labels; no sample when ``count`` is None."""
    family = GaugeMetricFamily(*name_and_doc)
    if count is not None:
        family.add_metric([], count)
    return family


def _devices(counts, name_and_doc=DEVICES):
    family = GaugeMetricFamily(*name_and_doc, labels=['health'])
    for health in _known(states.HEALTH_STATES, counts):
        family.add_metric([health], counts.get(health, 0))
    return family


def _hosts(counts):
    counts = counts if counts is not None else (None, None)
    return [_gauge(HOSTS, counts[0]), _gauge(SILENT_HOSTS, counts[1])]


def _known(vocabulary, counts):
    """The vocabulary, then any value the database holds beyond it."""
    return list(vocabulary) + sorted(set(counts) - set(vocabulary))


def register(conf=None):
    """Add the collector to the process's registry (once); returns it.
    ``conf``: its ``[DEFAULT]periodic_interval`` is the agents' report
    period (its default without it)."""
    with _LOCK:
        if not _REGISTERED:
            collector = ConductorCollector(
                conf.periodic_interval if conf is not None
                else default_opts.PERIODIC_INTERVAL)
            metrics.register_collector(collector)
            _REGISTERED.append(collector)
        return _REGISTERED[0]


def unregister():
    """Take the collector out of the registry again (tests)."""
    with _LOCK:
        for collector in _REGISTERED:
            metrics.REGISTRY.unregister(collector)
        _REGISTERED.clear()
