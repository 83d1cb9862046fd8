"""Quotas: the resources a project's accelerator requests use, and their
limits (doc/source/quotas.rst).

Resources, named as Nova names its unified limits:

- ``accelerator_requests``: the number of ARQs a project holds;
- ``class:<resource class>`` (``class:FPGA``, ``class:PGPU``,
  ``class:CUSTOM_X``): the accelerators of that class its ARQs ask for.

Creating ARQs from a device profile requests, for each group, one ARQ per
unit of its ``resources:*`` amounts, and those amounts of each class.  A
group's ARQs share its resources: a project holding c of a group's n ARQs
uses ceil(c * amount / n) of each of its classes, which is the amount
itself while the group's ARQs are whole.

Limits come from a driver (``[quota]driver``): ``noop`` has none;
``unified_limits`` reads Keystone's registered limits and the project's
limits through oslo.limit.  Only reading happens here; the conductor
enforces them in the transaction that creates ARQs
(``cyborg.conductor.quotas``) and the API shows them.
"""

import json
import math
import threading
import time

from keystoneauth1 import exceptions as ksa_exceptions
from keystoneauth1 import loading as ks_loading
from openstack import exceptions as sdk_exceptions
from oslo_log import log as logging

from cyborg.common import exception
from cyborg.common import wording
from cyborg.conf import ksa
from cyborg.conf import quota as quota_conf
from cyborg.objects import device_profiles

LOG = logging.getLogger(__name__)

ARQS = 'accelerator_requests'
CLASS_PREFIX = 'class:'
# What a resource without a limit shows (Keystone's and Nova's "unlimited").
UNLIMITED = -1
# Seconds after Keystone failed to give limits during which creates are
# refused at once (503) instead of each waiting out [oslo_limit]timeout
# again: a hung Keystone would otherwise hold every create's conductor
# thread that long, one after another.
FAIL_FAST_SECONDS = 5.0
# The enforcement model of Keystone's that cyborg's limits follow.
FLAT = 'flat'
# What a 503 says when the limits cannot be read.  Never with the
# error's own text: keystoneauth's names Keystone's internal URL
# ([oslo_limit]auth_url), its host and port, and the 503 goes to any
# project member creating ARQs or reading quotas.  The log has it.
UNREADABLE = 'the limits in Keystone cannot be read'


def class_resource(resource_class):
    """``class:FPGA`` for ``FPGA``."""
    return CLASS_PREFIX + resource_class


def group_amounts(group):
    """{resource name: amount} one unit of a profile group asks for (its
    ``resources:*`` amounts by class), without zeros."""
    return {class_resource(resource_class): amount
            for resource_class, amount
            in device_profiles.resource_amounts(group).items() if amount > 0}


def requested(groups):
    """{resource name: amount} that creating the ARQs of a profile with
    ``groups`` asks for."""
    deltas = {ARQS: 0}
    for group in groups:
        for name, amount in group_amounts(group).items():
            deltas[ARQS] += amount
            deltas[name] = deltas.get(name, 0) + amount
    return deltas


def usage(held):
    """{resource name: usage} of the ARQs a project holds.

    ``held`` is ``[(profile groups, group index, number of ARQs)]``, one
    item per profile group the project has ARQs of.
    """
    used = {ARQS: 0}
    for groups, group_id, count in held:
        used[ARQS] += count
        if group_id >= len(groups):
            continue
        amounts = group_amounts(groups[group_id])
        size = sum(amounts.values())
        for name, amount in amounts.items():
            used[name] = used.get(name, 0) + math.ceil(count * amount / size)
    return used


def groups_of(profile_json):
    """A profile's groups from its stored JSON (a bad row counts nothing)."""
    try:
        groups = json.loads(profile_json)
    except (TypeError, ValueError):
        return []
    return groups if isinstance(groups, list) else []


class Limits:
    """A project's limits: what Keystone says, and what a resource it says
    nothing about is allowed (``[quota]unified_limits_resource_strategy``).
    """

    def __init__(self, registered=None, project=None, strategy=None,
                 listed=(), enforced=True):
        self.registered = dict(registered or {})
        self.project = dict(project or {})
        self.strategy = strategy or quota_conf.REQUIRE
        self.listed = frozenset(listed)
        self.enforced = enforced

    def limit(self, name):
        """The limit of resource ``name``, or None when it is unlimited."""
        if not self.enforced:
            return None
        for found in (self.project, self.registered):
            if name in found:
                value = found[name]
                return None if value is None or value < 0 else value
        # No registered limit: the strategy decides, as in Nova.
        required = (name in self.listed) == (
            self.strategy == quota_conf.REQUIRE)
        return 0 if required else None

    def names(self):
        """The resources Keystone holds a limit of for this project."""
        return set(self.registered) | set(self.project)

    def required_by_name(self):
        """The resources the strategy names as required (limit 0 unless
        Keystone holds one): the listed ones under ``require``.  (Under
        ``ignore`` every resource but the listed is required: no list.)"""
        if not self.enforced or self.strategy != quota_conf.REQUIRE:
            return set()
        return set(self.listed)

    def check(self, used, deltas):
        """Raise QuotaExceeded when adding ``deltas`` to ``used`` takes any
        resource of ``deltas`` over its limit (every one over is named)."""
        over = []
        for name in sorted(deltas):
            if not deltas[name]:
                continue
            limit = self.limit(name)
            in_use = used.get(name, 0)
            if limit is not None and in_use + deltas[name] > limit:
                over.append('%s: limit %d, in use %d, requested %d' % (
                    name, limit, in_use, deltas[name]))
        if over:
            raise exception.QuotaExceeded(
                message='Quota exceeded for ' + '; for '.join(over))


NO_LIMITS = Limits(enforced=False)


class NoopDriver:
    """No quotas."""

    enforced = False

    def limits(self, project_id):
        return NO_LIMITS


class UnifiedLimitsDriver:
    """Limits from Keystone's unified limits, through oslo.limit.

    oslo.limit reads its options from the process's global configuration
    (the one cyborg's console scripts parse).  The enforcer is made once
    (it finds the endpoint and the enforcement model); each call then
    reads the registered limits and the project's limits afresh, two
    requests to Keystone, so a changed limit counts at once.
    """

    enforced = True

    def __init__(self, conf):
        self._conf = conf
        self._lock = threading.Lock()
        self._enforcer = None
        # Set while one thread makes the enforcer (Keystone requests, not
        # under the lock): the others wait for its outcome, not in turn.
        self._building = None
        # (time.monotonic(), reason) of the last failure, None after a
        # success: FAIL_FAST_SECONDS of 503s without asking again.
        self._failed = None

    def limits(self, project_id):
        """The project's Limits; 503 when Keystone cannot tell."""
        self._fail_fast()
        try:
            enforcer = self._get_enforcer()
            registered = enforcer.get_registered_limits(None)
            project = enforcer.get_project_limits(project_id, None)
        except exception.CyborgException:
            raise
        except _KEYSTONE_ERRORS as exc:
            raise self._failure(UNREADABLE, exc)
        with self._lock:
            self._failed = None
        return Limits(dict(registered), dict(project),
                      self._conf.quota.unified_limits_resource_strategy,
                      self._conf.quota.unified_limits_resource_list)

    def _fail_fast(self):
        with self._lock:
            failed = self._failed
        if failed is not None:
            ago = time.monotonic() - failed[0]
            if ago < FAIL_FAST_SECONDS:
                raise exception.ServiceUnavailable(
                    reason='%s (%.0f s ago; asked again after %.0f s)'
                           % (failed[1], ago, FAIL_FAST_SECONDS))

    def _failure(self, reason, error=None):
        """Remember why the limits cannot be read (the enforcer is made
        again next time: the endpoint may have moved, the model changed);
        the 503 to raise.  ``reason``: what the 503 says, cyborg's own
        words (``UNREADABLE``, or what is wrong with the configuration);
        ``error``: the exception behind it, logged and never answered."""
        if error is None:
            LOG.warning('Reading limits from Keystone failed: %s', reason)
        else:
            LOG.warning('Reading limits from Keystone failed: %s: %s: %s',
                        reason, type(error).__name__, error)
        with self._lock:
            self._enforcer = None
            self._failed = (time.monotonic(), reason)
        return exception.ServiceUnavailable(reason=reason)

    def _get_enforcer(self):
        from oslo_limit import limit
        with self._lock:
            if self._enforcer is not None:
                return self._enforcer
            building = self._building
            mine = building is None
            if mine:
                building = self._building = threading.Event()
        if not mine:
            # Bounded by the builder's own requests ([oslo_limit]timeout).
            building.wait()
            with self._lock:
                if self._enforcer is not None:
                    return self._enforcer
            self._fail_fast()
            raise exception.ServiceUnavailable(reason=UNREADABLE)
        try:
            try:
                enforcer = limit.Enforcer(_no_usage_callback, cache=False)
            except ValueError as exc:
                # oslo.limit's words ("Multiple endpoints found",
                # "enforcement model ... is not supported"): say what is
                # wrong, and what to set, where that is found.
                problem = _keystone_problem(self._conf)
                raise self._failure(
                    '%s: %s' % (UNREADABLE, problem) if problem
                    else UNREADABLE, exc) from None
            if enforcer.model.name != FLAT:
                # Remembered like Keystone's failures: every create of
                # the window, and those that waited for this attempt,
                # answer 503 with the reason, without asking again.
                raise self._failure(_model_problem(enforcer.model.name))
            with self._lock:
                self._enforcer = enforcer
            return enforcer
        except _KEYSTONE_ERRORS as exc:
            raise self._failure(UNREADABLE, exc)
        finally:
            with self._lock:
                self._building = None
            building.set()


def keystone_problem(conf):
    """Why the limits cannot be read from Keystone with the
    ``[oslo_limit]`` options of ``conf``, or None: Keystone enforces
    another model than flat, or oslo.limit cannot find the one endpoint
    whose limits are cyborg's.  Asks Keystone (with those options'
    credentials); its own errors are raised.  For ``cyborg-status upgrade
    check``, and for the reason of the 503 a create answers then (what
    oslo.limit says is less clear: "Multiple endpoints found")."""
    keystone = _identity_adapter(conf)
    model = keystone.get('/limits/model').json()['model']['name']
    if model != FLAT:
        return _model_problem(model)
    return _endpoint_problem(conf[quota_conf.LIMIT_GROUP], keystone)


def _model_problem(model):
    return ('Keystone enforces limits with the %s model; cyborg supports '
            'the %s model only (Keystone\'s [unified_limit]'
            'enforcement_model)' % (model, FLAT))


def _endpoint_problem(section, keystone):
    """Without ``endpoint_id`` oslo.limit looks the endpoint up by
    service and ``endpoint_interface``, in ``endpoint_region_name`` when
    set: without it, a service with endpoints in several regions
    matches several, and no limit can be read."""
    if (section.endpoint_id or not (section.endpoint_service_type
                                    or section.endpoint_service_name)):
        return None
    which = ' '.join(
        '%s %s' % (option, value) for option, value in (
            ('endpoint_service_type', section.endpoint_service_type),
            ('endpoint_service_name', section.endpoint_service_name))
        if value)
    query = {name: value for name, value in (
        ('type', section.endpoint_service_type),
        ('name', section.endpoint_service_name)) if value}
    services = keystone.get('/services', params=query).json()['services']
    if len(services) != 1:
        return ('[oslo_limit] %s matches %s in Keystone\'s catalogue: name '
                'exactly one (or set endpoint_id)' % (
                    which, '%d services' % len(services) if services
                    else 'no service'))
    interface = section.endpoint_interface
    if interface.endswith('URL'):
        interface = interface[:-len('URL')]
    endpoints = keystone.get('/endpoints', params={
        'service_id': services[0]['id'],
        'interface': interface}).json()['endpoints']
    regions = sorted({e.get('region_id') or '' for e in endpoints})
    if not endpoints:
        return ('[oslo_limit] %s has no %s endpoint in Keystone\'s '
                'catalogue (endpoint_interface)' % (which, interface))
    if section.endpoint_region_name:
        if section.endpoint_region_name not in regions:
            return ('[oslo_limit] %s has no %s endpoint in '
                    'endpoint_region_name %s (its %s endpoints are in '
                    '%s)' % (which, interface, section.endpoint_region_name,
                             interface, wording.some(regions)))
        return None
    if len(regions) > 1:
        return ('[oslo_limit] %s has %s endpoints in %d regions (%s) and '
                'endpoint_region_name is not set: set it to the region '
                'whose limits are this deployment\'s (or set endpoint_id)'
                % (which, interface, len(regions),
                   wording.some(regions)))
    return None


def _keystone_problem(conf):
    """``keystone_problem``, or None when it finds none or cannot tell
    (the diagnosis never hides the error it explains, which is logged).
    What it finds is cyborg's own words on the configuration (option
    names, the model, service types and region names), never an
    error's text."""
    try:
        return keystone_problem(conf)
    except Exception:  # noqa: BLE001 - the original error is the answer
        LOG.debug('Looking for why the limits cannot be read failed',
                  exc_info=True)
        return None



def _identity_adapter(conf):
    """Keystone's v3 API with the credentials and the identity endpoint
    options of ``[oslo_limit]`` (those oslo.limit uses)."""
    group = quota_conf.LIMIT_GROUP
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    session = ks_loading.load_session_from_conf_options(conf, group,
                                                        auth=auth)
    return ks_loading.load_adapter_from_conf_options(
        conf, group, session=session, auth=auth, service_type='identity',
        version='3', min_version=None, max_version=None)


def _no_usage_callback(project_id, resource_names):
    # cyborg never asks oslo.limit to count: usage is counted in the
    # transaction that creates ARQs, under the project's lock
    # (cyborg.conductor.quotas), which a callback could not join.
    raise RuntimeError('cyborg counts quota usage itself')


def _errors():
    from oslo_limit import exception as limit_exception
    return (ksa_exceptions.ClientException, sdk_exceptions.SDKException,
            limit_exception.SessionInitError, ValueError)


_KEYSTONE_ERRORS = _errors()

_DRIVERS = {}
_DRIVERS_LOCK = threading.Lock()


def get_driver(conf):
    """The quota driver ``[quota]driver`` names (one per configuration)."""
    if conf.quota.driver != quota_conf.UNIFIED_LIMITS:
        return NoopDriver()
    with _DRIVERS_LOCK:
        driver = _DRIVERS.get(id(conf))
        if driver is None or driver._conf is not conf:
            driver = _DRIVERS[id(conf)] = UnifiedLimitsDriver(conf)
        return driver


def config_problem(conf):
    """Why ``[quota]driver = unified_limits`` cannot work with ``conf``,
    or None."""
    if conf.quota.driver != quota_conf.UNIFIED_LIMITS:
        return None
    section = conf[quota_conf.LIMIT_GROUP]
    if not ksa.has_credentials(section):
        return ('[quota]driver is unified_limits but [oslo_limit] has no '
                'auth_type (and the credentials it goes with) to read the '
                'limits from Keystone with')
    if not (section.endpoint_id or section.endpoint_service_type
            or section.endpoint_service_name):
        return ('[quota]driver is unified_limits but [oslo_limit] names no '
                'endpoint: set endpoint_id, or endpoint_service_type '
                '(accelerator) and endpoint_region_name')
    return None
