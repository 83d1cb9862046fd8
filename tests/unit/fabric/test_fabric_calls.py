"""Fabric driver calls with a deadline (cyborg.fabric.calls): the caller
stops waiting, the driver's thread lingers; a later call for the same
address waits for a call that did not answer, and is not made when it
does not return in time; a driver's own errors pass through."""

import threading
import time
import uuid as uuidlib

import pytest

from cyborg.fabric import base
from cyborg.fabric import calls


class _Driver(base.FabricDriver):
    """Records its calls; a call for an address in ``hold`` waits until
    the address's event is set."""

    def __init__(self):
        super().__init__(None)
        self.name = 'test-' + uuidlib.uuid4().hex[:8]
        self.hold = {}
        self.calls = []
        self.inside = 0
        self.most_inside = 0
        self._lock = threading.Lock()

    def _do(self, op, handle, hostname):
        with self._lock:
            self.calls.append((op, handle.fabric_address, hostname))
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            event = self.hold.get(handle.fabric_address)
            if event is not None:
                assert event.wait(30)
            if hostname == 'refusing':
                raise TimeoutError('the fabric manager timed out')
            return {'op': op}
        finally:
            with self._lock:
                self.inside -= 1

    def attach(self, handle, hostname, instance_uuid):
        return self._do('attach', handle, hostname)

    def detach(self, handle, hostname, instance_uuid):
        return self._do('detach', handle, hostname)


def _handle(address):
    return base.FabricHandle(uuid=address, fabric_address=address,
                             pool_name='p')


def test_answers_and_the_driver_s_own_errors_pass_through():
    driver = _Driver()
    assert calls.call(driver, 'attach', _handle('a'), 'h', 'i', 5) == {
        'op': 'attach'}
    # The driver's own timeout is its refusal, not ours.
    with pytest.raises(TimeoutError, match='fabric manager'):
        calls.call(driver, 'detach', _handle('a'), 'refusing', 'i', 5)


def test_an_unanswered_call_holds_its_address_until_it_returns():
    driver = _Driver()
    driver.hold['a'] = go = threading.Event()
    try:
        began = time.monotonic()
        with pytest.raises(calls.Unanswered, match='did not answer the '
                                                   'attach within 0.3 s'):
            calls.call(driver, 'attach', _handle('a'), 'h', 'i', 0.3)
        assert time.monotonic() - began < 2
        # The detach that would undo it is not made while it lingers...
        with pytest.raises(calls.Busy, match='did not answer'):
            calls.call(driver, 'detach', _handle('a'), 'h', 'i', 0.3)
        assert driver.calls == [('attach', 'a', 'h')]
        # ...another address goes on.
        calls.call(driver, 'detach', _handle('b'), 'h', 'i', 5)
    finally:
        go.set()
    # Once the attach returned, the detach runs after it.
    calls.call(driver, 'detach', _handle('a'), 'h', 'i', 5)
    assert driver.calls[-1] == ('detach', 'a', 'h')


def test_calls_answered_in_time_are_not_held_up():
    driver = _Driver()
    driver.hold['a'] = go = threading.Event()
    first = threading.Thread(target=calls.call, args=(
        driver, 'attach', _handle('a'), 'h', 'i', 30))
    first.start()
    try:
        while not driver.calls:
            time.sleep(0.01)
        del driver.hold['a']
        # The first call is within its time: a second one for the same
        # address does not wait for it.
        calls.call(driver, 'attach', _handle('a'), 'h', 'i', 5)
    finally:
        go.set()
        first.join(30)
    assert driver.most_inside == 2


def test_a_hung_driver_holds_no_more_than_its_slots(monkeypatch):
    monkeypatch.setattr(calls, 'SLOTS', 2)
    driver = _Driver()
    go = threading.Event()
    try:
        for address in ('a', 'b'):
            driver.hold[address] = go
            with pytest.raises(calls.Unanswered):
                calls.call(driver, 'attach', _handle(address), 'h', 'i',
                           0.2)
        with pytest.raises(calls.Busy, match='2 calls'):
            calls.call(driver, 'attach', _handle('c'), 'h', 'i', 0.2)
        assert [c[1] for c in driver.calls] == ['a', 'b']
    finally:
        go.set()
    calls.call(driver, 'attach', _handle('c'), 'h', 'i', 5)


def test_calls_made_together_share_one_deadline():
    """Four calls to a driver that hangs cost their caller one wait, not
    four; each outcome comes back in its call's place, a driver's own
    error and an answer too."""
    driver = _Driver()
    go = threading.Event()
    for address in ('a', 'b', 'c', 'd'):
        driver.hold[address] = go
    requests = [(driver, 'detach', _handle(address), 'h', 'i')
                for address in ('a', 'b', 'c', 'd')]
    requests += [(driver, 'detach', _handle('e'), 'refusing', 'i'),
                 (driver, 'attach', _handle('f'), 'h', 'i')]
    try:
        began = time.monotonic()
        outcomes = calls.call_each(requests, 0.5)
        took = time.monotonic() - began
    finally:
        go.set()
    assert took < 1.5, took
    assert [type(error) for _answer, error in outcomes[:4]] == [
        calls.Unanswered] * 4
    assert isinstance(outcomes[4][1], TimeoutError)
    assert outcomes[5] == ({'op': 'attach'}, None)
    assert driver.most_inside >= 4
    assert calls.call_each([], 1) == []


def test_calls_beyond_the_slots_are_busy_without_waiting_again(
        monkeypatch):
    """Past ``SLOTS`` calls, the later ones find the hung calls holding
    the slots and are not made, within the same time: not a whole wait
    more each."""
    monkeypatch.setattr(calls, 'SLOTS', 2)
    driver = _Driver()
    go = threading.Event()
    addresses = ('a', 'b', 'c', 'd', 'e')
    for address in addresses:
        driver.hold[address] = go
    try:
        began = time.monotonic()
        outcomes = calls.call_each(
            [(driver, 'detach', _handle(address), 'h', 'i')
             for address in addresses], 0.3)
        took = time.monotonic() - began
    finally:
        go.set()
    assert took < 1.3, took
    errors = [type(error) for _answer, error in outcomes]
    assert errors.count(calls.Unanswered) == 2
    assert errors.count(calls.Busy) == 3
    assert len(driver.calls) == 2
