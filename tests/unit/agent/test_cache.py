"""The agent's on-disk record of the last acknowledged report: a record
that cannot be read is no record, never an error."""

import json
import os

import pytest

from cyborg.agent import cache as agent_cache
from cyborg.objects import inventory

HOST = 'compute-1'


def _device():
    return inventory.DriverDevice(
        type='FPGA', vendor='abcd', model='fake',
        controlpath_id=inventory.ControlPathID('0000:0c:00.0'))


def test_a_saved_record_is_loaded(tmp_path):
    cache = agent_cache.ReportCache(str(tmp_path / 'agent.json'), HOST)
    assert cache.load() == (None, None)
    cache.save('d1', [_device()])
    assert cache.load() == ('d1', [_device()])
    assert [p.name for p in tmp_path.iterdir()] == ['agent.json']


@pytest.mark.parametrize('text', [
    'null', '[]', '"agent"', '3', '{"hostname": "compute-1"',
    '{"hostname": "compute-1", "digest": "d1", "devices": 3}',
    '{"hostname": "compute-1", "digest": "d1", "devices": [null]}',
    '{"hostname": "compute-1", "devices": []}'])
def test_a_record_that_is_not_one_is_no_record(tmp_path, text):
    path = tmp_path / 'agent.json'
    path.write_text(text)
    assert agent_cache.ReportCache(str(path), HOST).load() == (None, None)


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
    path.write_text(json.dumps({'hostname': HOST, 'digest': 'd1',
                                'devices': []}))
    assert cache.load() == ('d1', [])
    path.write_text('null')
    assert cache.load() == (None, None)
    assert len(caplog.records) == 2


def test_a_failed_save_leaves_the_old_record(tmp_path):
    path = tmp_path / 'agent.json'
    cache = agent_cache.ReportCache(str(path), HOST)
    cache.save('d1', [])
    # The record cannot be replaced (its temporary file cannot be made).
    (tmp_path / ('agent.json.tmp.%d' % os.getpid())).mkdir()
    with pytest.raises(OSError):
        cache.save('d2', [_device()])
    assert cache.load() == ('d1', [])


def test_a_record_that_cannot_be_removed_is_left(tmp_path):
    path = tmp_path / 'agent.json'
    path.mkdir()
    agent_cache.ReportCache(str(path), HOST).clear()
    assert path.is_dir()
