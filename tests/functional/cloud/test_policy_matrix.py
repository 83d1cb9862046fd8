"""Who may do what, route by route, with real Keystone tokens.

Every route of ``cyborg.api.routes.OPERATIONS`` has a row in ``MATRIX`` (a
test fails when a route has none, or a row names no route), and every row
is tried by every persona against both API processes of the cloud: one
with the new policy defaults, one with ``enforce_new_defaults = false``
(and ``enforce_scope = false``, which the oslo.policy we run no longer
reads: scope is always checked).

The expectations are written by hand, from the rules as documented
(``etc/cyborg/policy.yaml.sample``, ``doc/source``), Cyborg's own
defaults and Nova's service-role conventions, never computed from our
policy code:

- reads of profiles and ARQs: the project's readers, admins, services;
  ARQ writes: the project's members, admins, services; hardware
  (devices, deployables, attributes) is read by project managers and
  admins, and changed by admins only;
- binding, unbinding, deleting by instance: a service *request* (Nova's
  service token), never a role alone;
- ARQs belong to their project: another project's ARQ is not found; an
  admin or a service sees every project's;
- every rule is for project-scoped tokens: a system-scoped token, even
  the system admin's, is refused (as Cyborg and Nova do today);
- legacy defaults change nothing: our rules carry no deprecated defaults
  to fall back to (secure RBAC is enforced, a deliberate difference from
  Cyborg, whose legacy defaults let any project user delete a profile).

Outcomes: ``ok`` the route's success status (for a list: with the target
in it); ``deny`` 403 from policy; ``token`` 403 because a service token is
required; ``hidden`` 404 (for a list: 200 without the target); ``401`` no
token.  Allowed requests are made to succeed: each persona gets a fresh
target where the request would consume one (a profile or ARQ to delete,
an ARQ to bind), and what a success changed is put back.
"""

import collections
from concurrent import futures
import json
import uuid as uuidlib

import pytest
import requests

from cyborg.api import routes
from tests.fixtures import deployment as deployment_fixture
from tests.fixtures import processes
from tests.functional.cloud import conftest

# persona: (user, scope, user whose token goes in X-Service-Token)
PERSONAS = collections.OrderedDict([
    ('admin', ('demo-admin', None, None)),
    ('manager', ('demo-manager', None, None)),
    ('member', ('demo-member', None, None)),
    ('reader', ('demo-reader', None, None)),
    ('alt-member', ('alt-member', None, None)),
    ('alt-reader', ('alt-reader', None, None)),
    ('service', ('service-user', None, None)),
    ('nova', ('demo-member', None, 'nova')),
    ('sys-admin', ('system-admin', 'system', None)),
    ('sys-reader', ('system-reader', 'system', None)),
    ('anonymous', (None, None, None)),
])


# Requests in flight at once (the API process has 16 threads).
PARALLEL = 6

ALL_OK = 'ok ok ok ok ok ok ok ok ok ok ok'
PROFILE_READ = 'ok ok ok ok ok ok ok ok deny deny 401'
ADMIN_ONLY = 'ok deny deny deny deny deny deny deny deny deny 401'
HARDWARE_READ = 'ok ok deny deny deny deny deny deny deny deny 401'
# 'service' (the service role, no service token) sees every project's
# ARQs, as the policy's service rule counts the role too (a regression:
# it once saw only its own project's; RequestContext.sees_every_project).
ARQ_READ = 'ok ok ok ok hidden hidden ok ok deny deny 401'
ARQ_CREATE = 'ok ok ok deny ok deny ok ok deny deny 401'
ARQ_DELETE = 'ok ok ok deny hidden deny ok ok deny deny 401'
SERVICE_REQUEST = 'token token token deny token deny token ok deny deny 401'
# A project's quota: its readers (and admins); the caller's own project
# for every project-scoped persona but the service role alone.
OWN_QUOTA = 'ok ok ok ok ok ok deny ok deny deny 401'
QUOTA_READ = 'ok ok ok ok deny deny deny ok deny deny 401'
# A private profile of project demo (2.5): another project, and a service
# calling for its own project, do not see it; Nova calling for a demo
# user does (the user's project decides, not the service token).
PRIVATE_READ = 'ok ok ok ok hidden hidden hidden ok deny deny 401'
PRIVATE_ARQ_CREATE = 'ok ok ok deny hidden deny hidden ok deny deny 401'
# Standalone allocation (2.6): admins and services, the role or the token.
ADMIN_OR_SERVICE = 'ok deny deny deny deny deny ok ok deny deny 401'


# Remote pools (2.8) and exports (2.9): asked at 2.9.
POOLS = '2.9'


def _pool_body(name):
    return {'name': name, 'resource_class': 'CUSTOM_MATRIX_REMOTE',
            'traits': ['CUSTOM_MATRIX_FABRIC'],
            'aggregates': [str(uuidlib.uuid4())], 'fabric_driver': 'fake',
            'handles': [{'fabric_address': 'nqn.2026-11.matrix:' + name}]}


def _new_pool(ctx):
    name = 'matrix-pool-' + uuidlib.uuid4().hex[:8]
    response = ctx.request('admin', 'POST', '/v2/remote_pools',
                           body=_pool_body(name), version=POOLS)
    assert response.status_code == 201, response.text
    return name


def _delete_pool(ctx, name, response):
    if response.status_code == 201:
        ctx.request('admin', 'DELETE', '/v2/remote_pools/' + name,
                    version=POOLS)


class Row:
    """One request of the matrix: ``route`` (method, path template) and
    what each persona gets (``expected``, in PERSONAS order).

    ``target(ctx)`` returns the values the request is made of (a fresh
    object where it consumes one); ``build(ctx, target)`` returns (path
    variables, query, body); ``undo(ctx, target, response)`` puts back
    what a success changed.  ``listed`` names, for a list, the key of the
    items and the target's uuid that must be among them.  ``version``: the
    microversion asked for (none: 2.0)."""

    def __init__(self, method, path, status, expected, build=None,
                 target=None, undo=None, listed=None, note='', version=None):
        self.route = (method, path)
        # The microversion the request asks for (None: no header, 2.0).
        self.version = version
        self.status = status
        self.expected = dict(zip(PERSONAS, expected.split()))
        assert len(self.expected) == len(PERSONAS), (path, expected)
        self.build = build or (lambda ctx, t: ({}, None, None))
        self.target = target or (lambda ctx: None)
        self.undo = undo
        self.listed = listed
        self.note = note

    def __repr__(self):
        return '%s %s%s' % (self.route[0], self.route[1],
                            ' (%s)' % self.note if self.note else '')


# -- what the rows are made of ---------------------------------------------

def _new_profile(ctx):
    name = 'm-%s' % uuidlib.uuid4().hex[:10]
    body = ctx.admin('POST', '/device_profiles', [{
        'name': name, 'groups': [{'resources:FPGA': '1'}]}])
    return {'name': name, 'uuid': body['uuid']}


def _new_arq(ctx):
    body = ctx.call('member', 'POST', '/accelerator_requests',
                    body={'device_profile_name': ctx.profile['name']})
    return {'uuid': body['arqs'][0]['uuid'],
            'instance': str(uuidlib.uuid4())}


def _bind(ctx, arq):
    return {arq['uuid']: [
        {'path': '/hostname', 'op': 'add',
         'value': deployment_fixture.AGENT_HOST},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': ctx.rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': arq['instance']}]}


def _new_private_profile(ctx):
    """A private profile of project demo (demo-admin's), shared with
    nobody."""
    name = 'm-%s' % uuidlib.uuid4().hex[:10]
    response = ctx.request('admin', 'POST', '/v2/device_profiles', body=[{
        'name': name, 'visibility': 'private',
        'groups': [{'resources:FPGA': '1'}]}], version='2.5')
    assert response.status_code == 201, response.text
    return {'name': name, 'uuid': response.json()['uuid']}


def _allocate(ctx, arq):
    return {'consumer_id': 'pod-' + arq['uuid'][:8],
            'consumer_type': 'k8s-pod'}


def _free(ctx, arq, response):
    """An allocated ARQ goes (and its allocation with it)."""
    if response.status_code == 200:
        ctx.call('nova', 'DELETE', '/accelerator_requests/' + arq['uuid'])


def _release(ctx, arq, response):
    """A bind that went through: wait for its end, free the handle."""
    if response.status_code != 202:
        return
    processes.wait_for(
        lambda: ctx.call('nova', 'GET', '/accelerator_requests/' +
                         arq['uuid'])['state'] in ('Bound', 'BindFailed'),
        timeout=30, what='the bind to end')
    ctx.call('nova', 'DELETE', '/accelerator_requests/' + arq['uuid'])


def _enable_again(ctx, _target, response):
    if response.status_code == 200:
        ctx.admin('POST', '/devices/%s/enable' % ctx.device)


def _new_attribute(ctx):
    body = ctx.admin('POST', '/attributes', {
        'deployable_id': ctx.deployable, 'key': 'm-%s' % uuidlib.uuid4().hex,
        'value': 'v'})
    return body['uuid']


def _new_key(ctx):
    return 'm-%s' % uuidlib.uuid4().hex


def _new_name(ctx):
    return 'm-%s' % uuidlib.uuid4().hex[:10]


MATRIX = [
    Row('GET', '/', 200, ALL_OK),
    Row('GET', '/v2', 200, ALL_OK),
    Row('GET', '/v2/openapi.json', 200, ALL_OK),

    Row('GET', '/v2/device_profiles', 200, PROFILE_READ,
        listed=('device_profiles', lambda ctx, t: ctx.profile['uuid'])),
    Row('POST', '/v2/device_profiles', 201, ADMIN_ONLY, target=_new_name,
        build=lambda ctx, name: ({}, None, [{
            'name': name, 'groups': [{'resources:FPGA': '1'}]}])),
    Row('DELETE', '/v2/device_profiles', 204, ADMIN_ONLY,
        target=_new_profile,
        build=lambda ctx, p: ({}, {'value': p['name']}, None)),
    Row('GET', '/v2/device_profiles/{name_or_uuid}', 200, PROFILE_READ,
        build=lambda ctx, t: ({'name_or_uuid': ctx.profile['uuid']}, None,
                              None)),
    Row('DELETE', '/v2/device_profiles/{name_or_uuid}', 204, ADMIN_ONLY,
        target=_new_profile,
        build=lambda ctx, p: ({'name_or_uuid': p['name']}, None, None)),

    Row('GET', '/v2/device_profiles', 200, PRIVATE_READ,
        listed=('device_profiles', lambda ctx, t: ctx.private['uuid']),
        note='private'),
    Row('GET', '/v2/device_profiles/{name_or_uuid}', 200, PRIVATE_READ,
        build=lambda ctx, t: ({'name_or_uuid': ctx.private['uuid']}, None,
                              None), note='private'),

    Row('GET', '/v2/accelerator_requests', 200, ARQ_READ,
        listed=('arqs', lambda ctx, t: ctx.arq['uuid'])),
    Row('POST', '/v2/accelerator_requests', 201, ARQ_CREATE,
        build=lambda ctx, t: ({}, None, {
            'device_profile_name': ctx.profile['name']})),
    Row('POST', '/v2/accelerator_requests', 201, PRIVATE_ARQ_CREATE,
        build=lambda ctx, t: ({}, None, {
            'device_profile_name': ctx.private['name']}),
        note='private profile'),
    Row('PATCH', '/v2/accelerator_requests', 202, SERVICE_REQUEST,
        target=_new_arq, build=lambda ctx, arq: ({}, None, _bind(ctx, arq)),
        undo=_release, note='bind'),
    Row('DELETE', '/v2/accelerator_requests', 204, ARQ_DELETE,
        target=_new_arq,
        build=lambda ctx, arq: ({}, {'arqs': arq['uuid']}, None),
        note='?arqs='),
    Row('DELETE', '/v2/accelerator_requests', 204, SERVICE_REQUEST,
        target=_new_arq,
        build=lambda ctx, arq: ({}, {'instance': arq['instance']}, None),
        note='?instance='),
    Row('GET', '/v2/accelerator_requests/{uuid}', 200, ARQ_READ,
        build=lambda ctx, t: ({'uuid': ctx.arq['uuid']}, None, None)),
    Row('PATCH', '/v2/accelerator_requests/{uuid}', 202, SERVICE_REQUEST,
        target=_new_arq,
        build=lambda ctx, arq: ({'uuid': arq['uuid']}, None,
                                _bind(ctx, arq)),
        undo=_release, note='bind'),
    Row('DELETE', '/v2/accelerator_requests/{uuid}', 204, ARQ_DELETE,
        target=_new_arq,
        build=lambda ctx, arq: ({'uuid': arq['uuid']}, None, None)),
    Row('POST', '/v2/accelerator_requests/{uuid}/allocate', 200,
        ADMIN_OR_SERVICE, target=_new_arq,
        build=lambda ctx, arq: ({'uuid': arq['uuid']}, None,
                                _allocate(ctx, arq)),
        undo=_free, version='2.6'),

    Row('GET', '/v2/devices', 200, HARDWARE_READ,
        listed=('devices', lambda ctx, t: ctx.device)),
    Row('GET', '/v2/devices/{uuid}', 200, HARDWARE_READ,
        build=lambda ctx, t: ({'uuid': ctx.device}, None, None)),
    Row('POST', '/v2/devices/{uuid}/disable', 200, ADMIN_ONLY,
        build=lambda ctx, t: ({'uuid': ctx.device}, None, None),
        undo=_enable_again),
    Row('POST', '/v2/devices/{uuid}/enable', 200, ADMIN_ONLY,
        build=lambda ctx, t: ({'uuid': ctx.device}, None, None)),

    Row('GET', '/v2/deployables', 200, HARDWARE_READ,
        listed=('deployables', lambda ctx, t: ctx.deployable)),
    Row('GET', '/v2/deployables/{uuid}', 200, HARDWARE_READ,
        build=lambda ctx, t: ({'uuid': ctx.deployable}, None, None)),
    Row('PATCH', '/v2/deployables/{uuid}/program', 200, ADMIN_ONLY,
        build=lambda ctx, t: ({'uuid': ctx.deployable}, None, [{
            'path': '/program', 'op': 'replace',
            'value': [{'image_uuid': ctx.image}]}])),

    Row('GET', '/v2/attributes', 200, HARDWARE_READ,
        listed=('attributes', lambda ctx, t: ctx.attribute)),
    Row('POST', '/v2/attributes', 201, ADMIN_ONLY, target=_new_key,
        build=lambda ctx, key: ({}, None, {
            'deployable_id': ctx.deployable, 'key': key, 'value': 'v'})),
    Row('GET', '/v2/attributes/{uuid}', 200, HARDWARE_READ,
        build=lambda ctx, t: ({'uuid': ctx.attribute}, None, None)),
    Row('DELETE', '/v2/attributes/{uuid}', 204, ADMIN_ONLY,
        target=_new_attribute,
        build=lambda ctx, uuid: ({'uuid': uuid}, None, None)),

    Row('GET', '/v2/remote_pools', 200, HARDWARE_READ, version=POOLS),
    Row('GET', '/v2/remote_pools/{name_or_uuid}', 200, HARDWARE_READ,
        version=POOLS,
        build=lambda ctx, t: ({'name_or_uuid': ctx.pool}, None, None)),
    Row('POST', '/v2/remote_pools', 201, ADMIN_ONLY, version=POOLS,
        target=lambda ctx: 'matrix-pool-' + uuidlib.uuid4().hex[:8],
        build=lambda ctx, name: ({}, None, _pool_body(name)),
        undo=_delete_pool),
    Row('DELETE', '/v2/remote_pools/{name_or_uuid}', 204, ADMIN_ONLY,
        version=POOLS, target=_new_pool,
        build=lambda ctx, name: ({'name_or_uuid': name}, None, None)),
    Row('GET', '/v2/exports/resourceslices', 200, HARDWARE_READ,
        version=POOLS),
    Row('GET', '/v2/exports/gres.conf', 200, HARDWARE_READ, version=POOLS),

    Row('GET', '/v2/quotas', 200, OWN_QUOTA, version='2.7'),
    Row('GET', '/v2/quotas/{project_id}', 200, QUOTA_READ, version='2.7',
        build=lambda ctx, t: ({'project_id': ctx.demo_project}, None, None),
        note="demo's"),
]


# -- running it ------------------------------------------------------------

class Context:
    """One API process, the personas' tokens and the shared targets."""

    def __init__(self, cloud, keystone, glance, mode):
        self.base = cloud.url(mode).rsplit('/v2', 1)[0]
        self.keystone = keystone
        self.headers = {}
        for persona, (user, scope, service) in PERSONAS.items():
            headers = {}
            if user:
                headers['X-Auth-Token'] = keystone.token(user, scope)
            if service:
                headers['X-Service-Token'] = keystone.token(service)
            self.headers[persona] = headers
        self.profile = _new_profile(self)
        self.private = _new_private_profile(self)
        self.arq = _new_arq(self)
        self.device = self.admin('GET', '/devices')['devices'][0]['uuid']
        deployable = self.admin('GET', '/deployables')['deployables'][0]
        self.deployable = deployable['uuid']
        self.rp_uuid = deployable['rp_uuid']
        self.attribute = _new_attribute(self)
        self.image = glance.add_image(b'matrix-bitstream' * 64)
        self.demo_project = keystone.project_id('demo')
        self.pool = _new_pool(self)

    def request(self, persona, method, path, query=None, body=None,
                version=None):
        headers = dict(self.headers[persona])
        if version is not None:
            headers['OpenStack-API-Version'] = 'accelerator ' + version
        return requests.request(method, self.base + path, params=query,
                                json=body, headers=headers, timeout=60)

    def call(self, persona, method, path, body=None):
        """A request that must succeed; its JSON body or None."""
        response = self.request(persona, method, '/v2' + path, body=body)
        assert response.status_code < 300, (persona, method, path,
                                            response.status_code,
                                            response.text)
        return response.json() if response.content else None

    def admin(self, method, path, body=None):
        return self.call('admin', method, path, body)


def _fault(response):
    try:
        return json.loads(response.json()['error_message'])['faultstring']
    except (ValueError, KeyError, TypeError):
        return response.text


def outcome(row, ctx, target, response):
    status = response.status_code
    if status == 401:
        return '401'
    if status == 403:
        message = _fault(response)
        if 'requires a service token' in message:
            return 'token'
        if message.startswith('Access was denied'):
            return 'deny'
        return '403: %s' % message[:80]
    if status == 404:
        return 'hidden'
    if status == row.status:
        if row.listed is not None:
            key, wanted = row.listed
            uuids = {item['uuid'] for item in response.json()[key]}
            return 'ok' if wanted(ctx, target) in uuids else 'hidden'
        return 'ok'
    return '%d: %s' % (status, _fault(response)[:80])


def try_cell(ctx, row, persona):
    """What ``persona`` gets doing ``row``."""
    method, template = row.route
    target = row.target(ctx)
    variables, query, body = row.build(ctx, target)
    response = ctx.request(persona, method, template.format(**variables),
                           query, body, row.version)
    got = outcome(row, ctx, target, response)
    if row.undo is not None:
        row.undo(ctx, target, response)
    return got


def run_matrix(ctx):
    """Every row by every persona; the cells that differ.  The personas
    of one row go at once (each has its own target; only one of them
    changes shared state, and puts it back), the rows one after another."""
    wrong = []
    with futures.ThreadPoolExecutor(PARALLEL) as pool:
        for row in MATRIX:
            cells = {persona: pool.submit(try_cell, ctx, row, persona)
                     for persona in row.expected}
            for persona, cell in cells.items():
                got, expected = cell.result(), row.expected[persona]
                if got != expected:
                    wrong.append('%-52s %-11s expected %-7s got %s'
                                 % (row, persona, expected, got))
    return wrong


def test_every_route_has_a_row():
    declared = {(r.method, r.path) for r in routes.OPERATIONS}
    covered = {row.route for row in MATRIX}
    assert covered - declared == set(), 'rows for routes that do not exist'
    assert declared - covered == set(), 'routes without a row in MATRIX'


@pytest.mark.parametrize('mode', [conftest.NEW, conftest.LEGACY])
def test_policy_matrix(cloud, keystone, glance, mode):
    wrong = run_matrix(Context(cloud, keystone, glance, mode))
    assert not wrong, '%d cell(s) differ under %s defaults:\n%s' % (
        len(wrong), mode, '\n'.join(wrong))
