"""Prometheus metrics: every metric of the service, defined once, here.

Each process serves its own registry (nothing is stored for metrics): the
agent and the conductor on ``[metrics]host:<agent|conductor>_port``
(``serve``), the API at ``/metrics`` (``cyborg.api.app``).  Metrics are
recorded whether or not they are served; recording costs a dict lookup and
a lock, so hot paths may record freely.

Names follow Prometheus conventions: ``cyborg_<process>_<what>_<unit>``,
counters end in ``_total``.  Every family is defined in every process, so
each process serves only the families of its kind (``AGENT``,
``CONDUCTOR``, ``API``), not another kind's families at zero; the
all-in-one, all kinds in one process, serves them all.  Labels are
bounded: device keys and deployable names of one host, route templates
(never raw paths), states.
"""

import threading

import prometheus_client as prom
from oslo_log import log as logging

LOG = logging.getLogger(__name__)

REGISTRY = prom.CollectorRegistry(auto_describe=True)

# Latency buckets for things that take milliseconds to seconds.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0, 10.0, 30.0, 60.0)


def _histogram(name, doc, labels=()):
    return prom.Histogram(name, doc, labels, buckets=_BUCKETS,
                          registry=REGISTRY)


# -- agent ----------------------------------------------------------------

AGENT_DEVICE_HEALTHY = prom.Gauge(
    'cyborg_agent_device_healthy',
    '1 when the last health reading of the device was harmless, else 0.',
    ['device'], registry=REGISTRY)
AGENT_XID_EVENTS = prom.Counter(
    'cyborg_agent_xid_events_total',
    'NVIDIA XID events seen, by XID and by how they were classified.',
    ['device', 'xid', 'severity'], registry=REGISTRY)
# A timestamp rather than the counter above for alerting: a counter
# series that comes back at the value it had (the agent restarted, or
# the GPU's series removed while it was gone) shows no increase.
AGENT_GPU_LAST_FATAL_XID = prom.Gauge(
    'cyborg_agent_gpu_last_fatal_xid_timestamp_seconds',
    'When the GPU last reported a fatal XID of this number (Unix time).',
    ['device', 'xid'], registry=REGISTRY)
AGENT_AER_ERRORS = prom.Gauge(
    'cyborg_agent_aer_errors',
    'PCIe AER error counters of the device as sysfs shows them.',
    ['device', 'kind'], registry=REGISTRY)
AGENT_HEALTH_READINGS = prom.Counter(
    'cyborg_agent_health_readings_total',
    'Health readings by severity (ok readings included).',
    ['severity'], registry=REGISTRY)
AGENT_UTILIZATION = prom.Gauge(
    'cyborg_agent_device_utilization_ratio',
    'Busy fraction of the device over the last sample period (0..1).',
    ['device'], registry=REGISTRY)
AGENT_MEMORY_USED = prom.Gauge(
    'cyborg_agent_device_memory_used_bytes',
    'Device memory in use.', ['device'], registry=REGISTRY)
AGENT_TEMPERATURE = prom.Gauge(
    'cyborg_agent_device_temperature_celsius',
    'Device temperature (a GPU\'s core).', ['device'], registry=REGISTRY)
AGENT_POWER = prom.Gauge(
    'cyborg_agent_device_power_watts',
    'Power the device draws.', ['device'], registry=REGISTRY)
AGENT_CLOCK_EVENTS = prom.Gauge(
    'cyborg_agent_device_clock_event_active',
    '1 while the GPU holds its clocks down for this reason (nvidia-smi\'s '
    'clocks event reasons), 0 once it no longer does.',
    ['device', 'reason'], registry=REGISTRY)
AGENT_HEALTH_CHECK_SECONDS = _histogram(
    'cyborg_agent_health_check_seconds',
    'Time of one health check round over all drivers.')
AGENT_DISCOVERY_SECONDS = _histogram(
    'cyborg_agent_discovery_seconds',
    'Time of one discovery over all drivers.')
AGENT_REPORT_SECONDS = _histogram(
    'cyborg_agent_report_seconds',
    'Time from the start of an inventory report to its acknowledgement.')
# Set by cyborg.agent.mdevs after each attempt: at start, and each retry
# (before an inventory report) while any fails.  By host: a family
# without labels would make its series (and, under the API's
# multiprocess mode, a file per worker) in every process that imports
# this module.
AGENT_BOUND_MDEVS_NOT_MADE = prom.Gauge(
    'cyborg_agent_bound_mdevs_not_made',
    'Mdevs of bound accelerator requests the agent could not make again '
    'after a reboot (their instances cannot start); tried again before '
    'each inventory report.', ['host'], registry=REGISTRY)

# -- conductor ----------------------------------------------------------

CONDUCTOR_REPORT_SECONDS = _histogram(
    'cyborg_conductor_report_seconds',
    'Time to handle an inventory report, by kind (unchanged, delta, '
    'full).', ['kind'])
CONDUCTOR_HEALTH_REPORT_SECONDS = _histogram(
    'cyborg_conductor_health_report_seconds',
    'Time to handle a health report, Placement sync included.')
CONDUCTOR_HEALTH_TRANSITIONS = prom.Counter(
    'cyborg_conductor_health_transitions_total',
    'Health state changes of devices and deployables.',
    ['kind', 'from_state', 'to_state'], registry=REGISTRY)
CONDUCTOR_BIND_SECONDS = _histogram(
    'cyborg_conductor_bind_seconds',
    'Time from BindStarted to the bind\'s outcome.', ['outcome'])
CONDUCTOR_PROGRAMMINGS = prom.Counter(
    'cyborg_conductor_programmings_total',
    'FPGA programmings this conductor ran, by outcome: programmed, '
    'failed (the card as it was) or outcome_unknown (the card taken out '
    'of the schedule until a re-probe); abandoned: one whose conductor '
    'stopped, taken out the same way by this one.  One refused before '
    'anything ran on the card is not counted.', ['outcome'],
    registry=REGISTRY)
# The outcomes CONDUCTOR_PROGRAMMINGS (and CONDUCTOR_PROGRAMMING_SECONDS)
# count, by these names alone (cyborg.conductor.programming), each served
# at 0 from the start: a series born at 1 (prometheus_client creates a
# labelled child on its first use) shows Prometheus no increase, and an
# alert on the first programming whose outcome is unknown would never
# fire.
PROGRAMMED = 'programmed'
PROGRAMMING_FAILED = 'failed'
PROGRAMMING_OUTCOME_UNKNOWN = 'outcome_unknown'
PROGRAMMING_ABANDONED = 'abandoned'
PROGRAMMING_OUTCOMES = (PROGRAMMED, PROGRAMMING_FAILED,
                        PROGRAMMING_OUTCOME_UNKNOWN, PROGRAMMING_ABANDONED)
for _outcome in PROGRAMMING_OUTCOMES:
    CONDUCTOR_PROGRAMMINGS.labels(_outcome)
CONDUCTOR_PROGRAMMING_SECONDS = prom.Histogram(
    'cyborg_conductor_programming_seconds',
    'Time from the start of an FPGA programming (image download '
    'included) to its outcome.', ['outcome'],
    buckets=(1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0),
    registry=REGISTRY)
CONDUCTOR_RPC_SECONDS = prom.Summary(
    'cyborg_conductor_rpc_seconds',
    'Time to serve an RPC call, by method (background bind work as '
    'arq_bind_work).', ['method'], registry=REGISTRY)
CONDUCTOR_RPC_PHASE_SECONDS = prom.Summary(
    'cyborg_conductor_rpc_phase_seconds',
    'Time of an RPC call spent in each phase (cyborg.common.timing: db, '
    'commit), by method.', ['method', 'phase'], registry=REGISTRY)
CONDUCTOR_DB_STATEMENTS = prom.Counter(
    'cyborg_conductor_rpc_db_statements_total',
    'SQL statements run serving RPC calls, by method.', ['method'],
    registry=REGISTRY)
CONDUCTOR_PLACEMENT_SECONDS = _histogram(
    'cyborg_conductor_placement_request_seconds',
    'Placement request latency by method.', ['method'])
CONDUCTOR_PLACEMENT_ERRORS = prom.Counter(
    'cyborg_conductor_placement_errors_total',
    'Placement requests that failed (5xx, unreachable).', ['method'],
    registry=REGISTRY)
CONDUCTOR_NOVA_SECONDS = _histogram(
    'cyborg_conductor_nova_request_seconds',
    'Latency of os-server-external-events requests to Nova.')
CONDUCTOR_NOVA_ERRORS = prom.Counter(
    'cyborg_conductor_nova_errors_total',
    'Requests to Nova that failed.', registry=REGISTRY)
CONDUCTOR_NOVA_EVENTS_EXPIRED = prom.Counter(
    'cyborg_conductor_nova_events_expired_total',
    'Bind outcomes given up on: not accepted by Nova within '
    '[nova]event_max_age seconds of their recording.', registry=REGISTRY)
CONDUCTOR_NOVA_EVENTS_REFUSED = prom.Counter(
    'cyborg_conductor_nova_events_refused_total',
    'Bind outcomes Nova refused one by one (a 4xx for the event in its '
    '207 answer), dropped: their builds fail in Nova.', registry=REGISTRY)
# Any process that writes the database (the conductor).
DB_RETRIES = prom.Counter(
    'cyborg_db_transaction_retries_total',
    'Transactions run again after losing a lock conflict: a deadlock, a '
    'Galera certification failure, a serialization failure.',
    registry=REGISTRY)
# Any process that notifies (the conductor; the agent's telemetry).
NOTIFICATIONS = prom.Counter(
    'cyborg_notifications_total',
    'Versioned notifications published to the notification bus, by event '
    'type.', ['event_type'], registry=REGISTRY)
NOTIFICATIONS_DROPPED = prom.Counter(
    'cyborg_notifications_dropped_total',
    'Versioned notifications given up on, by reason: queue_full (the '
    'oldest waiting one, while the broker was too slow or away) or '
    'not_published (the broker could not be reached or refused it).',
    ['reason'], registry=REGISTRY)
# The reasons NOTIFICATIONS_DROPPED counts (cyborg.common.notify), each
# served at 0 from the start.
NOTIFICATION_QUEUE_FULL = 'queue_full'
NOTIFICATION_NOT_PUBLISHED = 'not_published'
for _reason in (NOTIFICATION_QUEUE_FULL, NOTIFICATION_NOT_PUBLISHED):
    NOTIFICATIONS_DROPPED.labels(_reason)
# Computed at scrape time from the database by the conductor's collector
# (cyborg.conductor.metrics_collector): cyborg_conductor_arqs{state},
# cyborg_conductor_nova_events_pending and ..._nova_event_oldest_seconds,
# cyborg_conductor_placement_releases_owed,
# cyborg_conductor_devices{health}, cyborg_conductor_deployables{health}
# and the hosts' counts.

# -- API -------------------------------------------------------------

API_REQUESTS = prom.Counter(
    'cyborg_api_requests_total',
    'API requests by method, route template and status.',
    ['method', 'route', 'status'], registry=REGISTRY)
API_REQUEST_SECONDS = _histogram(
    'cyborg_api_request_seconds',
    'API request latency by method and route template.',
    ['method', 'route'])
API_PHASE_SECONDS = prom.Summary(
    'cyborg_api_request_phase_seconds',
    'Time of a request spent in each phase (cyborg.common.timing: '
    'policy, validate, handler, render, rpc, db), by method and route '
    'template; phases nest.', ['method', 'route', 'phase'],
    registry=REGISTRY)
API_DB_STATEMENTS = prom.Counter(
    'cyborg_api_request_db_statements_total',
    'SQL statements run serving requests, by method and route template.',
    ['method', 'route'], registry=REGISTRY)


# The families each kind of process records, by name prefix.
AGENT = ('cyborg_agent_', 'cyborg_notifications')
CONDUCTOR = ('cyborg_conductor_', 'cyborg_db_', 'cyborg_notifications')
API = ('cyborg_api_',)


class Only:
    """The families of ``registry`` whose names start with one of
    ``prefixes`` (None: all), as a registry the exposition code takes."""

    def __init__(self, registry, prefixes):
        self._registry = registry
        self._prefixes = prefixes

    def collect(self):
        for family in self._registry.collect():
            if self._prefixes is None or family.name.startswith(
                    self._prefixes):
                yield family

    def restricted_registry(self, names):
        """What ``?name[]=`` scrapes ask the HTTP server for."""
        return Only(self._registry.restricted_registry(names),
                    self._prefixes)


def remove_series(family, **labels):
    """Remove every series of ``family`` (a labelled counter or gauge)
    whose labels include ``labels``, whatever its other labels: those of a
    device that is gone, labelled also by what its driver saw (an XID
    number, an AER error kind), values only that driver knows.  The
    series are read off ``collect()``, whose samples carry a series'
    labels in the family's order (``remove_by_labels`` is newer than the
    oldest prometheus_client this service runs with)."""
    wanted = {name: str(value) for name, value in labels.items()}
    found = {tuple(sample.labels.values())
             for metric in family.collect() for sample in metric.samples
             if wanted.items() <= sample.labels.items()}
    for values in found:
        try:
            family.remove(*values)
        except KeyError:
            pass      # removed meanwhile


def register_collector(collector):
    """Add a collector whose values are computed at scrape time (e.g. the
    conductor's ARQs by state, read from the database)."""
    REGISTRY.register(collector)


def render(only=None, registry=REGISTRY):
    """(content type, body) of the registry in the text exposition
    format: the families of ``only`` (a kind's prefixes), or all."""
    return prom.CONTENT_TYPE_LATEST, prom.generate_latest(
        Only(registry, only))


_SERVED = {}
_SERVED_LOCK = threading.Lock()


def serve(conf, port, only=None):
    """Serve the registry (the families of ``only``, or all) on
    ``[metrics]host:port`` in a daemon thread, once per process; a no-op
    unless ``[metrics]enabled``.  A port already taken is logged, not
    fatal: metrics never stop a service."""
    if not conf.metrics.enabled:
        return None
    with _SERVED_LOCK:
        if port in _SERVED:
            return _SERVED[port]
        try:
            server, _thread = prom.start_http_server(
                port, addr=conf.metrics.host, registry=Only(REGISTRY, only))
        except OSError as exc:
            LOG.error('Cannot serve metrics on %s:%s (%s); running without '
                      'them.', conf.metrics.host, port, exc)
            return None
        LOG.info('Serving Prometheus metrics on http://%s:%s/metrics',
                 conf.metrics.host, port)
        _SERVED[port] = server
        return server
