"""The Placement client: the only module that knows Placement's URLs.

Built on a keystoneauth Adapter loaded from the ``[placement]`` options, so
a deployment authenticates like any OpenStack service.  With ``auth_type =
none`` and ``endpoint_override = <url>`` it talks to a Placement running
``auth_strategy = noauth2`` (the all-in-one, tests), sending the token that
noauth2 reads as an admin user.

Every call pins its microversion (``MICROVERSION``); errors become
``PlacementError`` (503 when Placement cannot be reached or fails) or one of
the narrower exceptions below, carrying Placement's error code; a Placement
too old to serve the pinned microversion is ``PlacementTooOld``, which says
so (``cyborg-status upgrade check`` tells it beforehand).  Writes that
carry a provider generation retry a bounded number of times on
``placement.concurrent_update``.

Every request is timed in ``cyborg_conductor_placement_request_seconds``;
5xx answers and unreachable Placement count in
``cyborg_conductor_placement_errors_total`` (both by HTTP method).

The bytes of a call usually travel over a keep-alive connection of this
thread (``cyborg.common.keepalive``), with the headers keystoneauth
authenticates with: keystoneauth's requests stack costs three times the
CPU per call, which was most of what a host's first report cost the
conductor.  Anything out of the ordinary goes through the keystoneauth
adapter itself.
"""

import socket
import threading
import time
import weakref
from urllib import parse

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import noauth
from oslo_log import log as logging
from requests import utils as requests_utils

from cyborg.common import exception
from cyborg.common import keepalive
from cyborg.common import metrics
from cyborg.common import timing
from cyborg.placement import embedded

LOG = logging.getLogger(__name__)

# The oldest microversion that has all we use, pinned by every call so
# that any Placement serving it will do: 1.14 (in_tree), 1.20 (POST
# returns the provider), 1.26 (reserved may equal total), 1.30 (reshaper),
# 1.37 (re-parent), 1.38 (consumer_type on allocations).
MICROVERSION = '1.38'
# The first OpenStack release whose Placement serves MICROVERSION.
MICROVERSION_SINCE = 'Xena'
CONCURRENT_UPDATE = 'placement.concurrent_update'
# Placement's own noauth2 reads the caller's roles from this header; with
# auth_type = none we call as what we are, a service (the reshaper, which
# sets the inventories of many providers in one request, wants the
# service role).
NOAUTH_ROLES = 'admin,service'
PROVIDER_IN_USE = 'placement.resource_provider.inuse'
INVENTORY_IN_USE = 'placement.inventory.inuse'
# How many times a write meets a generation another writer moved on
# before we give up: re-reading the generation (``_put_generational``), or
# working the provider out again from the database (the syncs).
GENERATION_RETRIES = 5
# Of the calls made over our own connections (``keepalive``).
USER_AGENT = 'cyborg-placement-client'


class GenerationConflict(exception.PlacementError):
    message = ('Resource provider %(uuid)s changed while we wrote it, '
               '%(attempts)d times in a row.')
    code = 409


class ProviderInUse(exception.PlacementError):
    message = 'Resource provider %(uuid)s has allocations: %(reason)s'
    code = 409


class InventoryInUse(exception.PlacementError):
    message = ('Resource provider %(uuid)s: allocations hold a resource '
               'class the inventory drops: %(reason)s')
    code = 409
    # Placement's refusal, as ``_error`` records one: not an outage.
    status_code = 409
    placement_code = INVENTORY_IN_USE


class PlacementTooOld(exception.PlacementError):
    message = ('Placement serves microversions up to %(served)s; cyborg '
               'needs ' + MICROVERSION + ' (the Placement of OpenStack ' +
               MICROVERSION_SINCE + ' or newer): upgrade Placement.')


class ProviderNotFound(exception.PlacementError):
    message = 'Resource provider %(uuid)s not found in Placement.'
    code = 404


class _NoAuth(noauth.NoAuth):
    """keystoneauth's ``none`` plugin, with the token and the roles
    noauth2 expects."""

    def get_token(self, session):
        return embedded.NOAUTH_TOKEN

    def get_headers(self, session, **kwargs):
        return {'X-Auth-Token': embedded.NOAUTH_TOKEN,
                'X-Roles': NOAUTH_ROLES}


def _error_code(resp):
    try:
        return resp.json()['errors'][0].get('code')
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _served_microversion(resp):
    """The newest microversion Placement serves when ``resp`` is its
    refusal of the one we pinned (a 406 naming the versions it serves),
    else None."""
    if resp.status_code != 406:
        return None
    try:
        error = resp.json()['errors'][0]
        return str(error['max_version'])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def version_tuple(microversion):
    """``'1.38'`` as ``(1, 38)``, for comparing microversions."""
    major, minor = microversion.split('.')
    return int(major), int(minor)


def _error_text(resp):
    try:
        return resp.json()['errors'][0]['detail'].strip()
    except (ValueError, KeyError, IndexError, TypeError):
        return resp.text[:500]


# How Placement words a 400 for a name it does not know (a trait or a
# resource class in a query).
_UNKNOWN_NAMES = ('No such trait', 'No such resource class')


def unknown_names(error):
    """Placement's explanation when ``error`` (a PlacementError) is its
    400 for a trait or resource class it does not know; else None."""
    if getattr(error, 'status_code', None) != 400:
        return None
    text = str(error)
    for wording in _UNKNOWN_NAMES:
        at = text.find(wording)
        if at >= 0:
            return text[at:].strip()
    return None


def _read_proxies_once(session, endpoint):
    """Take the proxy settings from the environment now, not on every
    request: requests re-reads the whole environment per call, which cost
    more CPU than the rest of a Placement call."""
    if not endpoint:
        return  # found in the catalog: no_proxy must be matched per URL
    http = session.session
    http.proxies.update(requests_utils.get_environ_proxies(endpoint))
    http.trust_env = False


class PlacementClient:
    """Thread-safe; one per process is enough (see ``get_client``)."""

    def __init__(self, conf):
        group = 'placement'
        if conf.placement.auth_type == 'none':
            auth = _NoAuth(endpoint=conf.placement.endpoint_override)
        else:
            auth = ks_loading.load_auth_from_conf_options(conf, group)
        session = ks_loading.load_session_from_conf_options(conf, group,
                                                            auth=auth)
        _read_proxies_once(session, conf.placement.endpoint_override)
        self._adapter = ks_loading.load_adapter_from_conf_options(
            conf, group, session=session, auth=auth, raise_exc=False)
        self._keep_alive = keepalive.KeepAlive(
            self._adapter, session, auth,
            api_version=f'placement {MICROVERSION}', user_agent=USER_AGENT)
        # False once Placement's policy refused us the reshaper.
        self._may_reshape = True
        self._known_lock = threading.Lock()
        # Custom classes and traits this process saw exist: we never
        # delete them, so asking again is waste.  Someone else may (an
        # operator's clean-up, a rebuilt Placement database): a write
        # Placement refuses for a name it does not know makes the names
        # it remembers of that write again (``_naming``).
        self._known_rcs = set()
        self._known_traits = set()
        self.calls = 0

    # -- transport -----------------------------------------------------------

    def _request(self, method, url, body=None, ok=(200,), missing_ok=False,
                 microversion=MICROVERSION):
        """One call; returns the response for statuses in ``ok`` (and 404
        when ``missing_ok``), raises PlacementError otherwise.  With
        ``microversion`` None it asks for none (Placement's root)."""
        self.calls += 1
        started = time.monotonic()
        try:
            resp = (self._keep_alive.request(method, url, body)
                    if microversion else None)
            if resp is None:
                resp = self._adapter.request(
                    url, method, microversion=microversion,
                    headers={'Accept': 'application/json'},
                    **({} if body is None else {'json': body}))
        except (ks_exc.ClientException, socket.timeout) as exc:
            _observe(method, started, failed=True)
            # Where Placement is stays in our log: the error may reach an
            # API caller.
            LOG.info('Placement request %s %s failed: %s', method, url, exc)
            raise exception.PlacementError(
                reason=f'{method} {url}: {_unreachable(exc)}') from exc
        _observe(method, started, failed=resp.status_code >= 500)
        if resp.status_code in ok or (missing_ok and
                                      resp.status_code == 404):
            return resp
        raise self._error(method, url, resp)

    @staticmethod
    def _error(method, url, resp):
        served = _served_microversion(resp)
        if served:
            # Every call of ours fails the same way: say why, once per
            # call, in words an operator can act on.
            err = PlacementTooOld(served=served)
            LOG.error('%s %s: %s', method, url, err)
            err.status_code = resp.status_code
            return err
        code = _error_code(resp)
        text = f'{method} {url}: {resp.status_code} {_error_text(resp)}'
        err = exception.PlacementError(reason=text)
        err.placement_code = code
        err.status_code = resp.status_code
        return err

    def max_microversion(self):
        """The newest microversion Placement serves (a string, "1.39"),
        read from its root document, asked for without a microversion
        (any Placement serves it so)."""
        resp = self._request('GET', '/', microversion=None)
        try:
            return resp.json()['versions'][0]['max_version']
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise exception.PlacementError(
                reason=f'GET /: not a Placement version document: '
                       f'{resp.text[:200]!r}') from exc

    # -- providers -----------------------------------------------------------

    def get_provider_by_name(self, name):
        """The provider named ``name`` (dict), or None."""
        resp = self._request('GET', f'/resource_providers?name={_q(name)}')
        providers = resp.json()['resource_providers']
        return providers[0] if providers else None

    def get_provider(self, uuid):
        resp = self._request('GET', f'/resource_providers/{uuid}',
                             missing_ok=True)
        return None if resp.status_code == 404 else resp.json()

    def list_tree(self, root_uuid, required=None):
        """Providers in the tree of ``root_uuid`` (root included), each with
        its ``generation`` and ``parent_provider_uuid``.  ``required``:
        only those with these traits.  ProviderNotFound if the root is
        gone."""
        url = f'/resource_providers?in_tree={root_uuid}'
        if required:
            url += '&required=' + ','.join(required)
        try:
            providers = self._request('GET', url).json()['resource_providers']
        except exception.PlacementError as exc:
            if getattr(exc, 'status_code', None) == 400 and \
                    'No resource provider' in str(exc):
                raise ProviderNotFound(uuid=root_uuid) from exc
            raise
        if not providers and not required:
            # Placement answers an unknown root with an empty tree.
            raise ProviderNotFound(uuid=root_uuid)
        return providers

    def create_provider(self, uuid, name, parent_uuid):
        """Create the provider, or adopt it if one with this uuid exists
        (re-parenting or renaming it if needed).  Returns its dict."""
        body = {'uuid': uuid, 'name': name,
                'parent_provider_uuid': parent_uuid}
        resp = self._request('POST', '/resource_providers', body,
                             ok=(200, 409))
        if resp.status_code == 200:
            return resp.json()
        existing = self.get_provider(uuid)
        if existing is None:
            # The conflict was on the name: another uuid holds it.
            raise self._error('POST', '/resource_providers', resp)
        if (existing['name'] != name or
                existing['parent_provider_uuid'] != parent_uuid):
            return self.update_provider(uuid, name, parent_uuid)
        return existing

    def update_provider(self, uuid, name, parent_uuid):
        body = {'name': name, 'parent_provider_uuid': parent_uuid}
        resp = self._request('PUT', f'/resource_providers/{uuid}', body)
        return resp.json()

    def delete_provider(self, uuid):
        """Delete the provider; True if it existed.  ProviderInUse while
        it has allocations."""
        resp = self._request('DELETE', f'/resource_providers/{uuid}',
                             ok=(204, 409), missing_ok=True)
        if resp.status_code == 409:
            if _error_code(resp) == PROVIDER_IN_USE:
                raise ProviderInUse(uuid=uuid, reason=_error_text(resp))
            raise self._error('DELETE', f'/resource_providers/{uuid}', resp)
        return resp.status_code == 204

    def get_allocations(self, uuid):
        """``{consumer uuid: {'resources': {...}}}`` held on the provider."""
        resp = self._request('GET', f'/resource_providers/{uuid}/allocations',
                             missing_ok=True)
        if resp.status_code == 404:
            return {}
        return resp.json()['allocations']

    def get_allocations_for_consumer(self, consumer_uuid):
        """``{provider uuid: {'resources': {...}}}`` the consumer holds
        (empty when it holds none)."""
        resp = self._request('GET', f'/allocations/{consumer_uuid}')
        return resp.json()['allocations']

    def list_providers_with_traits(self, required):
        """Every provider that has all the traits ``required`` (dicts,
        each with its ``name``, ``uuid`` and ``parent_provider_uuid``);
        empty when Placement does not know one of them."""
        try:
            resp = self._request('GET', '/resource_providers?required=' +
                                 ','.join(_q(t) for t in sorted(required)))
        except exception.PlacementError as exc:
            if unknown_names(exc):
                return []
            raise
        return resp.json()['resource_providers']

    # -- allocations of our own (standalone ARQs) ---------------------------

    def allocation_candidates(self, query):
        """The ``allocations`` of each allocation request Placement offers
        for ``query`` (a dict of query parameters, e.g.
        ``{'resources_X': 'FPGA:1', 'required_X': 'A,!B', 'limit': 5}``),
        best first: ``[{provider uuid: {'resources': {...}}}, ...]``."""
        url = '/allocation_candidates?' + parse.urlencode(sorted(
            query.items()))
        body = self._request('GET', url).json()
        return [request['allocations']
                for request in body['allocation_requests']]

    def claim(self, consumer_uuid, allocations, project_id, user_id,
              consumer_type):
        """Allocate ``allocations`` to a consumer Placement does not know
        yet (consumer generation null: a consumer that exists already, or
        one made by a racing claim, conflicts).  True when claimed; False
        on a 409 (a generation conflict, or the capacity went to someone
        else meanwhile): the caller tries another candidate."""
        url = f'/allocations/{consumer_uuid}'
        body = {'allocations': allocations, 'project_id': project_id,
                'user_id': user_id, 'consumer_generation': None,
                'consumer_type': consumer_type}
        resp = self._request('PUT', url, body, ok=(204, 409))
        if resp.status_code == 409:
            LOG.info('Claim for consumer %s refused: %s', consumer_uuid,
                     _error_text(resp))
            return False
        return True

    def get_claim(self, consumer_uuid):
        """What the consumer holds, as Placement answers it:
        ``{'allocations': {provider uuid: {'resources': {...}}},
        'consumer_generation', 'project_id', 'user_id',
        'consumer_type'}``; ``allocations`` empty (and nothing else)
        when it holds none."""
        return self._request('GET', f'/allocations/{consumer_uuid}').json()

    def release_claim(self, consumer_uuid, claim):
        """Release ``claim`` (as ``get_claim`` read it): empty the
        consumer's allocations only while its generation is the one read.
        True when released; False on a 409: the consumer changed since
        (released meanwhile, or holding a claim made since), and is left
        as it is.

        No DELETE: it releases whatever the consumer holds when it lands,
        a claim made after the caller decided to release included."""
        body = {'allocations': {},
                'consumer_generation': claim['consumer_generation'],
                'project_id': claim['project_id'],
                'user_id': claim['user_id'],
                'consumer_type': claim['consumer_type']}
        resp = self._request('PUT', f'/allocations/{consumer_uuid}', body,
                             ok=(204, 409))
        if resp.status_code == 409:
            LOG.info('Release for consumer %s refused: %s', consumer_uuid,
                     _error_text(resp))
            return False
        return True

    # -- inventories and traits ----------------------------------------------

    def get_inventories(self, uuid):
        """``(generation, {rc: {total, reserved, max_unit, ...}})``."""
        return self._get_generational(uuid, 'inventories')

    def get_traits(self, uuid):
        """``(generation, set of trait names)``."""
        generation, traits = self._get_generational(uuid, 'traits')
        return generation, set(traits)

    def _get_generational(self, uuid, what):
        resp = self._request('GET', f'/resource_providers/{uuid}/{what}',
                             missing_ok=True)
        if resp.status_code == 404:
            raise ProviderNotFound(uuid=uuid)
        body = resp.json()
        return body['resource_provider_generation'], body[what]

    def set_inventories(self, uuid, inventories, generation=None,
                        reread=True):
        """Replace the provider's inventories; returns the new generation.
        InventoryInUse when that drops a resource class allocations hold.

        ``generation`` saves a read when the caller knows it; on a
        generation conflict the generation is re-read and the write
        retried, at most GENERATION_RETRIES times.  With ``reread``
        False a conflict raises GenerationConflict at once: for a caller
        whose body may be older than what was written meanwhile, which
        has to work it out again rather than send it again."""
        url = f'/resource_providers/{uuid}/inventories'
        return self._naming(
            self._known_rcs, '/resource_classes/', inventories,
            lambda: self._put_generational(
                uuid, url, {'inventories': inventories}, generation,
                lambda: self.get_inventories(uuid)[0], reread))

    def set_traits(self, uuid, traits, generation=None, reread=True):
        """Replace the provider's traits; returns the new generation
        (``reread`` as for ``set_inventories``)."""
        url = f'/resource_providers/{uuid}/traits'
        return self._naming(
            self._known_traits, '/traits/', traits,
            lambda: self._put_generational(
                uuid, url, {'traits': sorted(traits)}, generation,
                lambda: self.get_traits(uuid)[0], reread))

    def reshape_inventories(self, inventories):
        """Replace the inventories of several providers in ONE request
        (``POST /reshaper`` with no allocations to move): ``inventories``
        is {uuid: (generation, {rc: {...}})}.  True when done (each
        provider's generation has moved on: read it back); False when
        Placement's policy does not let us reshape (asked once per
        process), so the caller sets them one by one.  Raises
        PlacementError otherwise (``placement.concurrent_update`` when a
        generation was stale: nothing was written)."""
        if not self._may_reshape:
            return False
        body = {'inventories': {
                    uuid: {'resource_provider_generation': generation,
                           'inventories': invs}
                    for uuid, (generation, invs) in inventories.items()},
                'allocations': {}}
        resp = self._naming(
            self._known_rcs, '/resource_classes/',
            {rc for _g, invs in inventories.values() for rc in invs},
            lambda: self._request('POST', '/reshaper', body, ok=(204, 403)))
        if resp.status_code == 403:
            LOG.warning('Placement does not let this service use the '
                        'reshaper (%s); first reports set inventories one '
                        'provider at a time. Give the service user the '
                        'service role to batch them.', _error_text(resp))
            self._may_reshape = False
            return False
        return True

    def _put_generational(self, uuid, url, body, generation, read_generation,
                          reread=True):
        for attempt in range(GENERATION_RETRIES if reread else 1):
            if generation is None:
                generation = read_generation()
            body['resource_provider_generation'] = generation
            resp = self._request('PUT', url, body, ok=(200, 409),
                                 missing_ok=True)
            if resp.status_code == 200:
                return resp.json()['resource_provider_generation']
            if resp.status_code == 404:
                raise ProviderNotFound(uuid=uuid)
            if _error_code(resp) == INVENTORY_IN_USE:
                # Inventories only: a class allocations hold was dropped.
                raise InventoryInUse(
                    uuid=uuid, reason=' '.join(_error_text(resp).split()))
            if _error_code(resp) != CONCURRENT_UPDATE:
                raise self._error('PUT', url, resp)
            LOG.debug('Generation conflict on %s%s', url,
                      '; re-reading' if reread else '')
            generation = None
        raise GenerationConflict(uuid=uuid, attempts=attempt + 1)

    def get_aggregates(self, uuid):
        """``(generation, set of aggregate uuids)`` of the provider."""
        generation, aggregates = self._get_generational(uuid, 'aggregates')
        return generation, set(aggregates)

    def set_aggregates(self, uuid, aggregates, generation=None):
        """Replace the provider's aggregates; returns the new generation."""
        url = f'/resource_providers/{uuid}/aggregates'
        return self._put_generational(
            uuid, url, {'aggregates': sorted(aggregates)}, generation,
            lambda: self.get_aggregates(uuid)[0])

    # -- custom resource classes and traits ----------------------------------

    def ensure_resource_classes(self, names):
        """Create the missing CUSTOM_* resource classes (idempotent)."""
        self._ensure(names, self._known_rcs, '/resource_classes/')

    def ensure_traits(self, names):
        """Create the missing CUSTOM_* traits (idempotent)."""
        self._ensure(names, self._known_traits, '/traits/')

    def _naming(self, known, prefix, names, write):
        """``write()``, a write naming the custom classes or traits
        among ``names`` (``known`` and ``prefix`` as for ``_ensure``).
        When Placement refuses it for a name it does not know, the names
        this process made and remembers (someone may have deleted them
        since) are forgotten, made again and the write sent once more:
        else every sync and reconcile would fail the same way until the
        process restarts, and drift in Placement would stay unrepaired.
        Placement refuses the whole write, so sending it again is safe.
        A name never made here stays the caller's error.
        """
        try:
            return write()
        except exception.PlacementError as exc:
            unknown = unknown_names(exc)
            with self._known_lock:
                made = sorted(known.intersection(names))
                if unknown is None or not made:
                    raise
                known.difference_update(made)
            LOG.warning('Placement does not know a name this write needs '
                        '(%s): making %s again.', unknown, ', '.join(made))
        self._ensure(made, known, prefix)
        return write()

    def _ensure(self, names, known, prefix):
        with self._known_lock:
            todo = sorted(n for n in names
                          if n.startswith('CUSTOM_') and n not in known)
        for name in todo:
            self._request('PUT', prefix + name, ok=(201, 204))
            with self._known_lock:
                known.add(name)


def _observe(method, started, failed):
    seconds = time.monotonic() - started
    metrics.CONDUCTOR_PLACEMENT_SECONDS.labels(method).observe(seconds)
    timing.add(timing.PLACEMENT, seconds)
    if failed:
        metrics.CONDUCTOR_PLACEMENT_ERRORS.labels(method).inc()


def _q(value):
    return parse.quote(value, safe='')


_CLIENTS = {}
_CLIENTS_LOCK = threading.Lock()


def get_client(conf):
    """The process's client for ``conf`` (made on first use, and again
    when its Placement endpoint or auth type changed)."""
    key = (id(conf), conf.placement.auth_type,
           conf.placement.endpoint_override)
    with _CLIENTS_LOCK:
        ref, client = _CLIENTS.get(key, (None, None))
        if ref is None or ref() is not conf:
            client = PlacementClient(conf)
            _CLIENTS[key] = (weakref.ref(conf), client)
        return client


def reset_clients():
    """Forget every client (tests that point conf at a new Placement)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


def _unreachable(exc):
    """What went wrong calling Placement, without its address."""
    if isinstance(exc, (ks_exc.ConnectTimeout, ks_exc.RequestTimeout,
                        socket.timeout)):
        return 'Placement did not answer in time'
    if isinstance(exc, ks_exc.ConnectFailure):
        return 'Placement cannot be reached'
    if isinstance(exc, ks_exc.HttpError) and exc.http_status:
        # keystoneauth's own answer for a status (an authentication
        # failure): its message names no address.
        return f'{exc.http_status} {exc.message}'
    return f'{type(exc).__name__} from keystoneauth'
