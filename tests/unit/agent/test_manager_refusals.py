"""What the agent refuses before anything changes on the host, and how the
conductor reads it: an mdev of the asked uuid that is another one, a
bitstream that cannot be written (a full disk).  The real agent manager
on fake sysfs trees, privileged calls in process."""

import base64
import os
import uuid

import pytest

from cyborg.agent import manager as agent_manager
from cyborg.common import exception
from cyborg.conductor import programming
from cyborg.drivers import fake
from tests.fixtures import arqs as seed
from tests.fixtures import privsep as fake_privsep
from tests.fixtures import sysfs as fake_sysfs
from tests.unit.agent.test_manager import _manager, _refused
from tests.unit.conductor.test_programming import (  # noqa: F401
    HOST, OLD_TRAIT, _health, _provider, ctx, device, glance, pconf,
    placement_url)
from tests.fixtures.disks import full_disk  # noqa: F401


@pytest.fixture
def privsep_in_process(conf):
    with fake_privsep.in_process(conf):
        yield


def _create_file(tree, address, mdev_type):
    with open(os.path.join(tree.device_path(address),
                           'mdev_supported_types', mdev_type,
                           'create')) as f:
        return f.read()


@pytest.mark.parametrize('address, mdev_type, found', [
    ('0000:41:00.0', 'nvidia-222', 'of type nvidia-223 on 0000:41:00.0'),
    ('0000:c1:00.0', 'nvidia-223', 'of type nvidia-223 on 0000:41:00.0'),
])
def test_an_mdev_of_that_uuid_that_is_another_is_refused(
        conf, tmp_path, privsep_in_process, admin_context, address,
        mdev_type, found):
    """Any mdev of the uuid passed for the one asked: another type, on
    another GPU, and the instance got the wrong vGPU (or none)."""
    manager, tree, requests = _manager(conf, tmp_path)
    before = _create_file(tree, address, mdev_type)
    with _refused(exception.Conflict,
                  f'mdev {fake_sysfs.MDEV_C} exists already, {found}, not '
                  f'of type {mdev_type} on {address}'):
        manager.create_vgpu_mdev(admin_context, address, mdev_type,
                                 fake_sysfs.MDEV_C)
    assert _create_file(tree, address, mdev_type) == before
    assert requests.reports == 0


def _removed(tree, address, mdev_uuid):
    with open(os.path.join(tree.device_path(address), mdev_uuid,
                           'remove')) as f:
        return f.read() == '1'


@pytest.mark.parametrize('address, asked_type', [
    ('0000:c1:00.0', None), ('0000:c1:00.0', 'nvidia-223'),
    ('0000:41:00.0', 'nvidia-222')])
def test_an_mdev_of_another_gpu_is_not_removed(
        conf, tmp_path, privsep_in_process, admin_context, address,
        asked_type):
    """Removing took the uuid alone: a removal naming another GPU (or
    type) removed the vGPU of whichever instance had that uuid."""
    manager, tree, requests = _manager(conf, tmp_path)
    kwargs = {'asked_type': asked_type} if asked_type else {}
    with _refused(exception.Conflict,
                  f'mdev {fake_sysfs.MDEV_C} is of type nvidia-223 on '
                  f'0000:41:00.0, not .*on {address}; it was not removed'):
        manager.remove_vgpu_mdev(admin_context, address, fake_sysfs.MDEV_C,
                                 **kwargs)
    assert not _removed(tree, '0000:41:00.0', fake_sysfs.MDEV_C)
    assert requests.reports == 0
    assert manager.remove_vgpu_mdev(admin_context, '0000:41:00.0',
                                    fake_sysfs.MDEV_C,
                                    asked_type='nvidia-223')
    assert _removed(tree, '0000:41:00.0', fake_sysfs.MDEV_C)


def test_an_mdev_uuid_is_checked_before_it_is_looked_up(
        conf, tmp_path, privsep_in_process, admin_context):
    manager, _tree, _requests = _manager(conf, tmp_path)
    with _refused(exception.Invalid, 'bad mdev uuid'):
        manager.create_vgpu_mdev(admin_context, '0000:41:00.0', 'nvidia-223',
                                 f'../../../../devices/{uuid.uuid4()}')


class _Recording(fake.FakeDriver):
    def __init__(self, *args):
        super().__init__(*args)
        self.programmed = []

    def program(self, controlpath_id, image_path, image_uuid):
        with open(image_path, 'rb') as f:
            self.programmed.append((image_path, f.read()))
        return super().program(controlpath_id, image_path, image_uuid)


def test_a_bitstream_that_cannot_be_written_is_a_refusal(
        conf, tmp_path, admin_context, full_disk):  # noqa: F811
    """A full disk raised OSError: a failure (500), which the conductor
    takes for a tool that may have run, taking the card out."""
    full_disk.fill(agent_manager._BITSTREAM_PREFIX)
    manager, _tree, requests = _manager(conf, tmp_path)
    driver = manager.drivers['fake_driver'] = _Recording(conf, 'h')
    with _refused(exception.Conflict,
                  r'^Could not write the bitstream to .*state \(No space '
                  r'left on device\); the card was not touched$'):
        manager.fpga_program(admin_context, '0000:0c:00.0',
                             {'image_uuid': 'img-1',
                              'data': base64.b64encode(b'bits').decode()},
                             'fake_driver')
    assert driver.programmed == []
    assert requests.reports == 0
    assert not [n for n in os.listdir(conf.state_path)
                if n.startswith(agent_manager._BITSTREAM_PREFIX)]


def test_a_bitstream_named_by_path_is_copied_where_the_helper_takes_it(
        conf, tmp_path, admin_context):
    """The privileged helper takes bitstreams only from the state
    directory: one named by a path elsewhere on the host is copied
    there for the programming, and removed after."""
    manager, _tree, _requests = _manager(conf, tmp_path)
    driver = manager.drivers['fake_driver'] = _Recording(conf, 'h')
    elsewhere = tmp_path / 'image.bin'
    elsewhere.write_bytes(b'bits')
    assert manager.fpga_program(admin_context, '0000:0c:00.0',
                                {'image_uuid': 'img-1',
                                 'path': str(elsewhere)}, 'fake_driver')
    [(path, data)] = driver.programmed
    assert (os.path.dirname(path), data) == (conf.state_path, b'bits')
    assert not os.path.exists(path)


def test_the_conductor_reads_a_full_agent_disk_as_nothing_ran(
        pconf, ctx, db, device, glance, full_disk):  # noqa: F811
    """The card is as it was: no unknown outcome, not taken out, its
    function trait kept."""
    full_disk.fill(agent_manager._BITSTREAM_PREFIX)
    driver = _Recording(pconf, HOST)
    with seed.agent_endpoint(pconf, HOST, {'fake_driver': driver}):
        image = glance.add_image(b'written' * 10)
        with pytest.raises(exception.Conflict,
                           match='the card was not touched') as caught:
            programming.program_deployable(pconf, ctx,
                                           device.deployable_uuid, image)
    assert not isinstance(caught.value, exception.ProgrammingOutcomeUnknown)
    assert driver.programmed == []
    assert _health(db, device)[0] != 'unhealthy'
    reserved, traits = _provider(pconf, device.rp_uuid)
    assert reserved == 0 and OLD_TRAIT in traits
