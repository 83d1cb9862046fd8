"""Agent endpoints on fake sysfs trees, privileged calls in-process."""

import base64
import contextlib
import concurrent.futures
import hashlib
import os
import re
import threading
import uuid

import oslo_messaging as messaging
import pytest

from cyborg.agent import manager as agent_manager
from cyborg.agent import reporter as agent_reporter
from cyborg.common import exception
from cyborg.drivers import base
from cyborg.drivers import loader
from tests.fixtures import privsep as fake_privsep
from tests.fixtures import sysfs as fake_sysfs


class _Requests:
    """What the manager asked of the real (not started) reporter."""

    def __init__(self, reporter):
        self._reporter = reporter

    @property
    def reports(self):
        return int(self._reporter._wake.is_set())

    @property
    def full(self):
        return int(self._reporter._full_requested)


@pytest.fixture
def privsep_in_process(conf):
    with fake_privsep.in_process(conf):
        yield


@contextlib.contextmanager
def _refused(error_type, match=''):
    """The endpoint answers with ``error_type`` (a 4xx): an expected
    answer, sent back as it is, which oslo.messaging logs no traceback
    for."""
    with pytest.raises(messaging.ExpectedException) as caught:
        yield
    error = caught.value.exc_info[1]
    assert isinstance(error, error_type), error
    assert re.search(match, str(error)), error


def _manager(conf, tmp_path, scenario='vgpu'):
    root = tmp_path / 'sys'
    tree, options = fake_sysfs.build(scenario, root)
    options['enabled_drivers'] = options['enabled_drivers'] + ['fake_driver']
    fake_sysfs.apply_options(conf, options, root, tmp_path / 'state')
    drivers = loader.load_drivers(conf, 'h')
    # Never started: the test reads the triggers it received.
    reporter = agent_reporter.Reporter(conf, 'h', drivers,
                                       conductor_api=object())
    manager = agent_manager.AgentManager(conf, 'h', reporter=reporter,
                                         drivers=drivers)
    return manager, tree, _Requests(reporter)


def test_create_vgpu_mdev_writes_the_type_create_file(
        conf, tmp_path, privsep_in_process, admin_context):
    manager, tree, requests = _manager(conf, tmp_path)
    mdev = str(uuid.uuid4())
    assert manager.create_vgpu_mdev(admin_context, '0000:c1:00.0',
                                    'nvidia-223', mdev)
    create = os.path.join(tree.device_path('0000:c1:00.0'),
                          'mdev_supported_types', 'nvidia-223', 'create')
    with open(create) as f:
        assert f.read() == mdev
    assert requests.reports == 1


def test_create_existing_mdev_is_a_success_without_writing(
        conf, tmp_path, privsep_in_process, admin_context):
    manager, _tree, requests = _manager(conf, tmp_path)
    assert manager.create_vgpu_mdev(admin_context, '0000:41:00.0',
                                    'nvidia-223', fake_sysfs.MDEV_C)
    assert requests.reports == 0


def test_create_unknown_type_or_bad_uuid_is_refused(
        conf, tmp_path, privsep_in_process, admin_context):
    manager, _tree, _ = _manager(conf, tmp_path)
    with _refused(exception.NotFound, 'nvidia-999'):
        manager.create_vgpu_mdev(admin_context, '0000:c1:00.0', 'nvidia-999',
                                 str(uuid.uuid4()))
    with _refused(exception.Invalid):
        manager.create_vgpu_mdev(admin_context, '0000:c1:00.0',
                                 '../../../etc', str(uuid.uuid4()))


def test_remove_vgpu_mdev_writes_remove_and_is_idempotent(
        conf, tmp_path, privsep_in_process, admin_context):
    manager, tree, requests = _manager(conf, tmp_path)
    assert manager.remove_vgpu_mdev(admin_context, '0000:41:00.0',
                                    fake_sysfs.MDEV_C)
    with open(os.path.join(tree.device_path('0000:41:00.0'),
                           fake_sysfs.MDEV_C, 'remove')) as f:
        assert f.read() == '1'
    assert requests.reports == 1
    assert manager.remove_vgpu_mdev(admin_context, '0000:41:00.0',
                                    str(uuid.uuid4()))
    assert requests.reports == 1


def test_fpga_program_inline_data_on_the_fake_driver(conf, tmp_path,
                                                     admin_context):
    manager, _tree, requests = _manager(conf, tmp_path)
    data = b'\x00bitstream'
    bitstream = {'image_uuid': 'img-7',
                 'data': base64.b64encode(data).decode(),
                 'checksum': hashlib.md5(data).hexdigest()}
    assert manager.fpga_program(admin_context, '0000:0c:00.0', bitstream,
                                'fake_driver') is True
    [device] = manager.drivers['fake_driver'].discover()
    assert device.deployables[0].bitstream_id == 'img-7'
    assert requests.reports == 1


@pytest.mark.parametrize('bitstream, driver, error', [
    ({'image_uuid': 'i', 'data': 'AAAA', 'checksum': '0' * 32},
     'fake_driver', 'checksum'),
    ({'image_uuid': 'i', 'data': '***'}, 'fake_driver', 'base64'),
    ({'image_uuid': 'i'}, 'fake_driver', 'neither data'),
    ({'data': 'AAAA'}, 'fake_driver', 'image_uuid'),
    ({'image_uuid': 'i', 'data': 'AAAA'}, 'nvidia_gpu_driver', 'cannot'),
    ({'image_uuid': 'i', 'data': 'AAAA'}, 'nope', 'nope'),
])
def test_fpga_program_bad_requests(conf, tmp_path, admin_context, bitstream,
                                   driver, error):
    manager, _tree, requests = _manager(conf, tmp_path)
    with _refused(exception.CyborgException, error):
        manager.fpga_program(admin_context, '0000:0c:00.0', bitstream,
                             driver)
    assert requests.reports == 0
    assert manager.drivers['fake_driver'].discover()[0].deployables[0] \
        .bitstream_id is None


def test_request_report_asks_for_a_full_one(conf, tmp_path, admin_context):
    manager, _tree, requests = _manager(conf, tmp_path)
    manager.request_report(admin_context)
    assert requests.full == 1


def test_inline_bitstream_goes_under_the_state_path_only(conf, tmp_path,
                                                         admin_context):
    manager, _tree, _requests = _manager(conf, tmp_path)
    driver = manager.drivers['fake_driver']
    seen = []
    program = driver.program

    def observing(controlpath_id, image_path, image_uuid):
        seen.append((image_path, os.path.exists(image_path)))
        return program(controlpath_id, image_path, image_uuid)

    driver.program = observing
    data = b'\x00bitstream'
    manager.fpga_program(admin_context, '0000:0c:00.0',
                         {'image_uuid': 'img-8',
                          'data': base64.b64encode(data).decode()},
                         'fake_driver')
    [(path, existed)] = seen
    assert existed
    assert os.path.dirname(path) == conf.state_path
    assert not os.path.exists(path)


class _SlowFPGA(base.Programmable):
    """An FPGA whose programming takes until the test lets it end (a
    vendor tool can take minutes, or hang)."""

    def __init__(self):
        self.running = threading.Event()
        self.finish = threading.Event()
        self.programmed = []

    def program(self, controlpath_id, image_path, image_uuid):
        self.running.set()
        assert self.finish.wait(30)
        self.programmed.append((controlpath_id, image_uuid))


def test_an_fpga_being_programmed_is_not_programmed_again_meanwhile(
        conf, tmp_path, admin_context):
    """The conductor gives up on a programming that outlives the bind's
    time (and may try another); the agent never runs a second tool on the
    same card meanwhile: it answers 409 at once.  Another card, or the
    same one afterwards, is programmed as usual."""
    manager, _tree, _requests = _manager(conf, tmp_path)
    fpga = _SlowFPGA()
    manager.drivers['slow'] = fpga
    data = b'bits'
    bitstream = {'image_uuid': 'img-1',
                 'data': base64.b64encode(data).decode()}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(manager.fpga_program, admin_context,
                            '0000:5e:00.0', bitstream, 'slow')
        assert fpga.running.wait(10)
        with _refused(exception.Conflict,
                      '0000:5e:00.0 is being programmed'):
            manager.fpga_program(admin_context, '0000:5e:00.0',
                                 dict(bitstream, image_uuid='img-2'), 'slow')
        other = pool.submit(manager.fpga_program, admin_context,
                            '0000:5f:00.0', bitstream, 'slow')
        fpga.finish.set()
        assert first.result(10) is True and other.result(10) is True
    assert manager.fpga_program(admin_context, '0000:5e:00.0',
                                dict(bitstream, image_uuid='img-3'), 'slow')
    assert sorted(fpga.programmed) == [('0000:5e:00.0', 'img-1'),
                                       ('0000:5e:00.0', 'img-3'),
                                       ('0000:5f:00.0', 'img-1')]


class _BrokenFPGA(base.Programmable):
    def program(self, controlpath_id, image_path, image_uuid):
        raise exception.CyborgException(
            message='FPGA programming with fpgaconf failed: exit status 3')


def test_a_failure_stays_loud(conf, tmp_path, admin_context):
    """A failure on the host (the vendor tool failing: a 500) is not an
    answer: oslo.messaging logs its traceback, and the conductor gets it
    all the same."""
    manager, _tree, _requests = _manager(conf, tmp_path)
    manager.drivers['broken'] = _BrokenFPGA()
    bitstream = {'image_uuid': 'img-1',
                 'data': base64.b64encode(b'bits').decode()}
    with pytest.raises(exception.CyborgException, match='exit status 3'):
        manager.fpga_program(admin_context, '0000:5e:00.0', bitstream,
                             'broken')


def test_bitstream_files_left_by_a_stopped_agent_are_removed_at_start(
        conf, tmp_path):
    """An agent stopped mid-programming (restarted to end a hung tool)
    left its bitstream file, the size of an image, in the state directory
    for good; the next agent removes such files before it serves."""
    conf.set_override('state_path', str(tmp_path))
    left = tmp_path / 'cyborg-bitstream-abc123.bin'
    left.write_bytes(b'\0' * 1024)
    kept = tmp_path / 'agent-host.json'
    kept.write_text('{}')
    agent_manager.AgentManager(conf, 'host')
    assert not left.exists() and kept.exists()
