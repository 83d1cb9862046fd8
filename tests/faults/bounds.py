"""A hard time bound for a fault test: SIGALRM fails it (with whatever
it was waiting for in the traceback) instead of letting it hang the
stage.  Use as a fixture factory: ``with hard_bound(60): ...``."""

import contextlib
import signal


class BoundExceeded(AssertionError):
    pass


@contextlib.contextmanager
def hard_bound(seconds):
    def _expired(_signum, _frame):
        raise BoundExceeded('the test ran past its %d s bound' % seconds)

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
