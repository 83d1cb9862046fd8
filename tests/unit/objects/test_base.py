"""``objects.base.to_dict``: what an object class sends over RPC."""

import dataclasses
import datetime
import importlib
import pkgutil
import typing

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


def _object_classes():
    import cyborg.objects
    for info in pkgutil.iter_modules(cyborg.objects.__path__):
        module = importlib.import_module(f'cyborg.objects.{info.name}')
        for value in vars(module).values():
            if (dataclasses.is_dataclass(value) and isinstance(value, type)
                    and value.__module__ == module.__name__):
                yield value


def _holds_a_data_class(annotation):
    return ((isinstance(annotation, type)
             and dataclasses.is_dataclass(annotation))
            or any(_holds_a_data_class(a)
                   for a in typing.get_args(annotation)))


def test_no_object_class_sent_by_to_dict_declares_a_data_class_field():
    """What to_dict relies on: one level is the whole object.  A class
    with a ``to_dict`` of its own (the agent's nested reports) is sent
    by that instead."""
    classes = [cls for cls in _object_classes()
               if not hasattr(cls, 'to_dict')]
    assert accelerator_requests.AcceleratorRequest in classes
    assert deployables.Deployable in classes
    nested = [(cls.__name__, f.name) for cls in classes
              for f in dataclasses.fields(cls)
              if _holds_a_data_class(f.type)]
    assert nested == []
