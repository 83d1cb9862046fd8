"""``objects.base.to_dict``: what an object class sends over RPC."""

import dataclasses
import datetime

from cyborg.objects import accelerator_requests
from cyborg.objects import base
from cyborg.objects import deployables


def _arq():
    return accelerator_requests.AcceleratorRequest(
        uuid='8b4c7f8e-0000-4000-8000-000000000001', state='Bound',
        device_profile_name='gpu', device_profile_group_id=0,
        project_id='p1', hostname='compute1',
        device_rp_uuid='8b4c7f8e-0000-4000-8000-000000000002',
        instance_uuid='8b4c7f8e-0000-4000-8000-000000000003',
        attach_handle_type='PCI', attach_handle_uuid=None,
        attach_handle_info={'bus': '0c', 'device': '00', 'function': '1'},
        created_at=datetime.datetime(2026, 11, 29, 6, 0, 0),
        updated_at=None, device_health='OK')


def _deployable():
    return deployables.Deployable(
        id=1, uuid='8b4c7f8e-0000-4000-8000-000000000004', parent_id=None,
        root_id=None, name='fpga0', num_accelerators=1, device_id=2,
        driver_name='fake', rp_uuid=None, bitstream_id=None,
        created_at=datetime.datetime(2026, 11, 29), updated_at=None,
        attributes=[('rc', 'FPGA'), ('trait_0', 'CUSTOM_A')])


def test_to_dict_gives_what_asdict_gives_for_the_object_classes():
    for obj in (_arq(), _deployable()):
        assert base.to_dict(obj) == dataclasses.asdict(obj)


def test_to_dict_is_a_new_dict_of_the_fields():
    arq = _arq()
    sent = base.to_dict(arq)
    sent['state'] = 'Deleting'
    assert arq.state == 'Bound'
    assert list(sent) == [f.name for f in dataclasses.fields(arq)]


@dataclasses.dataclass
class _Inner:
    key: str
    values: list


@dataclasses.dataclass
class _Outer:
    name: str
    inner: _Inner = None


def test_a_field_declared_as_a_data_class_is_sent_as_a_dict():
    outer = _Outer('a', _Inner('k', [1, 2]))
    assert base.to_dict(outer) == {'name': 'a',
                                   'inner': {'key': 'k', 'values': [1, 2]}}
    assert base.to_dict(_Outer('b')) == {'name': 'b', 'inner': None}
