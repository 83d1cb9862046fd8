"""The cards this agent is programming now.

One programming of a card at a time: the conductor gives up on one that
outlives the bind's time and may ask again while the vendor tool still
writes to the card, and a second tool beside it could leave the card with
neither image.  The health monitor asks too: a re-probe of a card being
programmed answers "not yet" rather than trusting a card mid-write, and
its periodic checks keep the card's previous readings until a check has
run after the programming ended (``quiet``).
"""

import contextlib
import threading
import time

from cyborg.common import exception


class InProgress:
    """Control path addresses being programmed, with when each started."""

    def __init__(self):
        self._lock = threading.Lock()
        self._started = {}      # address -> time.monotonic()
        self._ended = set()     # ended since the last ``quiet``

    @contextlib.contextmanager
    def alone(self, address):
        """Hold ``address`` for the duration; Conflict (409) at once when
        it is held already."""
        with self._lock:
            if address in self._started:
                raise exception.Conflict(
                    reason=f'FPGA {address} is being programmed (for '
                           f'{self._seconds(address):.0f} s); try again '
                           f'once that ends')
            self._started[address] = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                del self._started[address]
                self._ended.add(address)

    def seconds(self, address):
        """How long ``address`` has been programmed; None when it is not."""
        with self._lock:
            return (self._seconds(address) if address in self._started
                    else None)

    def quiet(self):
        """The addresses whose health readings say nothing now: those
        being programmed, and those whose programming ended since the
        previous call (a check that began before the end may still read
        what the write did).  For one caller: the health monitor, once
        per check."""
        with self._lock:
            quiet = set(self._started) | self._ended
            self._ended = set()
        return quiet

    def _seconds(self, address):
        return time.monotonic() - self._started[address]
