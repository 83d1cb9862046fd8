"""?format=yaml double-quotes every string: kubectl reads YAML by YAML
1.1 rules (go-yaml), where a plain ``1e30`` (the PCI device id of a
Turing GPU, its model when NVML is absent) is a float and ``y`` a
boolean, and a string attribute holding either was refused.  PyYAML
reads both plain scalars as strings, so the test looks at how each
scalar is written, not only at what it reads back as.  Its own module:
test_exports.py keeps one API service, and its inventory, for its whole
module."""

import sqlalchemy as sa
import webob
import yaml
from sqlalchemy import orm

from cyborg.db import models
from tests.fixtures import api as api_fixture
from tests.unit.exports import test_exports

MANAGER = test_exports.MANAGER


def _scalars(node):
    """Every scalar node under ``node``, keys included."""
    if isinstance(node, yaml.ScalarNode):
        yield node
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _scalars(item)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _scalars(key)
            yield from _scalars(value)


def _strings(value):
    """Every string in a JSON document, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)


def test_every_string_is_double_quoted():
    with api_fixture.api_service() as service:
        ids = api_fixture.seed_device(
            service.engine, 'compute-y', 'compute-y_gpu', device_type='GPU',
            vendor='10de', handles=1,
            attributes={'rc': 'PGPU', 'vgpu_type': 'y',
                        'gpu_uuid': '\u00fc' * 40})
        with orm.Session(service.engine) as session, session.begin():
            session.execute(sa.update(models.Device).where(
                models.Device.id == ids['device_id']).values(model='1e30'))
        path = '/v2/exports/resourceslices'
        response = webob.Request.blank(
            path + '?format=yaml', headers=MANAGER).get_response(service.app)
        assert response.status_int == 200, response.text
        as_json = webob.Request.blank(path, headers=MANAGER).get_response(
            service.app).json
    attributes = as_json['items'][0]['spec']['devices'][0]['attributes']
    assert attributes['model'] == {'string': '1e30'}
    assert attributes['vgpuType'] == {'string': 'y'}
    assert yaml.safe_load(response.text) == as_json
    written = {}
    for node in _scalars(yaml.compose(response.text)):
        written.setdefault(node.value, set()).add(node.style)
    for text in _strings(as_json):
        assert written[text] == {'"'}, (text, written[text])
    assert '"string": "1e30"' in response.text
    assert '"string": "y"' in response.text
    # Numbers stay numbers.
    assert written[str(as_json['items'][0]['spec']['pool']['generation'])] \
        == {None}


def test_accept_header_chooses_yaml_without_format():
    """kubectl and curl users ask by media type: an Accept header that
    prefers application/yaml gets the YAML document (it got JSON);
    ?format still decides when given, and a tie, no header or an Accept
    naming neither type stays JSON."""
    path = '/v2/exports/resourceslices'
    with api_fixture.api_service() as service:
        api_fixture.seed_device(service.engine, 'compute-a', 'compute-a_gpu',
                                device_type='GPU', vendor='10de', handles=1)

        def get(query='', accept=None):
            headers = dict(MANAGER)
            if accept is not None:
                headers['Accept'] = accept
            response = webob.Request.blank(
                path + query, headers=headers).get_response(service.app)
            assert response.status_int == 200, response.text
            return response.content_type

        assert get(accept='application/yaml') == 'application/yaml'
        assert get(accept='application/json;q=0.5, application/yaml') \
            == 'application/yaml'
        assert get('?format=json', 'application/yaml') == 'application/json'
        assert get('?format=yaml', 'application/json') == 'application/yaml'
        for accept in (None, '*/*', 'application/json, application/yaml',
                       'text/html'):
            assert get(accept=accept) == 'application/json', accept
