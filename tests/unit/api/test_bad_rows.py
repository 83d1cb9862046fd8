"""A bad row never makes a list call fail for everyone (deliberate
difference 8): an attach handle whose info is not JSON shows as {}."""

import json

from sqlalchemy import orm

from cyborg.db import models
from cyborg.objects.accelerator_requests import AcceleratorRequest
from tests.fixtures import api as api_fixture


def test_arq_with_a_corrupt_handle_info_still_lists(db, admin_context):
    seeded = api_fixture.seed_device(db, 'host1', 'host1_FakeDevice',
                                     handles=2)
    with orm.Session(db) as session, session.begin():
        profile = models.DeviceProfile(uuid='p-uuid', name='dp',
                                       profile_json=json.dumps([{}]))
        session.add(profile)
        handles = session.query(models.AttachHandle).order_by(
            models.AttachHandle.id).all()
        handles[0].attach_info = '{not json'
        session.flush()
        for index, handle in enumerate(handles):
            session.add(models.ExtARQ(
                uuid='arq-%d' % index, state='Bound',
                device_profile_id=profile.id, device_profile_group_id=0,
                project_id='p1', hostname='host1',
                deployable_id=seeded['deployable_id'],
                attach_handle_id=handle.id))
    arqs = AcceleratorRequest.list(admin_context)
    assert [a.attach_handle_info for a in arqs] == [
        {}, {'domain': '0000', 'bus': '0c', 'device': '01', 'function': '0'}]
    assert [a.attach_handle_type for a in arqs] == ['PCI', 'PCI']
