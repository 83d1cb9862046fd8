"""The request and response examples of the API reference, recorded from
the real thing.

One scenario drives every operation of ``doc/api/openapi.json`` once, as
Nova and an administrator would, against the API with a real conductor on
a fresh database, the real Placement (in-process), an agent's RPC side
with the fake driver, and a recording Glance.  What was sent and answered
is compared with ``doc/api/samples/<operationId>-{request,response}.json``,
which ``doc/ext/cyborg_api.py`` renders into the API reference.  The test
fails when an operation has no example or an example is stale; rewrite
them with::

    CYBORG_UPDATE_API_SAMPLES=1 .venv/bin/python -m pytest \\
        tests/functional/api/test_api_samples.py

and review the diff.  uuids are replaced, in order of first appearance, by
stable ones, and timestamps by one fixed time, so that the examples do not
change from run to run.
"""

import json
import os
import re
import time
import uuid as uuidlib

import requests
import webob

from cyborg.agent import manager as agent_manager
from cyborg.agent import reporter
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.api import microversion
from cyborg.common import context as cyborg_context
from cyborg.common import rpc
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.drivers import fake
from cyborg.placement import embedded
from tests.fixtures import api as api_fixture
from tests.fixtures import placement as placement_fixture
from tests.fixtures import recording_http

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DOCUMENT = os.path.join(ROOT, 'doc', 'api', 'openapi.json')
SAMPLES = os.path.join(ROOT, 'doc', 'api', 'samples')
UPDATE = os.environ.get('CYBORG_UPDATE_API_SAMPLES') == '1'

HOST = 'compute-1'
BASE_URL = 'http://controller'
MOUNT = '/accelerator'
VERSION = {'OpenStack-API-Version':
           'accelerator %s' % microversion.MAX_VERSION}
ADMIN = {'X-Project-Id': '6a3c0b1e2d4f4e5a9b8c7d6e5f4a3b2c',
         'X-User-Id': 'admin', 'X-Roles': 'admin,member,reader'}
# Nova: the user's token (their project) plus its own service token.
NOVA = {'X-Project-Id': 'f1e2d3c4b5a647389a0b1c2d3e4f5a6b',
        'X-User-Id': 'demo', 'X-Roles': 'member,reader',
        'X-Service-Token': 'nova'}
# Request headers shown in the examples (the identity headers above are
# the test's stand-in for a Keystone token).
SHOWN_HEADERS = ('OpenStack-API-Version', 'Content-Type')
INSTANCE = '3e0b4a2c-4d6e-4f1a-8b9c-0d1e2f3a4b5c'
IMAGE = '9c7d8e6f-5a4b-4c3d-8e2f-1a0b9c8d7e6f'
# The OpenAPI document's own response is the document: not repeated.
BODY_OMITTED = {'openapi_document': 'The OpenAPI document: '
                                    '``doc/api/openapi.json``.'}

_UUID = re.compile(r'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-'
                   r'[0-9a-fA-F]{4}-[0-9a-fA-F]{12}')
SAMPLE_VERSION = '1.0.0'
SAMPLE_GENERATION = 1714557600
_TIMESTAMP = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00')
_FIXED_TIME = '2024-05-01T10:00:00+00:00'


class Recorder:
    """Sends requests to the WSGI app and keeps those that are examples."""

    def __init__(self, app):
        self.app = app
        self.exchanges = []

    def call(self, method, path, headers, body=None, status=None,
             operation=None):
        """Send a request for ``path`` (``/v2/...``) as the API gets it
        behind ``BASE_URL`` + ``MOUNT``; check the status; record it as
        the example of ``operation`` when one is named."""
        sent = dict(headers)
        raw = None
        if body is not None:
            raw = json.dumps(body).encode()
            sent['Content-Type'] = 'application/json'
        request = webob.Request.blank(MOUNT + path, base_url=BASE_URL,
                                      method=method, headers=sent,
                                      POST=raw)
        response = request.get_response(self.app)
        text = None
        if response.body and response.content_type != 'application/json':
            # A document of another format (gres.conf, YAML) as it is.
            text, answer = response.text, None
        else:
            answer = response.json if response.body else None
        if status is not None:
            assert response.status_int == status, (
                method, path, response.status, response.text)
        if operation is not None:
            shown = {k: v for k, v in sent.items() if k in SHOWN_HEADERS}
            example = {'method': method, 'path': path, 'headers': shown}
            if body is not None:
                example['body'] = body
            result = {'status': response.status_int}
            if operation in BODY_OMITTED:
                result['body_omitted'] = BODY_OMITTED[operation]
            elif answer is not None:
                result['body'] = answer
            elif text is not None:
                result['text'] = text
            self.exchanges.append((operation, example, result))
        return answer


def _scenario(r, placement_url):
    """Every operation once, in an order where each has what it needs."""
    v2 = dict(VERSION)
    admin, nova = dict(ADMIN, **v2), dict(NOVA, **v2)

    r.call('GET', '/', {}, status=200, operation='root_versions')
    r.call('GET', '/v2', {}, status=200, operation='v2_version')
    r.call('GET', '/v2/openapi.json', {}, status=200,
           operation='openapi_document')

    # Devices, as the agent's report left them.
    device, = r.call('GET', '/v2/devices?hostname=' + HOST, admin,
                     status=200, operation='list_devices')['devices']
    device_url = '/v2/devices/' + device['uuid']
    r.call('GET', device_url, admin, status=200, operation='show_device')
    r.call('POST', device_url + '/disable', admin, status=200,
           operation='disable_device')
    r.call('POST', device_url + '/enable', admin, status=200,
           operation='enable_device')

    # Deployables: list, show, program with a Glance image.
    deployable, = r.call('GET', '/v2/deployables?name=%s_FakeDevice' % HOST,
                         admin, status=200,
                         operation='list_deployables')['deployables']
    deployable_url = '/v2/deployables/' + deployable['uuid']
    r.call('GET', deployable_url, admin, status=200,
           operation='show_deployable')
    r.call('PATCH', deployable_url + '/program', admin,
           [{'path': '/program', 'op': 'replace',
             'value': [{'image_uuid': IMAGE}]}], status=200,
           operation='program_deployable')

    # Attributes of that deployable.
    r.call('GET', '/v2/attributes?deployable_id=' + deployable['uuid'],
           admin, status=200, operation='list_attributes')
    attribute = r.call('POST', '/v2/attributes', admin,
                       {'deployable_id': deployable['uuid'],
                        'key': 'rack', 'value': 'r12'}, status=201,
                       operation='create_attribute')
    attribute_url = '/v2/attributes/' + attribute['uuid']
    r.call('GET', attribute_url, admin, status=200,
           operation='show_attribute')
    r.call('DELETE', attribute_url, admin, status=204,
           operation='delete_attribute')

    # A device profile, as an administrator makes it for a flavor.
    # Private (2.5): only the admin's project and Nova's user's see it.
    r.call('POST', '/v2/device_profiles', admin,
           [{'name': 'fpga-small', 'description': 'One fake FPGA',
             'visibility': 'private', 'projects': [NOVA['X-Project-Id']],
             'groups': [{'resources:FPGA': '1',
                         'trait:CUSTOM_FAKE_DEVICE': 'required'}]}],
           status=201, operation='create_device_profile')
    r.call('GET', '/v2/device_profiles?name=fpga-small', nova, status=200,
           operation='list_device_profiles')
    r.call('GET', '/v2/device_profiles/fpga-small', nova, status=200,
           operation='show_device_profile')

    # What Nova does for an instance: create, bind (after Placement
    # allocated the device), wait for Bound, read, then unbind and delete.
    arq, = r.call('POST', '/v2/accelerator_requests', nova,
                  {'device_profile_name': 'fpga-small'}, status=201,
                  operation='create_arqs')['arqs']
    rp_uuid = deployable['rp_uuid']
    placement_fixture.hold_allocation(placement_url, INSTANCE,
                                      {rp_uuid: {'FPGA': 1}})
    r.call('PATCH', '/v2/accelerator_requests', nova,
           {arq['uuid']: [
               {'path': '/hostname', 'op': 'add', 'value': HOST},
               {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
               {'path': '/instance_uuid', 'op': 'add', 'value': INSTANCE}]},
           status=202, operation='bind_or_unbind_arqs')
    arq_url = '/v2/accelerator_requests/' + arq['uuid']
    _wait_for(lambda: r.call('GET', arq_url, nova)['state'] == 'Bound',
              'the ARQ to be Bound')
    r.call('GET', arq_url, nova, status=200, operation='show_arq')
    # The project's limits and usage, as its user and as an administrator
    # see them (no limits here: [quota]driver is noop).
    r.call('GET', '/v2/quotas', nova, status=200,
           operation='show_own_quota')
    r.call('GET', '/v2/quotas/' + NOVA['X-Project-Id'], admin, status=200,
           operation='show_quota')
    r.call('GET', '/v2/accelerator_requests?instance=%s&bind_state=resolved'
           % INSTANCE, nova, status=200, operation='list_arqs')
    r.call('PATCH', arq_url, nova,
           {arq['uuid']: [{'path': '/hostname', 'op': 'remove'},
                          {'path': '/device_rp_uuid', 'op': 'remove'},
                          {'path': '/instance_uuid', 'op': 'remove'}]},
           status=202, operation='bind_or_unbind_arq')
    r.call('DELETE', arq_url, nova, status=204, operation='delete_arq')
    placement_fixture.hold_allocation(placement_url, INSTANCE, {})

    second, = r.call('POST', '/v2/accelerator_requests', nova,
                     {'device_profile_name': 'fpga-small'},
                     status=201)['arqs']
    r.call('DELETE', '/v2/accelerator_requests?arqs=' + second['uuid'],
           nova, status=204, operation='delete_arqs')

    # Without Nova (2.6): a scheduler of its own allocates an ARQ to a
    # pod; deleting the ARQ releases it.
    third, = r.call('POST', '/v2/accelerator_requests', nova,
                    {'device_profile_name': 'fpga-small'},
                    status=201)['arqs']
    third_url = '/v2/accelerator_requests/' + third['uuid']
    r.call('POST', third_url + '/allocate', admin,
           {'consumer_id': '5d2f7c1a-pod', 'consumer_type': 'k8s-pod',
            'hostname': HOST}, status=200, operation='allocate_arq')
    r.call('DELETE', third_url, admin, status=204)

    # Profiles go: one by name, others by a list of names.
    r.call('DELETE', '/v2/device_profiles/fpga-small', admin, status=204,
           operation='delete_device_profile')
    for name in ('gpu-small', 'gpu-large'):
        r.call('POST', '/v2/device_profiles', admin,
               [{'name': name, 'groups': [{'resources:PGPU': '1'}]}],
               status=201)
    r.call('DELETE', '/v2/device_profiles?value=gpu-small,gpu-large',
           admin, status=204, operation='delete_device_profiles')

    # Exports of the host's inventory for Kubernetes and Slurm.
    r.call('GET', '/v2/exports/resourceslices?hostname=' + HOST, admin,
           status=200, operation='export_resource_slices')
    r.call('GET', '/v2/exports/gres.conf?hostname=' + HOST, admin,
           status=200, operation='export_gres_conf')

    # A remote pool: registered, listed, shown, deleted.
    aggregate = '5b3f1c2d-7e8a-4b9c-8d0e-1f2a3b4c5d6e'
    pool = r.call('POST', '/v2/remote_pools', admin, {
        'name': 'nvme-rack-1', 'description': 'NVMe-oF namespaces of rack 1',
        'resource_class': 'CUSTOM_REMOTE_NVME',
        'traits': ['CUSTOM_NVMEOF_TCP'], 'aggregates': [aggregate],
        'fabric_driver': 'fake',
        'handles': [{'fabric_address': 'nqn.2024-05.org.example:rack1:ns1'},
                    {'fabric_address': 'nqn.2024-05.org.example:rack1:ns2'}]},
        status=201, operation='create_remote_pool')
    r.call('GET', '/v2/remote_pools', admin, status=200,
           operation='list_remote_pools')
    r.call('GET', '/v2/remote_pools/nvme-rack-1', admin, status=200,
           operation='show_remote_pool')
    r.call('DELETE', '/v2/remote_pools/' + pool['uuid'], admin, status=204,
           operation='delete_remote_pool')


def _wait_for(check, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, 'timed out waiting for ' + what
        time.sleep(0.05)


# -- normalising -------------------------------------------------------------

class Normaliser:
    """Stable stand-ins for uuids (by order of first appearance) and
    timestamps, applied to keys and string values alike."""

    def __init__(self):
        self._uuids = {}

    def _uuid(self, match):
        found = match.group(0).lower()
        if found not in self._uuids:
            self._uuids[found] = str(uuidlib.uuid5(
                uuidlib.NAMESPACE_URL,
                'cyborg-api-sample-%d' % len(self._uuids)))
        return self._uuids[found]

    def text(self, value):
        return _TIMESTAMP.sub(_FIXED_TIME, _UUID.sub(self._uuid, value))

    def __call__(self, value):
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            if 'service_version' in value:
                # The release changes with every commit.
                value = dict(value, service_version=SAMPLE_VERSION)
            if 'resourceSliceCount' in value:
                # A ResourceSlice pool's generation is a time in seconds.
                value = dict(value, generation=SAMPLE_GENERATION)
            return {self(k): self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value


def samples_of(exchanges):
    """{file name: content} of the recorded exchanges, normalised."""
    normalise = Normaliser()
    files = {}
    for operation, request, response in exchanges:
        files[operation + '-request.json'] = normalise(request)
        files[operation + '-response.json'] = normalise(response)
    return files


def _operation_ids():
    with open(DOCUMENT) as f:
        document = json.load(f)
    return sorted(op['operationId'] for ops in document['paths'].values()
                  for op in ops.values())


# -- the deployment -----------------------------------------------------------

def _record(tmp_path):
    glance = recording_http.FakeGlance().start()
    placement = embedded.EmbeddedPlacement('sqlite://')
    placement_url = placement.start()
    try:
        glance.add_image(b'\x00fake bitstream' * 64, image_uuid=IMAGE)
        requests.post(placement_url + '/resource_providers',
                      json={'name': HOST, 'uuid': str(uuidlib.uuid4())},
                      headers=placement_fixture.HEADERS,
                      timeout=10).raise_for_status()
        overrides = {('placement', 'auth_type'): 'none',
                     ('placement', 'endpoint_override'): placement_url,
                     ('glance', 'auth_type'): 'none',
                     ('glance', 'endpoint_override'): glance.url,
                     ('nova', 'send_events'): False,
                     (None, 'state_path'): str(tmp_path)}
        with api_fixture.api_service(overrides) as service:
            conf = service.conf
            driver = fake.FakeDriver(conf, HOST)
            agent = rpc.get_server(conf, agent_rpcapi.TOPIC, HOST, [
                agent_manager.AgentManager(conf, HOST,
                                           drivers={driver.name: driver})])
            agent.start()
            try:
                _report(conf, driver)
                recorder = Recorder(service.app)
                _scenario(recorder, placement_url)
                return recorder.exchanges
            finally:
                agent.stop()
                agent.wait()
    finally:
        placement.stop()
        glance.stop()


def _report(conf, driver):
    """The agent's first report of its host, through the real conductor
    (which writes the rows and the Placement providers)."""
    report = reporter.build_report(driver.discover(), None, None, True)
    report['resource_provider_name'] = HOST
    reply = conductor_rpcapi.ConductorAPI(conf).report_inventory(
        cyborg_context.get_admin_context(), HOST, report)
    assert reply == {'digest': report['digest'], 'need_full': False}


def test_every_operation_has_a_current_example(tmp_path):
    files = samples_of(_record(tmp_path))
    recorded = sorted(name[:-len('-request.json')] for name in files
                      if name.endswith('-request.json'))
    assert recorded == _operation_ids(), (
        'the scenario must drive every operation of doc/api/openapi.json '
        'exactly once')
    problems = _compare(files)
    if UPDATE:
        _write(files)
        return
    assert not problems, (
        'doc/api/samples is stale:\n  %s\nRewrite it with '
        'CYBORG_UPDATE_API_SAMPLES=1 .venv/bin/python -m pytest '
        'tests/functional/api/test_api_samples.py and review the diff.'
        % '\n  '.join(problems))


def _compare(files):
    problems = []
    present = set(os.listdir(SAMPLES)) if os.path.isdir(SAMPLES) else set()
    for name, content in sorted(files.items()):
        if name not in present:
            problems.append(name + ': missing')
            continue
        with open(os.path.join(SAMPLES, name)) as f:
            if json.load(f) != content:
                problems.append(name + ': differs from what the API does')
    for name in sorted(present - set(files)):
        problems.append(name + ': no such operation any more')
    return problems


def _write(files):
    os.makedirs(SAMPLES, exist_ok=True)
    for name in os.listdir(SAMPLES):
        if name not in files:
            os.unlink(os.path.join(SAMPLES, name))
    for name, content in files.items():
        with open(os.path.join(SAMPLES, name), 'w') as f:
            json.dump(content, f, indent=2)
            f.write('\n')

