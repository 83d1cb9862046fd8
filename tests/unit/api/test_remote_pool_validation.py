"""What ``POST /v2/remote_pools`` refuses before anything is written: a
standard resource class that is not an accelerator's (a sharing provider
of DISK_GB, VCPU or MEMORY_MB would serve every flavor's own disk, CPU
or memory), and a handle uuid given twice (a 400, not the 409 of a
handle uuid already taken)."""

import json
import uuid as uuidlib

import pytest
import webob

from cyborg.db.api import remote_pools as pool_db
from cyborg.common import context as cyborg_context
from tests.fixtures import api as api_fixture
from tests.fixtures import databases

ADMIN = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'p-admin',
         'X-User-Id': 'u1', 'OpenStack-API-Version': 'accelerator 2.8'}
AGGREGATE = '5b3f1c2d-7e8a-4b9c-8d0e-1f2a3b4c5d6e'


def _post(service, body):
    req = webob.Request.blank('/v2/remote_pools', method='POST',
                              headers=ADMIN)
    req.body = json.dumps(body).encode()
    req.content_type = 'application/json'
    resp = req.get_response(service.app)
    return resp.status_int, resp.text


def _pool(name, resource_class, handles):
    return {'name': name, 'resource_class': resource_class,
            'aggregates': [AGGREGATE], 'fabric_driver': 'fake',
            'handles': handles}


@pytest.mark.parametrize('resource_class', ['DISK_GB', 'VCPU', 'MEMORY_MB',
                                            'PCI_DEVICE', 'SRIOV_NET_VF'])
def test_a_standard_class_not_an_accelerators_is_refused(resource_class):
    with api_fixture.api_service() as service:
        status, text = _post(service, _pool('std', resource_class,
                                            [{'fabric_address': 'a'}]))
        assert status == 400, text
        assert 'resource_class' in text and 'CUSTOM_' in text
        assert pool_db.get_all(cyborg_context.get_admin_context()) == []


def test_the_accelerator_classes_are_accepted_by_the_schema():
    from cyborg.api import schemas
    from cyborg.api.schemas import remote_pools as schema

    for resource_class in ('FPGA', 'PGPU', 'VGPU', 'CUSTOM_REMOTE_NVME'):
        assert schemas.first_error(
            _pool('ok', resource_class, [{'fabric_address': 'a'}]),
            schema.CREATE) is None
    assert schemas.first_error(
        _pool('no', 'DISK_GB', [{'fabric_address': 'a'}]),
        schema.CREATE).startswith('resource_class: ')


@pytest.mark.parametrize('kind', databases.KINDS)
def test_a_handle_uuid_given_twice_is_a_400(kind):
    handle = str(uuidlib.uuid4())
    with api_fixture.api_service(db_kind=kind) as service:
        # Spelled two ways: the same uuid once stored.
        status, text = _post(service, _pool('dup', 'CUSTOM_REMOTE_GPU', [
            {'fabric_address': 'a', 'uuid': handle},
            {'fabric_address': 'b', 'uuid': handle.upper()}]))
        assert status == 400, text
        assert f'uuid {handle} is given twice' in text
        assert pool_db.get_all(cyborg_context.get_admin_context()) == []
