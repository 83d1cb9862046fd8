"""The agent's on-disk record of the last acknowledged report: a record
that cannot be read is no record, never an error."""

import errno
import json

import pytest

from cyborg.agent import cache as agent_cache
from cyborg.objects import inventory
from tests.fixtures.disks import full_disk  # noqa: F401

HOST = 'compute-1'


def _device():
    return inventory.DriverDevice(
        type='FPGA', vendor='abcd', model='fake',
        controlpath_id=inventory.ControlPathID('0000:0c:00.0'))


# The digests the reporter saves: each that of the devices saved with it.
NONE = inventory.inventory_digest([])
ONE = inventory.inventory_digest([_device()])


def test_a_saved_record_is_loaded(tmp_path):
    cache = agent_cache.ReportCache(str(tmp_path / 'agent.json'), HOST)
    assert cache.load() == (None, None)
    cache.save(ONE, [_device()])
    assert cache.load() == (ONE, [_device()])
    assert [p.name for p in tmp_path.iterdir()] == ['agent.json']


@pytest.mark.parametrize('text', [
    'null', '[]', '"agent"', '3', '{"hostname": "compute-1"',
    '{"hostname": "compute-1", "digest": "%s", "devices": 3}' % NONE,
    '{"hostname": "compute-1", "digest": "%s", "devices": [null]}' % NONE,
    '{"hostname": "compute-1", "devices": []}',
    # Nested deeper than the JSON parser goes (RecursionError).
    '[' * 100000])
def test_a_record_that_is_not_one_is_no_record(tmp_path, text):
    path = tmp_path / 'agent.json'
    path.write_text(text)
    assert agent_cache.ReportCache(str(path), HOST).load() == (None, None)


@pytest.mark.parametrize('digest', [
    12345, None, '', 'x' * 65, NONE.upper(), NONE, ONE[:-1]])
def test_a_record_whose_digest_is_not_its_devices_is_no_record(tmp_path,
                                                              digest):
    """The digest is the next delta's base: one the conductor refuses as
    a whole (not a string, empty, too long) made it refuse every report
    of the host, for ever.  A saved digest is always the digest of the
    devices saved with it; anything else is no record."""
    path = tmp_path / 'agent.json'
    cache = agent_cache.ReportCache(str(path), HOST)
    cache.save(ONE, [_device()])
    record = json.loads(path.read_text())
    record['digest'] = digest
    path.write_text(json.dumps(record))
    assert cache.load() == (None, None)


def test_an_unreadable_record_is_no_record_said_once(tmp_path, caplog):
    """A record the agent may not read (a directory in its place here;
    permissions do not stop the root these tests may run as) makes a full
    report follow, with one warning however many reports read it."""
    caplog.set_level('WARNING', logger='cyborg.agent.cache')
    path = tmp_path / 'agent.json'
    path.mkdir()
    cache = agent_cache.ReportCache(str(path), HOST)
    for _ in range(3):
        assert cache.load() == (None, None)
    assert len(caplog.records) == 1
    assert 'Ignoring unreadable agent cache' in caplog.records[0].message
    # Said again once it was readable and broke anew.
    path.rmdir()
    path.write_text(json.dumps({'hostname': HOST, 'digest': NONE,
                                'devices': []}))
    assert cache.load() == (NONE, [])
    path.write_text('null')
    assert cache.load() == (None, None)
    assert len(caplog.records) == 2


def test_another_hosts_record_is_ignored_said_once(tmp_path, caplog):
    """A record of another host (a state directory copied from another
    compute node, a host renamed) is not this host's, and is replaced by
    this host's at the next acknowledged report: said once, naming both
    hosts, not silently."""
    caplog.set_level('WARNING', logger='cyborg.agent.cache')
    path = tmp_path / 'agent.json'
    agent_cache.ReportCache(str(path), 'compute-2').save(ONE, [_device()])
    cache = agent_cache.ReportCache(str(path), HOST)
    for _ in range(3):
        assert cache.load() == (None, None)
    [record] = caplog.records
    assert record.levelname == 'WARNING'
    assert "host 'compute-2', not of this host 'compute-1'" in \
        record.getMessage()


def test_a_failed_save_leaves_the_old_record(
        tmp_path, full_disk):  # noqa: F811
    path = tmp_path / 'agent.json'
    cache = agent_cache.ReportCache(str(path), HOST)
    cache.save(NONE, [])
    # The record cannot be replaced: its temporary file is on a full disk.
    full_disk.fill('agent.json.tmp-')
    with pytest.raises(OSError) as raised:
        cache.save(ONE, [_device()])
    assert raised.value.errno == errno.ENOSPC
    assert cache.load() == (NONE, [])
    assert [p.name for p in tmp_path.iterdir()] == ['agent.json']


def test_the_directory_of_the_record_is_made(tmp_path):
    path = tmp_path / 'state' / 'agent.json'
    agent_cache.ReportCache(str(path), HOST).save(ONE, [_device()])
    assert agent_cache.ReportCache(str(path), HOST).load() == (
        ONE, [_device()])


def test_temporary_files_left_by_a_killed_agent_are_removed(tmp_path,
                                                            caplog):
    """An agent killed in the middle of a save left its temporary file
    next to the record, for ever (one more at each such death): the next
    agent removes those of its record, named as this agent's writes name
    them or as the agents before did (``.tmp.<pid>``), and nothing else:
    not the record, not another record's, not an operator's copy, not a
    directory."""
    caplog.set_level('INFO', logger='cyborg.common.files')
    path = tmp_path / 'agent.json'
    agent_cache.ReportCache(str(path), HOST).save(ONE, [_device()])
    left = ['agent.json.tmp.4242', 'agent.json.tmp-k3_x9q0z']
    kept = ['agent.json.orig', 'agent.json.original', 'agent.json.tmp.',
            'agent.json.tmp.42x', 'agent.json.tmp-k3_x9q0zz',
            'agent.json.tmp-K3_X9Q0Z', 'agent.json.k3_x9q0z',
            'other-agent.json.tmp-k3_x9q0z', 'xagent.json.tmp.4242',
            'agent.jsonXtmp-k3_x9q0z', 'health-h.json.tmp-k3_x9q0z']
    for name in left + kept:
        (tmp_path / name).write_text('{"hostname": "comp')
    (tmp_path / 'agent.json.dir_x9q0').mkdir()
    cache = agent_cache.ReportCache(str(path), HOST)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ['agent.json', 'agent.json.dir_x9q0'] + kept)
    assert cache.load() == (ONE, [_device()])
    [record] = [r for r in caplog.records
                if r.name == 'cyborg.common.files']
    assert record.levelname == 'INFO'
    assert ', '.join(sorted(left)) in record.getMessage()


def test_a_record_that_cannot_be_removed_is_left(tmp_path):
    path = tmp_path / 'agent.json'
    path.mkdir()
    agent_cache.ReportCache(str(path), HOST).clear()
    assert path.is_dir()
