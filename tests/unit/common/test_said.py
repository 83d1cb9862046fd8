"""A lasting problem is said when it starts or changes, not at every
read (cyborg.common.said): the agent's report cache, its health records
and NVML's reads of each GPU say theirs through it."""

import logging

from oslo_log import log as oslo_logging

from cyborg.common import said

LOGGER = 'cyborg.tests.said'


def _said(caplog):
    found = [(r.levelname, r.getMessage()) for r in caplog.records
             if r.name == LOGGER]
    caplog.clear()
    return found


def test_a_problem_is_said_when_it_starts_and_changes(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    problems = said.Problems(oslo_logging.getLogger(LOGGER))
    assert problems.say('EIO', 'Cannot read %s (%s)', 'x', 'EIO')
    for _ in range(3):
        assert not problems.say('EIO', 'Cannot read %s (%s)', 'x', 'EIO')
    assert _said(caplog) == [('WARNING', 'Cannot read x (EIO)')]
    assert problems.say('ENOSPC', 'Cannot write %s', 'x',
                        level=logging.ERROR)
    assert _said(caplog) == [('ERROR', 'Cannot write x')]
    # Solved: the same problem, back, is said again.
    assert problems.solved() == 'ENOSPC'
    assert problems.solved() is None
    assert problems.say('ENOSPC', 'Cannot write %s', 'x')
    assert _said(caplog) == [('WARNING', 'Cannot write x')]


def test_each_thing_has_its_own_problem(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    problems = said.Problems(oslo_logging.getLogger(LOGGER))
    for _ in range(2):
        problems.say('lost', 'GPU %s lost', 'a', key='a')
        problems.say('lost', 'GPU %s lost', 'b', key='b')
    assert _said(caplog) == [('WARNING', 'GPU a lost'),
                             ('WARNING', 'GPU b lost')]
    assert sorted(problems) == ['a', 'b']
    for key in problems:
        if key == 'a':
            assert problems.solved(key) == 'lost'
    assert list(problems) == ['b']
    assert not problems.say('lost', 'GPU %s lost', 'b', key='b')
    assert problems.say('lost', 'GPU %s lost', 'a', key='a')
