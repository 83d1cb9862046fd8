import json
import os
import re

import pytest

from cyborg.common import exception
from cyborg.drivers import loader
from tests.fixtures.disks import full_disk  # noqa: F401


# What the tool is given for the bitstream: the privileged helper's open
# file (never the name, which the agent could swap meanwhile).
BY_DESCRIPTOR = r'/proc/self/fd/\d+'


def _ran(fake_tools):
    """The fake tools' command lines, the bitstream argument checked and
    replaced by what the tool read through it."""
    lines = []
    for line in fake_tools.read_text().splitlines():
        *argv, image = line.split()
        assert re.fullmatch(BY_DESCRIPTOR, image), line
        lines.append(argv)
    return lines, fake_tools.with_name(fake_tools.name + '.read'
                                       ).read_bytes()


def _load(conf, name):
    return loader.load_driver(conf, 'h', name)


def _image(conf, name='gbs'):
    """A bitstream file where the agent writes them (the state directory:
    the one place the privileged helper takes one from)."""
    os.makedirs(conf.state_path, exist_ok=True)
    path = os.path.join(conf.state_path, name)
    with open(path, 'wb') as f:
        f.write(b'bits')
    return path


def _fails(fake_tools, tool):
    """Make the fake ``tool`` fail (exit status 3) as a real one would on
    a bad bitstream, after logging its run."""
    script = fake_tools.parent / 'bin' / tool
    script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {fake_tools}\n'
                      'exit 3\n')


def test_intel_program_runs_fpgaconf_on_the_pf(conf, scenario, tmp_path,
                                               in_process_privsep,
                                               fake_tools):
    scenario('intel_fpga')
    image = _image(conf)
    _load(conf, 'intel_fpga_driver').program('0000:d8:00.0', image, 'img')
    assert _ran(fake_tools) == ([[
        'fpgaconf', '--segment', '0x0000', '--bus', '0xd8', '--device',
        '0x00', '--function', '0x0']], b'bits')


def test_xilinx_program_targets_the_user_function(conf, scenario, tmp_path,
                                                  in_process_privsep,
                                                  fake_tools):
    scenario('mixed')
    image = _image(conf, 'k.xclbin')
    _load(conf, 'xilinx_fpga_driver').program('0000:d8:00.0', image, 'img')
    assert _ran(fake_tools) == ([[
        'xbutil', 'program', '--device', '0000:d8:00.1', '--user']], b'bits')


def test_program_refuses_an_address_that_is_not_its_fpga(
        conf, scenario, tmp_path, in_process_privsep, fake_tools):
    scenario('mixed')
    with pytest.raises(exception.ResourceNotFound, match='0000:3b:00.0'):
        _load(conf, 'inspur_fpga_driver').program('0000:3b:00.0', 'x', 'i')
    assert not fake_tools.exists()


def test_tool_failure_is_a_clear_error(conf, scenario, in_process_privsep,
                                       fake_tools):
    scenario('mixed')
    _fails(fake_tools, 'fpgaconf')
    with pytest.raises(exception.FPGAToolFailed, match='fpgaconf failed'):
        _load(conf, 'inspur_fpga_driver').program('0000:da:00.0',
                                                  _image(conf), 'i')


def test_a_tool_that_fails_leaves_the_image_unknown(
        conf, scenario, tmp_path, in_process_privsep, fake_tools):
    """The tool ran and failed: it may have written part of the card, so
    the image programmed before is no longer reported as loaded."""
    scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    image = _image(conf)
    driver.program('0000:d8:00.0', image, 'img-1')
    _fails(fake_tools, 'fpgaconf')
    with pytest.raises(exception.FPGAToolFailed):
        driver.program('0000:d8:00.0', image, 'img-2')
    assert {dep.name: dep.bitstream_id for dev in driver.discover()
            for dep in dev.deployables}['h_0000:d8:00.0'] is None


@pytest.mark.parametrize('broken', ['missing', 'cannot start', 'bad file'])
def test_a_tool_that_never_ran_leaves_the_image_recorded(
        conf, scenario, tmp_path, in_process_privsep, fake_tools, broken):
    """The privileged helper refused before the tool ran (no tool in its
    directories, one that cannot be started, a bitstream it does not
    take): the card was never touched, yet the record, cleared before the
    tool was looked for, said the image was unknown, and the next report
    made the conductor forget the image the card still runs."""
    scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    image = _image(conf)
    driver.program('0000:d8:00.0', image, 'img-1')
    refusal = exception.NotFound
    if broken == 'missing':
        conf.set_override('fpga_tool_dirs', [str(tmp_path / 'none')],
                          group='cyborg_sys_admin')
    elif broken == 'cannot start':
        (tmp_path / 'bin' / 'fpgaconf').write_text('#!/nonexistent/sh\n')
        refusal = exception.Conflict
    else:
        image = os.path.join(conf.state_path, '..', 'elsewhere.bin')
        refusal = exception.Invalid
    with pytest.raises(refusal, match='not touched|bitstream'):
        driver.program('0000:d8:00.0', image, 'img-2')
    assert _reported(driver)['h_0000:d8:00.0'] == 'img-1'
    # On disk too: what a restarted agent reports.
    assert _reported(_load(conf, 'intel_fpga_driver'))[
        'h_0000:d8:00.0'] == 'img-1'


def test_privileged_tool_runner_only_runs_fpga_tools(conf, scenario,
                                                     in_process_privsep):
    scenario('intel_fpga')
    with pytest.raises(exception.Invalid):
        in_process_privsep.run_fpga_tool('rm', '0000:d8:00.0', _image(conf))


def test_programmed_image_is_reported_until_the_card_changes(
        conf, scenario, tmp_path, in_process_privsep, fake_tools):
    tree = scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    image = _image(conf)

    def bitstreams():
        return {dep.name: dep.bitstream_id for dev in driver.discover()
                for dep in dev.deployables}

    assert set(bitstreams().values()) == {None}
    driver.program('0000:d8:00.0', image, 'img-1')
    assert bitstreams() == {'h_0000:5e:00.1': None, 'h_0000:d8:00.0': 'img-1'}
    # Survives an agent restart (a new driver instance).
    assert _load(conf, 'intel_fpga_driver').discover()[1] \
        .deployables[0].bitstream_id == 'img-1'
    # Reprogrammed by hand: the loaded function is no longer known.
    tree.add_fpga_region('0000:d8:00.0', 'region3',
                         afu_id='00000000000000000000000000000001')
    assert bitstreams()['h_0000:d8:00.0'] is None


def test_two_cards_recorded_at_once_keep_both_records(conf, tmp_path,
                                                      monkeypatch):
    """The agent programs two cards of one driver at once (one RPC thread
    each): both read the record file, and the later write dropped the
    other card's image (or both wrote one temporary file)."""
    import threading

    from cyborg.drivers import fpga

    conf.set_override('state_path', str(tmp_path))
    record = fpga.BitstreamRecord(conf, 'intel_fpga_driver', 'h')
    together = threading.Barrier(2, timeout=0.5)
    load = fpga.BitstreamRecord.load

    def load_together(self):
        records = load(self)
        try:
            together.wait()     # both have read before either writes
        except threading.BrokenBarrierError:
            pass                # the other one cannot read yet
        return records

    monkeypatch.setattr(fpga.BitstreamRecord, 'load', load_together)
    threads = [threading.Thread(target=record.save,
                                args=(address, image, ['']))
               for address, image in (('0000:d8:00.0', 'img-1'),
                                      ('0000:d9:00.0', 'img-2'))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert {address: entry['image_uuid']
            for address, entry in load(record).items()} == {
        '0000:d8:00.0': 'img-1', '0000:d9:00.0': 'img-2'}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        'fpga-intel_fpga_driver-h.json']


def test_a_programming_whose_record_cannot_be_written_still_succeeds(
        conf, scenario, tmp_path, in_process_privsep, fake_tools,
        monkeypatch):
    """The tool wrote the card; recording it failed (a full disk): the
    programming is a success (the card runs the image, and the conductor
    records it), and reports say so from memory, never the image before.
    It raised, which the conductor took for a refusal before the tool
    ran: the card as it was."""
    from cyborg.drivers import fpga

    scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    image = _image(conf)
    driver.program('0000:d8:00.0', image, 'img-1')

    def save_on_a_full_disk(self, *args):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(fpga.BitstreamRecord, 'save', save_on_a_full_disk)
    driver.program('0000:d8:00.0', image, 'img-2')
    assert {dep.name: dep.bitstream_id for dev in driver.discover()
            for dep in dev.deployables}['h_0000:d8:00.0'] == 'img-2'


def _reported(driver):
    return {dep.name: dep.bitstream_id for dev in driver.discover()
            for dep in dev.deployables}


def test_the_record_is_gone_from_disk_while_the_tool_runs(
        conf, scenario, in_process_privsep, fake_tools):
    """An agent killed while the tool writes the card (or whose host
    loses power) found, once restarted, the image of before recorded,
    and reported it as loaded: the record was changed only once the tool
    had ended.  What is on disk while the tool runs must name no image;
    the new one is recorded once the tool succeeded."""
    scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    image = _image(conf)
    driver.program('0000:d8:00.0', image, 'img-1')
    record = driver._record().path
    during = fake_tools.parent / 'record-during-tool.json'
    script = fake_tools.parent / 'bin' / 'fpgaconf'
    script.write_text(f'#!/bin/sh\ncp {record} {during}\n')
    driver.program('0000:d8:00.0', image, 'img-2')
    assert '0000:d8:00.0' not in json.loads(during.read_text())
    # What a restarted agent reads from it.
    os.replace(record, fake_tools.parent / 'after.json')
    os.replace(during, record)
    assert _reported(_load(conf, 'intel_fpga_driver'))[
        'h_0000:d8:00.0'] is None
    os.replace(fake_tools.parent / 'after.json', record)
    assert _reported(_load(conf, 'intel_fpga_driver'))[
        'h_0000:d8:00.0'] == 'img-2'


def test_a_privileged_helper_that_dies_leaves_the_image_unknown(
        conf, scenario, in_process_privsep, fake_tools, monkeypatch):
    """The privsep daemon died while the tool ran (oslo.privsep's client
    raises OSError 'Premature eof'): the record, cleared only on the
    tool's own failure, still named the image of before."""
    from cyborg.agent import privileged

    scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    image = _image(conf)
    driver.program('0000:d8:00.0', image, 'img-1')

    def dies(tool, address, image_path):
        raise OSError('Premature eof waiting for privileged process')

    monkeypatch.setattr(privileged, 'run_fpga_tool', dies)
    with pytest.raises(OSError, match='Premature eof'):
        driver.program('0000:d8:00.0', image, 'img-2')
    assert _reported(driver)['h_0000:d8:00.0'] is None
    assert _reported(_load(conf, 'intel_fpga_driver'))[
        'h_0000:d8:00.0'] is None


def test_a_record_that_cannot_be_cleared_programs_nothing(
        conf, scenario, in_process_privsep, fake_tools,
        full_disk):  # noqa: F811
    """Without the record cleared on disk, a tool that then failed or an
    agent killed mid-write would leave the image of before reported: the
    agent refuses (the conductor's "nothing ran": the card as it was),
    the tool never runs, and the image is still reported."""
    scenario('intel_fpga')
    driver = _load(conf, 'intel_fpga_driver')
    image = _image(conf)
    driver.program('0000:d8:00.0', image, 'img-1')
    fake_tools.unlink()
    full_disk.fill('fpga-intel_fpga_driver-h.json.')
    with pytest.raises(exception.Conflict,
                       match='No space left.*card was not touched'):
        driver.program('0000:d8:00.0', image, 'img-2')
    full_disk.free()
    assert not fake_tools.exists()
    assert _reported(driver)['h_0000:d8:00.0'] == 'img-1'
    assert sorted(os.listdir(conf.state_path)) == [
        'fpga-ids-intel_fpga_driver-h.json', 'fpga-intel_fpga_driver-h.json',
        'gbs']
