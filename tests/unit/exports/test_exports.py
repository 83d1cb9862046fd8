"""The exports (GET /v2/exports/..., microversion 2.9) against the formats
they claim: Kubernetes ``resource.k8s.io/v1`` ResourceSlice objects, checked
with a JSON Schema written from the Kubernetes API reference, and Slurm
``gres.conf``, checked with a parser of the grammar gres.conf(5)
documents.  The inventory is real rows on a real database, read by the
real API in-process (tests/fixtures/api.py)."""

import json
import re

import jsonschema
import pytest
import sqlalchemy as sa
import webob
import yaml
from sqlalchemy import orm

from cyborg.db import models
from cyborg.exports import dns_label, dns_subdomain
from cyborg.exports import resource_slices
from tests.fixtures import api as api_fixture

# -- Kubernetes ----------------------------------------------------------
# From the Kubernetes API reference (resource.k8s.io/v1, ResourceSlice):
# metadata.name is a DNS subdomain (RFC 1123, at most 253 characters);
# spec.driver a DNS subdomain of at most 63 characters; spec.pool.name
# one or more DNS subdomains separated by '/', at most 253 characters;
# generation and resourceSliceCount integers (the count at least 1);
# exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection;
# at most 128 devices (none is allowed); a device's name a DNS label (at
# most 63); its attributes and capacity keyed by qualified names (an
# optional DNS subdomain and '/', then a C identifier of at most 32
# characters); an attribute exactly one of bool, int, string (at most 64
# bytes: check_slices counts them) or version (semver, at most 64); a
# capacity value a quantity; at most 32 attributes and capacities
# together.  From the object metadata rules: label keys an optional DNS
# subdomain prefix and '/', then a name of at most 63 characters
# (alphanumerics, '-', '_', '.', starting and ending with an
# alphanumeric); label values that name, or empty; annotation keys as
# label keys.
LABEL = r'[a-z0-9]([-a-z0-9]*[a-z0-9])?'
SUBDOMAIN = r'%s(\.%s)*' % (LABEL, LABEL)
QUALIFIED = r'^(%s/)?[A-Za-z_][A-Za-z0-9_]{0,31}$' % SUBDOMAIN
LABEL_NAME = r'([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)'
LABEL_KEY = r'^(%s/)?%s$' % (SUBDOMAIN, LABEL_NAME)
QUANTITY = (r'^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)'
            r'([eE][+-]?[0-9]+|[KMGTPE]i|[mkMGTPE])?$')

RESOURCE_SLICE = {
    'type': 'object',
    'required': ['apiVersion', 'kind', 'metadata', 'spec'],
    'properties': {
        'apiVersion': {'const': 'resource.k8s.io/v1'},
        'kind': {'const': 'ResourceSlice'},
        'metadata': {'type': 'object', 'required': ['name'], 'properties': {
            'name': {'type': 'string', 'maxLength': 253,
                     'pattern': '^%s$' % SUBDOMAIN},
            'labels': {'type': 'object',
                       'propertyNames': {'pattern': LABEL_KEY},
                       'additionalProperties': {
                           'type': 'string',
                           'pattern': '^%s?$' % LABEL_NAME}},
            'annotations': {'type': 'object',
                            'propertyNames': {'pattern': LABEL_KEY},
                            'additionalProperties': {'type': 'string'}}}},
        'spec': {
            'type': 'object',
            'required': ['driver', 'pool'],
            'additionalProperties': False,
            'properties': {
                'driver': {'type': 'string', 'maxLength': 63,
                           'pattern': '^%s$' % SUBDOMAIN},
                'pool': {
                    'type': 'object',
                    'required': ['name', 'generation', 'resourceSliceCount'],
                    'additionalProperties': False,
                    'properties': {
                        'name': {'type': 'string', 'maxLength': 253,
                                 'pattern': '^%s(/%s)*$' % (SUBDOMAIN,
                                                            SUBDOMAIN)},
                        'generation': {'type': 'integer', 'minimum': 0},
                        'resourceSliceCount': {'type': 'integer',
                                               'minimum': 1}}},
                'nodeName': {'type': 'string', 'maxLength': 253,
                             'pattern': '^%s$' % SUBDOMAIN},
                'nodeSelector': {'type': 'object'},
                'allNodes': {'type': 'boolean'},
                'perDeviceNodeSelection': {'type': 'boolean'},
                'devices': {'type': 'array', 'maxItems': 128,
                            'items': {'$ref': '#/$defs/device'}},
            },
            'oneOf': [{'required': [one]} for one in (
                'nodeName', 'nodeSelector', 'allNodes',
                'perDeviceNodeSelection')],
        },
    },
    '$defs': {
        'device': {
            'type': 'object',
            'required': ['name'],
            'properties': {
                'name': {'type': 'string', 'maxLength': 63,
                         'pattern': '^%s$' % LABEL},
                'attributes': {
                    'type': 'object', 'maxProperties': 32,
                    'propertyNames': {'pattern': QUALIFIED},
                    'additionalProperties': {
                        'type': 'object',
                        'minProperties': 1, 'maxProperties': 1,
                        'additionalProperties': False,
                        'properties': {
                            'bool': {'type': 'boolean'},
                            'int': {'type': 'integer'},
                            'string': {'type': 'string', 'maxLength': 64},
                            'version': {'type': 'string', 'maxLength': 64,
                                        'pattern': r'^\d+\.\d+\.\d+'}}}},
                'capacity': {
                    'type': 'object', 'maxProperties': 32,
                    'propertyNames': {'pattern': QUALIFIED},
                    'additionalProperties': {
                        'type': 'object', 'required': ['value'],
                        'properties': {'value': {'type': 'string',
                                                 'pattern': QUANTITY}}}},
            },
        },
    },
}


def check_slices(items):
    """Every slice valid, plus what a schema cannot say: attributes and
    capacity at most 32 together, strings at most 64 bytes, device names
    unique in their pool, the slices of a pool agreeing on its generation
    and count."""
    validator = jsonschema.Draft202012Validator(RESOURCE_SLICE)
    pools = {}
    for item in items:
        errors = sorted(validator.iter_errors(item), key=str)
        assert not errors, (item['metadata'], errors[0].message)
        spec = item['spec']
        for device in spec['devices']:
            assert len(device.get('attributes', {})) + len(
                device.get('capacity', {})) <= 32
            for value in device.get('attributes', {}).values():
                text = value.get('string', value.get('version', ''))
                assert len(text.encode('utf-8')) <= 64, text
        pool = pools.setdefault((spec['driver'], spec['pool']['name']),
                                {'slices': [], 'names': []})
        pool['slices'].append(spec['pool'])
        pool['names'] += [d['name'] for d in spec['devices']]
    for key, pool in pools.items():
        assert len(set(pool['names'])) == len(pool['names']), key
        assert {(p['generation'], p['resourceSliceCount'])
                for p in pool['slices']} == {(pool['slices'][0]['generation'],
                                              len(pool['slices']))}, key
    names = [item['metadata']['name'] for item in items]
    assert len(set(names)) == len(names)


# -- Slurm -------------------------------------------------------------
# gres.conf(5): parameter=value pairs separated by white space, parameter
# names case insensitive, '#' starts a comment to the end of the line.
# Name is required; Count is a number with an optional K, M, G, T or P
# suffix (default: the number of File values, else 1); File is the full
# path of device files, with [a-b,c] ranges; Type, NodeName (a host list),
# Cores, Links, Flags and the other documented parameters take one word.
GRES_PARAMETERS = {'autodetect', 'count', 'cores', 'cpus', 'file', 'flags',
                   'links', 'multiplefiles', 'name', 'nodename', 'type'}
_RANGE = re.compile(r'\[([0-9,\-]+)\]')


def _files(value):
    """The device files a File= value names (ranges expanded)."""
    match = _RANGE.search(value)
    if not match:
        return [value]
    found = []
    for part in match.group(1).split(','):
        low, _sep, high = part.partition('-')
        for number in range(int(low), int(high or low) + 1):
            found.append(value[:match.start()] + str(number) +
                         value[match.end():])
    return found


def parse_gres_conf(text):
    """[{parameter: value}] of the lines of ``text``; AssertionError on
    anything gres.conf(5) does not allow."""
    records = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split('#', 1)[0].strip()
        if not line:
            continue
        record = {}
        for word in line.split():
            assert '=' in word, (number, word)
            key, value = word.split('=', 1)
            key = key.lower()
            assert key in GRES_PARAMETERS, (number, key)
            assert key not in record, (number, key)
            assert value, (number, key)
            record[key] = value
        assert 'name' in record, number
        assert re.match(r'^[A-Za-z0-9_]+$', record['name']), number
        count = record.get('count')
        if count is not None:
            assert re.match(r'^[0-9]+[KMGTP]?$', count), (number, count)
        if 'file' in record:
            files = _files(record['file'])
            assert all(f.startswith('/') for f in files), number
            if count is not None:
                assert int(count) == len(files), number
        records.append(record)
    return records


# -- the inventory -------------------------------------------------------

HOST_A = 'compute-a.example.org'
HOST_B = 'Compute_B'


@pytest.fixture(scope='module')
def service():
    with api_fixture.api_service() as service:
        # 200 FPGA functions on one host: more than one slice holds.
        api_fixture.seed_device(service.engine, HOST_A, HOST_A + '_fpga',
                                handles=200)
        gpu = api_fixture.seed_device(
            service.engine, HOST_A, HOST_A + '_0000:3b:00.0',
            device_type='GPU', vendor='10de', handles=1, attributes={
                'rc': 'PGPU', 'iommu_group': '20', 'numa_node': '1',
                'memory_mb': '40960', 'trait0': 'CUSTOM_NVIDIA_20F1'})
        api_fixture.seed_device(service.engine, HOST_B, HOST_B + '_qat',
                                device_type='QAT', vendor='8086', handles=3,
                                attributes={'rc': 'CUSTOM_QAT'})
        maintained = api_fixture.seed_device(
            service.engine, HOST_B, HOST_B + '_spare', device_type='GPU',
            vendor='10de', handles=1, attributes={'rc': 'PGPU'})
        with orm.Session(service.engine) as session, session.begin():
            session.execute(sa.update(models.Deployable).where(
                models.Deployable.id == gpu['deployable_id']).values(
                driver_name='nvidia_gpu_driver'))
            session.execute(sa.update(models.Device).where(
                models.Device.id == maintained['device_id']).values(
                status='maintaining'))
        yield service


MANAGER = {'X-Project-Id': 'p1', 'X-User-Id': 'u', 'X-Roles': 'manager',
           'OpenStack-API-Version': 'accelerator 2.9'}


def _get(service, path, headers=MANAGER):
    response = webob.Request.blank(path, headers=headers).get_response(
        service.app)
    return response


def test_resource_slices_validate(service):
    response = _get(service, '/v2/exports/resourceslices')
    assert response.status_int == 200, response.text
    document = response.json
    assert (document['apiVersion'], document['kind']) == ('v1', 'List')
    items = document['items']
    check_slices(items)
    by_driver = {}
    for item in items:
        by_driver.setdefault((item['spec']['nodeName'],
                              item['spec']['driver']), []).append(item)
    fpga = by_driver[('compute-a.example.org',
                      'fake.cyborg.openstack.org')]
    # 200 devices in one pool: 128 + 72, one slice count.
    assert [len(s['spec']['devices']) for s in fpga] == [128, 72]
    assert {s['spec']['pool']['resourceSliceCount'] for s in fpga} == {2}
    gpu, = by_driver[('compute-a.example.org',
                      'nvidia-gpu.cyborg.openstack.org')]
    device, = gpu['spec']['devices']
    assert device['attributes']['type'] == {'string': 'GPU'}
    assert device['attributes']['numaNode'] == {'int': 1}
    assert device['attributes']['pciAddress'] == {'string': '0000:0c:00.0'}
    assert device['capacity'] == {'memory': {'value': '40960Mi'}}
    # The host name is made a valid node name; the device in maintenance
    # is not offered.
    qat, = by_driver[('compute-b', 'fake.cyborg.openstack.org')]
    assert len(qat['spec']['devices']) == 3
    assert len(items) == 4


def test_one_host_and_yaml(service):
    response = _get(service, '/v2/exports/resourceslices?hostname=' +
                    HOST_B + '&format=yaml')
    assert response.status_int == 200, response.text
    assert response.content_type == 'application/yaml'
    document = yaml.safe_load(response.text)
    check_slices(document['items'])
    assert {i['spec']['nodeName'] for i in document['items']} == {
        'compute-b'}
    as_json = _get(service, '/v2/exports/resourceslices?hostname=' + HOST_B)
    assert as_json.json == document


def test_gres_conf_parses(service):
    response = _get(service, '/v2/exports/gres.conf')
    assert response.status_int == 200, response.text
    assert response.content_type == 'text/plain'
    records = parse_gres_conf(response.text)
    assert {(r['nodename'], r['name'], r['count'], r.get('file'))
            for r in records} == {
        (HOST_A, 'fpga', '200', None),
        (HOST_A, 'gpu', '1', '/dev/vfio/20'),
        (HOST_B, 'qat', '3', None)}
    assert '# %s_spare: out of the schedule' % HOST_B in response.text
    one = parse_gres_conf(_get(service, '/v2/exports/gres.conf?hostname=' +
                               HOST_B).text)
    assert [r['nodename'] for r in one] == [HOST_B]


def test_exports_need_2_9_and_a_manager(service):
    older = dict(MANAGER, **{'OpenStack-API-Version': 'accelerator 2.8'})
    assert _get(service, '/v2/exports/gres.conf',
                headers=older).status_int == 404
    member = dict(MANAGER, **{'X-Roles': 'member,reader'})
    assert _get(service, '/v2/exports/resourceslices',
                headers=member).status_int == 403
    bad = _get(service, '/v2/exports/resourceslices?format=xml')
    assert bad.status_int == 400


def test_the_checks_catch_what_kubernetes_and_slurm_refuse():
    """The schema and the parser are not vacuous."""
    good = resource_slices.slices(_inventory(3), 7)
    check_slices(good)
    for breaks in (
            lambda s: s['spec'].update(devices=s['spec']['devices'] * 50),
            lambda s: s['metadata'].update(name='Bad_Name'),
            lambda s: s['spec']['devices'][0].update(name='x' * 64),
            lambda s: s['spec']['devices'][0]['attributes'].update(
                {'a' * 33: {'int': 1}}),
            lambda s: s['spec']['devices'][0]['attributes'].update(
                {'two': {'int': 1, 'bool': True}}),
            lambda s: s['spec'].update(allNodes=True),
            lambda s: s['spec'].update(driver='d' * 64),
            # 64 characters, 128 bytes.
            lambda s: s['spec']['devices'][0]['attributes'].update(
                model={'string': '\u00fc' * 64}),
            lambda s: s['metadata']['labels'].update(
                {'cyborg.openstack.org/node': 'n' * 64}),
            lambda s: s['metadata']['annotations'].update(
                {'not a key': 'x'})):
        broken = json.loads(json.dumps(good))
        breaks(broken[0])
        with pytest.raises(AssertionError):
            check_slices(broken)
    for text in ('NodeName=h Type=x Count=1',            # no Name
                 'Name=gpu Count=two',                  # not a number
                 'Name=gpu File=/dev/vfio/1 Count=2',   # files != count
                 'Name=gpu Colour=red',                 # unknown
                 'Name=gpu File=dev/vfio/1'):           # not a full path
        with pytest.raises(AssertionError):
            parse_gres_conf(text)
    assert parse_gres_conf('name=gpu file=/dev/nvidia[0-3] count=4 # ok')


def _inventory(handles, **attributes):
    from cyborg.objects import exports
    deployable = exports.Deployable(
        uuid='d' * 36, name='h_dev', driver_name='intel_qat_driver',
        num_accelerators=handles,
        attributes=dict(attributes, rc='CUSTOM_QAT'),
        handles=[exports.Handle(uuid='h%d' % i, attach_type='PCI',
                                attach_info={'domain': '0000', 'bus': '3d',
                                             'device': '01',
                                             'function': str(i)},
                                in_use=False) for i in range(handles)],
        schedulable=True)
    return exports.HostInventory(hostname='h', devices=[exports.Device(
        uuid='u', type='QAT', vendor='8086', model='C62X',
        deployables=[deployable])])


@pytest.mark.parametrize('numa_node, memory_mb, numbers', [
    ('1', '512', ({'int': 1}, {'memory': {'value': '512Mi'}})),
    ('-1', '0', ({'int': -1}, {'memory': {'value': '0Mi'}})),
    # What an admin may set (POST /v2/attributes takes any string): left
    # out, not a 500 for every host's export.
    ('--1', '-5', (None, None)),
    ('\u00b2', '\u00b2', (None, None)),
    ('1' * 30, '1' * 30, (None, None)),
    (' 1', '1.5', (None, None)),
])
def test_attributes_that_are_not_numbers_are_left_out(numa_node, memory_mb,
                                                      numbers):
    item, = resource_slices.slices(
        _inventory(1, numa_node=numa_node, memory_mb=memory_mb), 1)
    device, = item['spec']['devices']
    assert (device['attributes'].get('numaNode'),
            device.get('capacity')) == numbers


@pytest.mark.parametrize('text', ['Compute_1', 'a' * 80, '--x--', '',
                                  'UPPER.lower.123', 'a..b'])
def test_names_are_valid_dns_names(text):
    assert re.match('^%s$' % LABEL, dns_label(text))
    assert len(dns_label(text)) <= 63
    assert re.match('^%s$' % SUBDOMAIN, dns_subdomain(text))
    assert len(dns_subdomain(text * 5)) <= 253


@pytest.mark.parametrize('text', [
    '\u00dcn\u00efc\u00f6d\u00e9 ' * 8,    # 64 characters, 96 bytes
    '\u00fc' * 64,                           # two bytes each
    'a' + '\u20ac' * 30,                     # 64 cut inside a character
    '\U0001F600' * 20],                       # four bytes each
    ids=['latin', 'two-byte', 'three-byte', 'four-byte'])
def test_strings_are_cut_to_64_bytes_between_characters(text):
    """The API server counts a string attribute's bytes, not its
    characters: a model or vGPU type of 64 non-ASCII characters was
    refused.  Cut to 64 bytes, never inside a character."""
    inventory = _inventory(1, vgpu_type=text)
    inventory.devices[0].model = text
    items = resource_slices.slices(inventory, 1)
    check_slices(items)
    attributes = items[0]['spec']['devices'][0]['attributes']
    for name in ('model', 'vgpuType'):
        cut = attributes[name]['string']
        assert text.startswith(cut) and cut
        assert 64 - 3 <= len(cut.encode('utf-8')) <= 64, name
